"""The task runner's accounting under simulated clocks (``Clocks``): exact, repeatable.

Times are multiples of 2**-20 s (about a microsecond), so every sum and difference
the runner and the thread's account take is exact in floating point, and the two
accounting paths can be compared with ``==``.
"""

from __future__ import annotations

import threading

import cloudpickle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_cluster import context_meter
from kernel_cluster.core.spec import Call, TaskSpec
from kernel_cluster.core.thread_accounts import ThreadTimeline
from kernel_cluster.core.worker_messages import ExecuteFailed, ExecuteSucceeded
from kernel_cluster.engine.execute import _SHORT_GAP, _SHORT_TASK, Clocks, TaskRunner

UNIT = 2.0**-20  # seconds
EPOCH = 1_700_000_000.0  # what the simulated epoch clock reads at wall time 0


class SimClock:
    """Simulated time for one task thread: the wall clock, and its CPU clock, which
    moves with the wall clock while the thread is on the CPU. A wall reading costs
    ``reading`` seconds of CPU (0: readings are free)."""

    def __init__(self, reading: float = 0.0) -> None:
        self.t = 0.0
        self.cpu = 0.0
        self.reading = reading

    def run_for(self, seconds: float, on_cpu: bool = True) -> None:
        self.t += seconds
        if on_cpu:
            self.cpu += seconds

    def wall(self) -> float:
        if self.reading:
            self.run_for(self.reading)
        return self.t

    def clocks(self) -> Clocks:
        return Clocks(
            wall=self.wall,
            thread_cpu=lambda: self.cpu,
            cpu_of=lambda thread: self.cpu,
            epoch=lambda: self.t + EPOCH,
        )


def runner_on(sim: SimClock) -> tuple[ThreadTimeline, TaskRunner]:
    timeline = ThreadTimeline(busy=True)
    timeline.add_threads([threading.get_ident()], sim.t)
    return timeline, TaskRunner(timeline.accounts[threading.get_ident()], sim.clocks())


def taken(timeline: ThreadTimeline, into: dict) -> dict:
    timeline.take(lambda key, value: into.__setitem__(key, into.get(key, 0) + value))
    return into


# -- the short and the full accounting paths -----------------------------------------------

SIM = SimClock()  # the simulation the task functions below advance (one run at a time)


def _unpickling_takes(units: int) -> int:
    SIM.run_for(units * UNIT)
    return units


class SlowToLoad:
    """Unpickling it takes ``units`` of simulated CPU time (a task's deserialize)."""

    def __init__(self, units: int) -> None:
        self.units = units

    def __reduce__(self) -> tuple:
        return (_unpickling_takes, (self.units,))


class Result:
    """A task's value whose size takes ``units`` to measure (``sizeof`` reads
    ``nbytes``): the run's ``other``, on the CPU unless the thread then waits."""

    def __init__(self, size: int, units: int, on_cpu: bool) -> None:
        self.size, self.units, self.on_cpu = size, units, on_cpu

    @property
    def nbytes(self) -> int:
        SIM.run_for(self.units * UNIT, self.on_cpu)
        return self.size


def work(loaded: object, units: int, on_cpu: bool, rows: int, fails: bool, result: Result):
    if rows:  # a digest: such a task is accounted in full on either path
        context_meter.digest_metric("rows", rows, "count")
    SIM.run_for(units * UNIT, on_cpu)
    if fails:
        raise ValueError("failed on purpose")
    return result


task_shapes = st.fixed_dictionaries(
    {
        "group": st.sampled_from([(None, "a"), (None, "b"), ("s1", "a")]),
        # before the task: how long the thread was free, and when the task was handed
        # over: at once (0), queued before the thread was free, or late (idle until)
        "gap": st.one_of(st.integers(0, 40), st.integers(60, 30_000)),
        "handed": st.sampled_from(["continuation", "queued", "late"]),
        "pickled": st.booleans(),
        "load": st.integers(0, 30),
        # the task's own code: tiny (short path) or not; on the CPU or waiting
        "units": st.one_of(st.integers(0, 15), st.integers(16, 20_000)),
        "on_cpu": st.booleans(),
        "rows": st.sampled_from([0, 0, 0, 3]),
        "fails": st.sampled_from([False] * 9 + [True]),
        "measure": st.integers(0, 10),
        "size": st.integers(0, 10_000),
        "look": st.booleans(),  # the worker's loop reads the account after it
    }
)


def simulate(shapes: list[dict], in_full: bool) -> tuple[dict, list]:
    """Run the tasks on a fresh runner under a fresh simulated clock; the account's
    totals and each event's task-stream times. ``in_full``: hand every task its
    inputs as a callable, which takes the full accounting path."""
    global SIM
    SIM = sim = SimClock()
    timeline, runner = runner_on(sim)
    totals: dict = {}
    events = []
    measured = 0.0  # how long the last task's result took to measure
    for i, shape in enumerate(shapes):
        free_at = sim.t
        gap = shape["gap"] * UNIT
        # The runner takes the time from the end of a task's code to the start of
        # the next one for CPU work when shorter than _SHORT_GAP, and for waiting
        # when not, and a tiny task for CPU work: so does the simulation, so that
        # the runner's estimate of the CPU clock and the clock's readings agree.
        nxt = shapes[i + 1]["gap"] * UNIT if i + 1 < len(shapes) else 0.0
        sim.run_for(gap, on_cpu=measured + gap < _SHORT_GAP)
        measured = 0.0 if shape["fails"] else shape["measure"] * UNIT
        submitted = {
            "continuation": 0.0,
            "queued": max(free_at - 5 * UNIT, UNIT),
            "late": free_at + gap / 2,
        }[shape["handed"]]
        waits_after = nxt + shape["measure"] * UNIT >= _SHORT_GAP
        result = Result(shape["size"], shape["measure"], on_cpu=not waits_after)
        loaded: object = SlowToLoad(shape["load"]) if shape["pickled"] else None
        on_cpu = shape["on_cpu"] or shape["units"] * UNIT < _SHORT_TASK
        args = (loaded, shape["units"], on_cpu, shape["rows"], shape["fails"], result)
        spec: object = TaskSpec(Call(work, args), frozenset())
        if shape["pickled"]:
            spec = cloudpickle.dumps(spec)
        data: object = (lambda: {}) if in_full else {}
        ev = runner.run(f"t-{i}", spec, data, submitted, shape["group"])
        assert isinstance(ev, ExecuteFailed if shape["fails"] else ExecuteSucceeded)
        events.append(ev.startstops)
        if shape["look"]:
            taken(timeline, totals)
    return taken(timeline, totals), events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(task_shapes, min_size=1, max_size=40))
def test_the_short_and_the_full_path_account_the_same_readings_alike(shapes):
    """Tiny tasks with their inputs in hand are accounted by ``TaskRunner.run``
    alone (the short path: CPU time estimated, a same-group shortcut past
    ``ThreadAccount.totals_for``); a task whose inputs come from a callable always
    by ``TaskRunner._succeeded`` (the full path), a failed one by ``TaskTiming`` and
    ``ThreadAccount.add`` on either. For the same clock readings, both must give
    every group and activity the same total, and every task the same times."""
    short = simulate(shapes, in_full=False)
    full = simulate(shapes, in_full=True)
    assert short[0] == full[0]
    assert short[1] == full[1]
    assert sum(v for k, v in short[0].items() if k[3] == "tasks") == len(shapes)


# -- the CPU clock's estimate -------------------------------------------------------------


@pytest.mark.parametrize("gaps_on_cpu", [True, False])
def test_a_task_after_a_long_stream_of_tiny_tasks_keeps_its_cpu_split(gaps_on_cpu):
    """Tiny tasks skip the CPU clock, and the runner takes the short gaps between them
    for CPU: whatever that gets wrong must not pile up onto the next task that reads
    the clock. After 10,000 tiny tasks, a 20 ms sleep must come out as waiting when
    the gaps were spent on the CPU, and 20 ms of CPU work as CPU when the gaps were
    spent waiting (for the GIL, say).

    The runner's clocks are simulated: a wall-clock reading takes 1 us of CPU, a
    tiny task 2 us, the gap before the next task 10 us.
    """
    sim = SimClock(reading=1e-6)

    def tiny(x):
        sim.run_for(2e-6)
        return x

    def last(x):
        sim.run_for(0.02, on_cpu=not gaps_on_cpu)
        return x

    timeline, runner = runner_on(sim)
    spec = TaskSpec(Call(tiny, (1,)), frozenset())
    for i in range(10_000):  # 150 ms, of which 100 ms between the tasks
        runner.run(f"tiny-{i}", spec, {}, 0.0, (None, "tiny"))
        sim.run_for(10e-6, on_cpu=gaps_on_cpu)
    runner.run("last-0", TaskSpec(Call(last, (0,)), frozenset()), {}, 0.0, (None, "last"))
    total = taken(timeline, {})
    cpu = total.get(("execute", None, "last", "thread-cpu", "seconds"), 0.0)
    noncpu = total.get(("execute", None, "last", "thread-noncpu", "seconds"), 0.0)
    share = cpu / (cpu + noncpu)
    assert share > 0.5 if not gaps_on_cpu else share < 0.1, (cpu, noncpu)
    tiny_cpu = total[("execute", None, "tiny", "thread-cpu", "seconds")]
    assert tiny_cpu == pytest.approx(10_000 * 3e-6, rel=0.01)  # its own code and a reading


def test_the_task_stream_is_stamped_with_the_epoch_clock():
    """Start and stop times for the task stream: the wall clock's readings moved onto
    the epoch clock (the scheduler's kind of time)."""
    sim = SimClock()
    sim.run_for(3.0)
    _, runner = runner_on(sim)

    def inc(x):
        sim.run_for(4 * UNIT)
        return x + 1

    ev = runner.run("inc-1", TaskSpec(Call(inc, (1,)), frozenset()), {}, 0.0, (None, "inc"))
    assert ev.startstops == [("compute", EPOCH + 3.0, EPOCH + 3.0 + 4 * UNIT)]


def test_rereading_the_cpu_clock_uses_the_injected_clock_of_the_thread():
    sim = SimClock()
    _, runner = runner_on(sim)
    sim.run_for(1.0, on_cpu=False)
    sim.cpu = 0.25
    runner.reread_cpu_clock()
    assert runner.cpu_offset == 0.25 - 1.0 and runner.mark_at == 1.0

    def no_clock(thread: int) -> float:
        raise OSError("no thread CPU clock here")

    runner._cpu_of = no_clock
    runner.reread_cpu_clock()
    assert runner.read_by == -1.0  # read at the next task instead
