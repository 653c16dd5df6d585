"""Recording, attribution and summing of fine metrics, on scripted clocks."""

from __future__ import annotations

import contextvars
import math

import pytest

from kernel_cluster.core.metrics import (
    ContextMeter,
    MeterFrame,
    MetricsLedger,
    add_metrics,
    check_metric,
)
from kernel_cluster.core.thread_accounts import TaskTiming, ThreadTimeline


class Clocks:
    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def tick(self, wall: float, cpu: float = 0.0) -> None:
        self.wall += wall
        self.cpu += cpu


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def meter(clocks: Clocks) -> ContextMeter:
    return ContextMeter(wall=lambda: clocks.wall, cpu=lambda: clocks.cpu)


def test_outside_any_listener_everything_is_a_no_op(meter):
    meter.digest_metric("x", 1, "count")
    with meter.meter("I/O"):
        pass
    assert not meter.active


def test_nested_meters_subtract_inner_time_exactly(meter, clocks):
    seen = []
    frame = MeterFrame()
    with meter.scope(lambda *d: seen.append(d), frame), meter.meter("outer"):
        clocks.tick(1.0, cpu=0.5)
        with meter.meter("inner"):
            clocks.tick(2.0, cpu=0.25)
        clocks.tick(0.5)
    assert seen == [("inner", 2.0, "seconds"), ("outer", 1.5, "seconds")]
    # the enclosing task sees the whole block as metered, wall and CPU
    assert frame.inner_wall == 3.5
    assert frame.inner_cpu == 0.75


def test_meter_works_as_a_decorator(meter, clocks):
    seen = []

    @meter.meter("I/O")
    def read():
        clocks.tick(0.25)
        return 7

    with meter.scope(lambda *d: seen.append(d), MeterFrame()):
        assert read() == 7
        assert read() == 7
    assert seen == [("I/O", 0.25, "seconds")] * 2


def test_callbacks_stack_and_do_not_leak_between_contexts(meter):
    a, b = [], []
    with meter.add_callback(lambda *d: a.append(d)), meter.add_callback(lambda *d: b.append(d)):
        meter.digest_metric("x", 1, "count")
    meter.digest_metric("y", 1, "count")

    # another context (another task, another thread) sees none of this one's listeners
    other: list = []

    def elsewhere() -> None:
        with meter.add_callback(lambda *d: other.append(d)):
            meter.digest_metric("z", 2, "bytes")

    contextvars.Context().run(elsewhere)
    assert a == b == [("x", 1, "count")]
    assert other == [("z", 2, "bytes")]


@pytest.mark.parametrize(
    "label, value, unit, error",
    [
        (["not", "hashable"], 1, "count", TypeError),
        ("x", math.nan, "seconds", ValueError),
        ("x", math.inf, "bytes", ValueError),
        ("x", "12", "bytes", TypeError),
        ("x", True, "count", TypeError),
        ("x", 1, "", TypeError),
    ],
)
def test_bad_metrics_raise_where_they_are_made(meter, label, value, unit, error):
    with meter.add_callback(lambda *d: None), pytest.raises(error, match=r"[Mm]etric"):
        meter.digest_metric(label, value, unit)


G = (None, "f")  # a task group: (span, prefix)


def taken(tl: ThreadTimeline) -> dict:
    out: dict = {}
    tl.take(lambda key, value: out.__setitem__(key, out.get(key, 0) + value))
    return out


def ran(tl: ThreadTimeline, thread: int, submitted: float, start: float, stop: float) -> None:
    """A task of group G that did nothing but compute (all CPU)."""
    tl.accounts[thread].add(G, TaskTiming(submitted, start, stop, cpu=stop - start, nbytes=8))


def executor_and_idle(tl: ThreadTimeline) -> tuple[float, float]:
    out = taken(tl)
    return (
        out.get(("execute", *G, "executor", "seconds"), 0.0),
        out.get(("execute", None, None, "idle", "seconds"), 0.0),
    )


def test_timeline_splits_gaps_into_executor_and_idle():
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1], now=0.0)
    # handed to the pool at 2, picked up at 2.5, ran until 4: idle 2, executor 0.5
    ran(tl, 1, submitted=2.0, start=2.5, stop=4.0)
    assert executor_and_idle(tl) == (0.5, 2.0)
    # already queued when the thread became free: the whole gap is hand-off
    ran(tl, 1, submitted=3.0, start=4.1, stop=5.0)
    assert executor_and_idle(tl) == pytest.approx((0.1, 0.0))
    # a continuation (submitted 0): handed over the moment the thread was free
    ran(tl, 1, submitted=0.0, start=5.25, stop=6.0)
    assert executor_and_idle(tl) == pytest.approx((0.25, 0.0))


def test_timeline_counts_no_idle_while_the_cluster_is_quiet():
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1, 2], now=0.0)
    ran(tl, 1, submitted=0.0, start=0.0, stop=1.0)
    # everything finished: thread 1 was free 1..3, thread 2 free 0..3
    assert tl.set_busy(False, now=3.0) == pytest.approx(2.0 + 3.0)
    taken(tl)
    # quiet from 3 to 10: nobody's time; then work arrives at 10, picked up at 10.5
    tl.set_busy(True, now=10.0)
    ran(tl, 1, submitted=10.0, start=10.5, stop=11.0)
    assert executor_and_idle(tl) == (0.5, 0.0)


def test_timeline_leaves_running_threads_to_their_task():
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1, 2], now=0.0)
    assert tl.set_busy(False, now=5.0, running={1}) == 5.0  # only thread 2 was free


def test_timeline_partitions_a_thread_exactly():
    """Tasks' runs plus executor plus idle cover the busy period, nothing twice."""
    tl = ThreadTimeline(busy=True)
    tl.add_threads([7], now=0.0)
    runs = [(0.5, 1.0, 2.0), (1.5, 2.0, 3.5), (4.0, 4.2, 6.0)]  # submitted, start, stop
    for submitted, start, stop in runs:
        ran(tl, 7, submitted, start, stop)
    total = tl.set_busy(False, now=7.0) + sum(
        v for (_, *_, unit), v in taken(tl).items() if unit == "seconds"
    )
    assert total == pytest.approx(7.0)


def test_thread_account_is_taken_once_and_keeps_integers():
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1], now=0.0)
    account = tl.accounts[1]
    account.add(G, TaskTiming(0.0, 0.0, 1.0, cpu=0.75, noncpu=0.25, nbytes=100))
    account.add_extra(G, [("I/O", 0.5, "seconds"), ("rows", 3, "count")])
    first = taken(tl)
    assert first == {
        ("execute", *G, "thread-cpu", "seconds"): 0.75,
        ("execute", *G, "thread-noncpu", "seconds"): 0.25,
        ("execute", *G, "tasks", "count"): 1,
        ("execute", *G, "output", "bytes"): 100,
        ("execute", *G, "I/O", "seconds"): 0.5,
        ("execute", *G, "rows", "count"): 3,
    }
    assert taken(tl) == {}  # nothing new: nothing twice
    account.add(G, TaskTiming(0.0, 1.0, 2.0, cpu=1.0, nbytes=20))
    account.add_extra(G, [("rows", 2, "count")])
    second = taken(tl)
    assert second[("execute", *G, "tasks", "count")] == 1
    assert second[("execute", *G, "output", "bytes")] == 20
    assert second[("execute", *G, "rows", "count")] == 2
    assert all(type(second[k]) is int for k in second if k[-1] in ("count", "bytes"))
    assert min(second.values()) > 0


def test_thread_account_read_mid_update_delays_and_never_doubles():
    """The loop may look while the thread is half-way through a task's update: that
    part shows at the next look; the sum over looks is exact."""
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1], now=0.0)
    account = tl.accounts[1]
    total: dict = {}

    def look() -> None:
        for key, value in taken(tl).items():
            total[key] = total.get(key, 0) + value

    account.add(G, TaskTiming(0.0, 0.0, 1.0, cpu=1.0, nbytes=10))
    account.add_extra(G, [("I/O", 0.5, "seconds")])
    look()
    # idle 1..2, executor 2..3
    account.add(G, TaskTiming(2.0, 3.0, 4.0, cpu=0.5, noncpu=0.5, nbytes=30))
    look()  # caught after the second task's sums, before its metered seconds
    account.add_extra(G, [("I/O", 0.25, "seconds")])
    look()
    # caught between two fields of a group's totals (updated one by one, in place)
    totals = account.sums[G]
    totals.cpu += 0.25
    look()
    totals.count += 1
    look()
    assert total[("execute", *G, "thread-cpu", "seconds")] == 1.75
    assert total[("execute", *G, "tasks", "count")] == 3
    assert total[("execute", *G, "output", "bytes")] == 40
    assert total[("execute", *G, "I/O", "seconds")] == 0.75
    assert total[("execute", None, None, "idle", "seconds")] == 1.0
    assert total[("execute", *G, "executor", "seconds")] == 1.0


def test_ledger_delta_is_taken_once_and_totals_keep_growing():
    ledger = MetricsLedger()
    ledger.add(("execute", None, "f", "tasks", "count"), 2)
    ledger.add(("execute", None, "f", "thread-cpu", "seconds"), 0.5)
    first = ledger.take_delta()
    assert first == {
        ("execute", None, "f", "tasks", "count"): 2,
        ("execute", None, "f", "thread-cpu", "seconds"): 0.5,
    }
    assert ledger.take_delta() == {}
    ledger.add(("execute", None, "f", "tasks", "count"), 3)
    assert ledger.take_delta() == {("execute", None, "f", "tasks", "count"): 3}
    assert ledger.total[("execute", None, "f", "tasks", "count")] == 5
    summed: dict = {}
    add_metrics(summed, first)
    add_metrics(summed, {("execute", None, "f", "tasks", "count"): 3})
    assert summed[("execute", None, "f", "tasks", "count")] == 5
    assert isinstance(summed[("execute", None, "f", "tasks", "count")], int)


def test_thread_account_forgets_groups_that_stopped_changing_and_loses_nothing():
    """A new default span per ``submit().result()`` means a new group per task: the
    account must not keep them all (each heartbeat would walk them), and letting
    them go must neither lose nor repeat a single addition."""
    tl = ThreadTimeline(busy=True)
    tl.add_threads([1], now=0.0)
    account = tl.accounts[1]
    total: dict = {}

    def look() -> None:
        for key, value in taken(tl).items():
            total[key] = total.get(key, 0) + value

    t = 0.0
    for i in range(2_000):
        group = (f"span-{i}", "inc")
        account.add(group, TaskTiming(t, t, t + 1.0, cpu=0.5, noncpu=0.5, nbytes=8))
        account.add_extra(group, [("rows", 1, "count")])
        if i % 3 == 0:  # the same group again, after the loop has looked
            look()
            account.add(group, TaskTiming(t + 1.0, t + 1.0, t + 2.0, cpu=1.0, nbytes=8))
        t += 2.0
        if i % 7 == 0:
            look()
        assert len(account.sums) < 20 and len(account.extra) < 20
    look()
    look()
    assert not account.retired
    n = 2_000 + len(range(0, 2_000, 3))
    cpu = sum(v for k, v in total.items() if k[3] == "thread-cpu")
    assert sum(v for k, v in total.items() if k[3] == "tasks") == n
    assert cpu == pytest.approx(0.5 * 2_000 + len(range(0, 2_000, 3)))
    assert sum(v for k, v in total.items() if k[3] == "rows") == 2_000
    assert all(v > 0 for v in total.values())
    # a group that comes back after it was let go starts afresh, and counts once
    back = ("span-0", "inc")
    account.add(back, TaskTiming(t, t, t + 1.0, cpu=0.25, nbytes=1))
    assert taken(tl)[("execute", *back, "tasks", "count")] == 1
    # the runner's inline path adds to the last group: never one that was let go
    assert account.last_group in account.sums
    assert account.last_totals is account.sums[account.last_group]


def test_ledger_totals_keep_the_latest_spans_and_fold_the_older_ones():
    ledger = MetricsLedger(max_spans=10)
    for i in range(1_000):
        ledger.add(("execute", f"span-{i}", "inc", "thread-cpu", "seconds"), 0.5)
        ledger.add(("execute", f"span-{i}", "inc", "tasks", "count"), 1)
        ledger.add(("gather-dep", "network", "bytes"), 10)
    assert len(ledger.total) <= 2 * 11 + 1
    assert ledger.total[("execute", "span-999", "inc", "tasks", "count")] == 1
    assert ledger.total[("execute", "folded", "inc", "tasks", "count")] == 990
    counts = sum(v for k, v in ledger.total.items() if k[-2] == "tasks")
    assert counts == 1_000  # nothing lost in the fold
    assert ledger.total[("gather-dep", "network", "bytes")] == 10_000
    # every delta went out whole: the fold is the worker's own summary
    assert sum(v for k, v in ledger.take_delta().items() if k[-2] == "tasks") == 1_000


def test_an_unhashable_label_is_named_by_its_type():
    with pytest.raises(TypeError, match=r"not list\.$"):
        check_metric(["I/O"], 1.0, "seconds")
