"""Issue 17, fed as events: a paused worker gets no new work, and a task freed while it
runs takes its thread until the worker says it ended (scheduler and worker sides)."""

from __future__ import annotations

from kernel_cluster.core.scheduler_messages import (
    CancelledTasksEnded,
    ClientCancelledKeys,
    ClientReleasedKeys,
    FreeKeys,
    WorkerPauseChanged,
)
from kernel_cluster.core.worker_messages import (
    ComputeRequested,
    ExecuteSkipped,
    FreeKeysRequested,
    SendCancelledTasksEnded,
)

from .test_scheduler_state import Sched, computes
from .test_worker_state import W, executes, of


def where(instructions: list) -> dict:
    return {k: i.worker for k, i in computes(instructions).items()}


# -- the scheduler and a paused worker ----------------------------------------------------


def test_a_paused_worker_gets_no_root_tasks_and_takes_queued_ones_when_it_resumes():
    s = Sched(("a", 1), ("b", 1), saturation=1.0)
    s.handle(WorkerPauseChanged("a", True))
    out = s.submit({f"x{i}": () for i in range(4)}, [f"x{i}" for i in range(4)])
    assert set(where(out).values()) == {"b"}
    assert len(where(out)) == 1  # b is saturated; the rest wait for a free slot
    out = s.handle(WorkerPauseChanged("a", False))
    assert list(where(out).values()) == ["a"]


def test_with_every_worker_paused_tasks_wait_then_run_on_the_first_to_resume():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"x": ()}, ["x"])
    s.finish("x", "a")
    s.handle(WorkerPauseChanged("a", True), WorkerPauseChanged("b", True))
    out = s.submit({"y": ("x",), "z": ()}, ["y", "z"])
    assert not computes(out)
    assert s.state("y") == s.state("z") == "queued"
    out = s.handle(WorkerPauseChanged("b", False))
    assert where(out) == {"y": "b", "z": "b"}


def test_a_dependent_goes_past_its_paused_input_holder():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"x": ()}, ["x"])
    s.finish("x", "a")
    s.handle(WorkerPauseChanged("a", True))
    out = s.submit({"y": ("x",)}, ["y"])
    assert where(out) == {"y": "b"}  # b fetches x from a, which still serves its data


def test_nothing_is_sent_ahead_to_a_paused_worker():
    s = Sched(("a", 1))
    out = s.submit({"x": ()}, ["x"])
    assert where(out) == {"x": "a"}
    s.handle(WorkerPauseChanged("a", True))
    out = s.submit({"y": ("x",)}, ["y"])
    assert not computes(out)  # not sent ahead to a paused worker
    out = s.finish("x", "a")
    assert not computes(out)
    assert s.state("y") == "queued"
    out = s.handle(WorkerPauseChanged("a", False))
    assert where(out) == {"y": "a"}


def test_tasks_restricted_to_a_paused_worker_wait_or_go_elsewhere_if_allowed():
    s = Sched(("a", 1), ("b", 1))
    s.handle(WorkerPauseChanged("a", True))
    out = s.submit({"strict": ()}, ["strict"], workers=["a"])
    assert not computes(out) and s.state("strict") == "queued"
    out = s.submit({"loose": ()}, ["loose"], workers=["a"], allow_other_workers=True)
    assert where(out) == {"loose": "b"}
    out = s.handle(WorkerPauseChanged("a", False))
    assert where(out) == {"strict": "a"}


def test_pause_from_an_unknown_worker_or_repeated_changes_nothing():
    s = Sched(("a", 1))
    s.handle(WorkerPauseChanged("gone", True), WorkerPauseChanged("a", False))
    out = s.submit({"x": ()}, ["x"])
    assert where(out) == {"x": "a"}


# -- the scheduler and a task freed while it runs -----------------------------------------


def test_a_released_running_task_keeps_its_thread_until_the_worker_says_it_ended():
    s = Sched(("a", 1), ("b", 1), saturation=1.0)
    out = s.submit({"slow": ()}, ["slow"], workers=["a"])
    assert where(out) == {"slow": "a"}
    out = s.handle(ClientReleasedKeys("c", ["slow"]))
    (free,) = [i for i in out if isinstance(i, FreeKeys)]
    assert free.worker == "a" and free.keys == ["slow"] and free.running
    assert s.s.workers["a"].n_ending == 1
    out = s.submit({"n1": (), "n2": ()}, ["n1", "n2"])
    assert where(out) == {"n1": "b"}  # a's thread is busy; b is saturated: n2 waits
    out = s.handle(CancelledTasksEnded("a", ["slow"]))
    assert where(out) == {"n2": "a"}
    assert s.s.workers["a"].n_ending == 0 and not s.s.workers["a"].ending


def test_a_cancelled_chain_counts_each_link_until_ended():
    s = Sched(("a", 2))
    s.submit({"x": (), "y": ("x",)}, ["y"])
    out = s.handle(ClientCancelledKeys("c", ["y"]))
    freed_running = [k for i in out if isinstance(i, FreeKeys) and i.running for k in i.keys]
    assert sorted(freed_running) == ["x", "y"]
    assert s.s.workers["a"].n_ending == 2
    s.handle(CancelledTasksEnded("a", ["x", "y", "unknown"]))
    assert s.s.workers["a"].n_ending == 0


def test_a_key_freed_twice_while_running_counts_twice():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"])
    s.handle(ClientReleasedKeys("c", ["x"]))
    s.submit({"x": ()}, ["x"])
    s.handle(ClientReleasedKeys("c", ["x"]))
    assert s.s.workers["a"].ending == {"x": 2}
    s.handle(CancelledTasksEnded("a", ["x"]))
    assert s.s.workers["a"].ending == {"x": 1}
    s.handle(CancelledTasksEnded("a", ["x"]))
    assert s.s.workers["a"].n_ending == 0


def test_data_released_from_memory_is_not_counted_as_running():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"])
    s.finish("x", "a")
    out = s.handle(ClientReleasedKeys("c", ["x"]))
    assert [i.running for i in out if isinstance(i, FreeKeys)] == [False]
    assert s.s.workers["a"].n_ending == 0


# -- the worker's side ---------------------------------------------------------------------


def ended(out: list) -> list:
    return [k for i in of(SendCancelledTasksEnded, out) for k in i.keys]


def test_worker_says_a_freed_executing_task_ended_only_when_it_did():
    w = W(nthreads=1)
    assert executes(w.compute("x")) == ["x"]
    out = w.handle(FreeKeysRequested(["x"], running=True))
    assert not ended(out)
    out = w.done("x")
    assert ended(out) == ["x"]
    assert "x" not in w.w.tasks


def test_worker_says_at_once_that_freed_tasks_not_executing_have_ended():
    w = W(nthreads=1)
    w.compute("x")
    w.compute("y")  # ready, behind x
    out = w.handle(FreeKeysRequested(["y", "never-heard-of"], running=True))
    assert sorted(ended(out)) == ["never-heard-of", "y"]


def test_worker_reports_a_skipped_cancelled_task_as_ended():
    w = W(nthreads=1, prefetch=1)
    assert executes(w.compute("x")) == ["x"]
    assert executes(w.compute("y")) == ["y"]  # handed to the pool, behind x
    w.handle(FreeKeysRequested(["y"], running=True))
    out = w.handle(ExecuteSkipped("y"))
    assert ended(out) == ["y"]


def test_worker_re_requested_while_its_cancelled_run_goes_on_says_ended_at_once():
    w = W(nthreads=1)
    w.compute("x")
    w.handle(FreeKeysRequested(["x"], running=True))
    out = w.handle(ComputeRequested("x", "spec-x", {}, {}, (0, 9, 9), "x"))
    assert ended(out) == ["x"]  # the scheduler counts it as processing again
    out = w.done("x")
    assert not ended(out)


def test_loose_tasks_queued_past_paused_workers_run_on_the_next_free_slot():
    """Before, a task allowed elsewhere that had to wait was parked with the tasks
    restricted to workers that are gone, and only a worker's death looked at it again."""
    s = Sched(("a", 1), ("b", 1), saturation=1.0)
    s.handle(WorkerPauseChanged("a", True))
    out = s.submit({"x": ()}, ["x"])
    assert where(out) == {"x": "b"}
    out = s.submit({"loose": ()}, ["loose"], workers=["a"], allow_other_workers=True)
    assert not computes(out) and s.state("loose") == "queued"  # b is saturated
    out = s.finish("x", "b")
    assert where(out) == {"loose": "b"}
