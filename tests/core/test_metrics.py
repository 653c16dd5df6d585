"""Recording, attribution and summing of fine metrics, on scripted clocks."""

from __future__ import annotations

import contextvars
import math

import pytest

from kernel_cluster.core.metrics import (
    ContextMeter,
    MeterFrame,
    MetricsLedger,
    ThreadTimeline,
    add_metrics,
)


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


def test_timeline_splits_gaps_into_executor_and_idle():
    tl = ThreadTimeline(now=0.0, busy=True)
    tl.add_threads([1], now=0.0)
    # handed to the pool at 2, picked up at 2.5, ran until 4: idle 2, executor 0.5
    assert tl.task_ran(1, submitted=2.0, start=2.5, stop=4.0) == (0.5, 2.0)
    # already queued when the thread became free: the whole gap is hand-off
    assert tl.task_ran(1, submitted=3.0, start=4.1, stop=5.0) == pytest.approx((0.1, 0.0))


def test_timeline_counts_no_idle_while_the_cluster_is_quiet():
    tl = ThreadTimeline(now=0.0, busy=True)
    tl.add_threads([1, 2], now=0.0)
    tl.task_ran(1, submitted=0.0, start=0.0, stop=1.0)
    # everything finished: thread 1 was free 1..3, thread 2 free 0..3
    assert tl.set_busy(False, now=3.0) == pytest.approx(2.0 + 3.0)
    # quiet from 3 to 10: nobody's time; then work arrives at 10, picked up at 10.5
    tl.set_busy(True, now=10.0)
    executor, idle = tl.task_ran(1, submitted=10.0, start=10.5, stop=11.0)
    assert (executor, idle) == (0.5, 0.0)


def test_timeline_leaves_running_threads_to_their_task():
    tl = ThreadTimeline(now=0.0, busy=True)
    tl.add_threads([1, 2], now=0.0)
    assert tl.set_busy(False, now=5.0, running={1}) == 5.0  # only thread 2 was free


def test_timeline_partitions_a_thread_exactly():
    """Tasks' runs plus executor plus idle cover the busy period, nothing twice."""
    tl = ThreadTimeline(now=0.0, busy=True)
    tl.add_threads([7], now=0.0)
    runs = [(0.5, 1.0, 2.0), (1.5, 2.0, 3.5), (4.0, 4.2, 6.0)]  # submitted, start, stop
    total = 0.0
    for submitted, start, stop in runs:
        executor, idle = tl.task_ran(7, submitted, start, stop)
        total += executor + idle + (stop - start)
    total += tl.set_busy(False, now=7.0)
    assert total == pytest.approx(7.0)


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
