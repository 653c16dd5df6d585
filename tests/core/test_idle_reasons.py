"""Idle split by reason: the worker's reason clock, the thread accounts that file the
parts, and the scheduler's flag that tells workers it holds ready tasks. Times are on
a grid of whole seconds so that sums are exact and compared with ``==``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_cluster.core.idle_reasons import (
    IDLE_ACTIVITIES,
    NO_READY_TASK,
    OTHER,
    PAUSED,
    REASONS,
    SCHEDULER_QUEUED,
    WAITING_FOR_DATA,
    ReasonClock,
    idle_reason,
    is_idle,
    split,
)
from kernel_cluster.core.scheduler_messages import SetClusterBusy
from kernel_cluster.core.span_folding import with_idle
from kernel_cluster.core.thread_accounts import TaskTiming, ThreadTimeline

from .test_scheduler_state import Sched, computes


def test_the_reason_is_the_most_specific_thing_the_worker_knows():
    assert idle_reason(False, False, False, False) == NO_READY_TASK
    assert idle_reason(False, False, True, False) == SCHEDULER_QUEUED
    assert idle_reason(False, True, True, False) == WAITING_FOR_DATA  # its data comes first
    assert idle_reason(True, True, True, True) == PAUSED
    assert idle_reason(False, False, False, True) == OTHER  # held back on the worker
    assert [a for a in IDLE_ACTIVITIES if is_idle(a)] == list(IDLE_ACTIVITIES)
    assert is_idle("idle") and not is_idle("thread-cpu") and not is_idle(None)


def test_a_gap_is_split_at_each_change_of_reason():
    clock = ReasonClock(0.0)
    clock.set(WAITING_FOR_DATA, 2.0)
    clock.set(WAITING_FOR_DATA, 3.0)  # no change: nothing kept
    clock.set(SCHEDULER_QUEUED, 5.0)
    assert clock.history == [(0.0, NO_READY_TASK), (2.0, WAITING_FOR_DATA), (5.0, SCHEDULER_QUEUED)]
    assert split(clock, 1.0, 6.0) == [1.0, 3.0, 1.0, 0.0, 0.0]
    assert split(clock, 5.0, 9.0) == [0.0, 0.0, 4.0, 0.0, 0.0]  # after the last change
    assert split(clock, 2.0, 2.0) == [0.0] * 5
    # before the clock knew anything: other
    assert split(ReasonClock(10.0), 4.0, 12.0) == [2.0, 0.0, 0.0, 0.0, 6.0]


def test_two_changes_at_one_moment_keep_the_latest():
    clock = ReasonClock(0.0)
    clock.set(PAUSED, 1.0)
    clock.set(NO_READY_TASK, 1.0)
    clock.set(WAITING_FOR_DATA, 1.0)
    assert clock.history == [(0.0, NO_READY_TASK), (1.0, WAITING_FOR_DATA)]


def test_a_long_history_drops_its_oldest_half_and_that_time_becomes_other():
    clock = ReasonClock(0.0, limit=4)
    for t in range(1, 6):
        clock.set(PAUSED if t % 2 else NO_READY_TASK, float(t))
    assert len(clock.history) <= 4
    parts = split(clock, 0.0, 6.0)
    assert sum(parts) == 6.0
    assert parts[OTHER] == clock.history[0][0]


changes = st.lists(st.tuples(st.integers(1, 5), st.sampled_from(range(len(REASONS)))), max_size=12)


@given(changes, st.integers(0, 40), st.integers(0, 20))
def test_the_parts_of_any_gap_add_up_to_it(steps, start, length):
    clock = ReasonClock(3.0)
    t = 3.0
    for dt, reason in steps:
        t += dt
        clock.set(reason, t)
    assert sum(split(clock, float(start), float(start + length))) == length


def reason_at(history: list[tuple[float, int]], t: float) -> int:
    """The reason in force during the second [t, t+1), the slow way."""
    reason = OTHER
    for when, r in history:
        if when <= t:
            reason = r
    return reason


# a thread's tasks: (wait after the last one ended, hand-off delay, run time); a
# negative wait means handed over before the thread was free (no idle)
tasks = st.lists(st.tuples(st.integers(-3, 6), st.integers(0, 2), st.integers(1, 4)), max_size=8)


@settings(max_examples=150)
@given(st.lists(tasks, min_size=1, max_size=4), changes, st.integers(0, 6))
def test_idle_parts_sum_to_the_idle_they_replace_and_follow_the_clock(threads, steps, tail):
    """Any threads, tasks and changes of reason: the idle parts taken add up, reason
    by reason, to the seconds the clock was at that reason while a thread waited for
    work; with tasks and hand-offs they cover the busy period exactly."""
    tl = ThreadTimeline(busy=True, now=0.0)
    tl.add_threads(list(range(len(threads))), now=0.0)
    t = 0.0
    for dt, reason in steps:
        t += dt
        tl.reasons.set(reason, t)
    history = list(tl.reasons.history)
    expected = [0.0] * len(REASONS)
    task_seconds = 0.0
    ends = []  # where each thread's last task ended
    for thread, runs in enumerate(threads):
        free = 0.0
        for i, (wait, handoff, run) in enumerate(runs):
            submitted = max(0.0, free + wait)
            start = max(free, submitted) + handoff
            stop = start + run
            for second in range(int(free), int(min(submitted, start))):
                expected[reason_at(history, second)] += 1.0
            group = (f"span-{i % 2}", "f")
            tl.accounts[thread].add(group, TaskTiming(submitted, start, stop, cpu=float(run)))
            task_seconds += run
            free = stop
        ends.append(free)
    end = max(ends) + tail
    for free in ends:
        for second in range(int(free), int(end)):
            expected[reason_at(history, second)] += 1.0
    tl.set_busy(False, now=end)
    out: dict = {}
    tl.take(lambda key, value: out.__setitem__(key, out.get(key, 0) + value))
    parts = [0.0] * len(REASONS)
    for key, value in out.items():
        if is_idle(key[3]):
            assert key[2] is None  # idle belongs to no function
            parts[IDLE_ACTIVITIES.index(key[3])] += value
    assert parts == expected
    assert sum(parts) == tl.idle
    seconds = sum(v for k, v in out.items() if k[-1] == "seconds")
    assert seconds == end * len(threads)
    assert task_seconds <= seconds


def test_idle_is_filed_under_the_span_of_the_task_that_ended_it():
    tl = ThreadTimeline(busy=True, now=0.0)
    tl.add_threads([1, 2], now=0.0)
    tl.reasons.set(WAITING_FOR_DATA, 1.0)
    tl.accounts[1].add(("r", "f"), TaskTiming(0.0, 0.0, 1.0, cpu=1.0))
    tl.accounts[1].add(("s", "f"), TaskTiming(2.0, 2.0, 3.0, cpu=1.0))
    # the idle until the cluster went quiet goes to the span of the worker's last
    # task, for a thread that ran none of its tasks too (it waited on them all the same)
    tl.set_busy(False, now=5.0)
    out: dict = {}
    tl.take(lambda key, value: out.__setitem__(key, out.get(key, 0) + value))
    assert out[("execute", "s", None, "idle: no-ready-task", "seconds")] == 1.0
    assert out[("execute", "s", None, "idle: waiting-for-data", "seconds")] == 1 + 2 + 4
    assert not any(is_idle(k[3]) for k in out if k[1] == "r")
    # the span the scheduler names when it goes quiet, when it names one
    tl.set_busy(True, now=6.0)
    tl.set_busy(False, now=7.0, span="q")
    out.clear()
    tl.take(lambda key, value: out.__setitem__(key, out.get(key, 0) + value))
    assert out[("execute", "q", None, "idle: waiting-for-data", "seconds")] == 2.0


def test_idle_while_metrics_are_off_is_not_filed():
    tl = ThreadTimeline(busy=True, now=0.0)
    tl.add_threads([1], now=0.0)
    assert tl.set_busy(False, now=2.0, record=False) == 2.0
    out: dict = {}
    tl.take(lambda key, value: out.__setitem__(key, value))
    assert out == {} and tl.idle == 0.0


def busy_flags(instructions: list) -> list[tuple[bool, bool]]:
    return [(i.busy, i.queued) for i in instructions if isinstance(i, SetClusterBusy)]


def test_workers_are_told_while_the_scheduler_holds_ready_tasks():
    s = Sched(("w", 2), saturation=1.0)
    keys = [f"x{i}" for i in range(4)]
    out = s.submit({k: () for k in keys}, keys)
    assert busy_flags(out) == [(True, True)]  # two sent, two queued here
    assert s.s.holds_queued
    running = list(computes(out))
    out = s.finish(running.pop(), "w")
    assert busy_flags(out) == []  # one left in the queue: nothing changed
    running += computes(out)
    out = s.finish(running.pop(), "w")
    assert busy_flags(out) == [(True, False)]  # the queue ran dry
    running += computes(out)
    s.finish(running.pop(), "w")
    out = s.finish(running.pop(), "w")
    assert not running and busy_flags(out) == [(False, False)]


def test_without_queueing_the_flag_never_goes_up():
    s = Sched(("w", 1))
    out = s.submit({"a": (), "b": ()}, ["a", "b"])
    assert busy_flags(out) == [(True, False)]


@pytest.mark.parametrize("reason", range(len(REASONS)))
def test_every_reason_has_an_activity_named_after_it(reason):
    assert IDLE_ACTIVITIES[reason] == "idle: " + REASONS[reason]


def test_a_spans_idle_parts_are_trimmed_to_the_thread_seconds_it_had():
    cpu = ("execute", "f", "thread-cpu", "seconds")
    waiting = ("execute", None, "idle: waiting-for-data", "seconds")
    none_ready = ("execute", None, "idle: no-ready-task", "seconds")
    rest = ("execute", "N/A", "idle or other spans", "seconds")  # Dask's key
    # filed idle short of what the span had: the rest is "idle or other spans", not
    # one of the workers' idle reasons
    assert with_idle({cpu: 2.0, waiting: 1.0}, 4.0) == {cpu: 2.0, waiting: 1.0, rest: 1.0}
    # filed idle past it (begun before the span did): taken back in proportion
    out = with_idle({cpu: 2.0, waiting: 1.5, none_ready: 0.5, ("x", "n", "count"): 3}, 3.0)
    assert out == {cpu: 2.0, waiting: 0.75, none_ready: 0.25, ("x", "n", "count"): 3}
    # tasks alone past it: nothing to take back, and the tasks' time is not touched
    assert with_idle({cpu: 5.0, waiting: 1.0}, 4.0) == {cpu: 5.0, waiting: 0.0}
