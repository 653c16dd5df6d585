"""The critical path walked back from hand-made runs: which tasks, how they followed
each other, and each step's time by part. Times are whole or quarter seconds so that
sums are exact."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_cluster.core.critical_path import PARTS, TaskRun, critical_path


def run(key, deps=(), worker="a", thread=1, start=0.0, stop=1.0, sent=None, transfers=()):
    return TaskRun(key, tuple(deps), worker, thread, start, stop, sent, tuple(transfers))


def test_a_slow_chain_among_quick_work_is_the_path():
    runs = [
        run("c0", start=0.0, stop=2.0, sent=0.0),
        run("c1", ["c0"], start=2.25, stop=4.0, sent=2.0),
        run(
            "c2",
            ["c1"],
            worker="b",
            thread=7,
            start=4.75,
            stop=6.0,
            sent=4.25,
            transfers=[(4.5, 4.75)],
        ),
    ]
    quick = [run(f"q{i}", worker="b", thread=8, start=i / 4, stop=(i + 1) / 4) for i in range(8)]
    path = critical_path(runs + quick, enqueued=0.0, stop=6.0)
    assert [s.key for s in path.steps] == ["c0", "c1", "c2"]
    assert [s.via for s in path.steps] == ["start", "dependency", "dependency"]
    c1, c2 = path.steps[1], path.steps[2]
    assert (c1.scheduler, c1.transfer, c1.queued, c1.compute) == (0.0, 0.0, 0.25, 1.75)
    # sent 0.25 after c1 ended, its input fetched 4.5..4.75, started at once after
    assert (c2.scheduler, c2.transfer, c2.queued, c2.compute) == (0.25, 0.25, 0.25, 1.25)
    assert path.length == path.wall == 6.0 and path.covered == 1.0
    assert path.totals() == {
        "scheduler": 0.0 + 0.25,
        "transfer": 0.25,
        "queued": 0.5,
        "compute": 2.0 + 1.75 + 1.25,
    }


def test_a_task_that_waited_for_its_thread_follows_the_task_before_it_there():
    runs = [
        run("x", start=0.0, stop=3.0),
        run("d", worker="b", start=0.0, stop=1.0),  # y's input, ready long before x ended
        run("y", ["d"], start=3.0, stop=4.0, sent=1.0),  # on the worker, waiting for x
    ]
    path = critical_path(runs, enqueued=0.0, stop=4.0)
    assert [(s.key, s.via) for s in path.steps] == [("x", "start"), ("y", "thread")]
    assert path.steps[1].queued == 0.0 and path.steps[1].compute == 1.0


def test_the_first_step_begins_when_the_span_was_enqueued():
    path = critical_path([run("r", start=1.0, stop=2.0, sent=0.5)], enqueued=0.0, stop=2.5)
    (step,) = path.steps
    assert (step.begin, step.scheduler, step.queued, step.compute) == (0.0, 0.5, 0.5, 1.0)
    assert path.length == 2.0 and path.covered == 2.0 / 2.5


def test_no_runs_no_path():
    path = critical_path([], enqueued=1.0, stop=3.0)
    assert path.steps == () and path.wall == 2.0 and path.covered == 0.0


@st.composite
def graphs(draw):
    """Random runs of a random DAG on random threads, each starting after its inputs
    ended and after the previous run on its thread."""
    n = draw(st.integers(1, 25))
    runs: list[TaskRun] = []
    free: dict[int, float] = {}
    for i in range(n):
        deps = draw(st.lists(st.integers(0, max(0, i - 1)), max_size=3, unique=True)) if i else []
        thread = draw(st.integers(0, 3))
        ready = max([runs[d].stop for d in deps] + [0.0])
        sent = ready + draw(st.integers(0, 2)) / 4
        start = max(sent, free.get(thread, 0.0)) + draw(st.integers(0, 2)) / 4
        stop = start + draw(st.integers(1, 8)) / 4
        transfers = [(sent, min(start, sent + 0.25))] if deps and start > sent else []
        runs.append(
            run(f"t{i}", [f"t{d}" for d in deps], "w", thread, start, stop, sent, transfers)
        )
        free[thread] = stop
    return runs


@settings(max_examples=200)
@given(graphs())
def test_steps_are_back_to_back_and_their_parts_add_up(runs):
    end = max(r.stop for r in runs)
    path = critical_path(runs, enqueued=0.0, stop=end)
    steps = path.steps
    assert steps[-1].key == max(runs, key=lambda r: r.stop).key
    assert steps[0].begin == 0.0
    for before, after in pairwise(steps):
        assert after.begin == before.end  # back to back
    by_key = {r.key: r for r in runs}
    for s in steps:
        parts = [getattr(s, p) for p in PARTS]
        assert min(parts) >= 0.0 and sum(parts) == s.total
        r = by_key[s.key]
        if s.via == "dependency":  # the input that ended last
            prev = steps[steps.index(s) - 1].key
            assert prev in r.dependencies
            assert by_key[prev].stop == max(by_key[d].stop for d in r.dependencies)
    assert path.length == end and path.covered == 1.0
    assert len({s.key for s in steps}) == len(steps)
