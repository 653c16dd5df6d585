"""Issue 17, fed as events: a paused worker gets no new work, and a task freed while it
runs takes its thread until the worker says it ended (scheduler and worker sides)."""

from __future__ import annotations

from kernel_cluster.core.scheduler_messages import (
    CancelledTasksEnded,
    CancelledTasksRunning,
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
    SendCancelledTasksRunning,
)

from .test_scheduler_state import Sched, computes, freed
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


def test_a_cancelled_chain_counts_the_running_link_until_it_ended():
    s = Sched(("a", 2))
    s.submit({"x": (), "y": ("x",)}, ["y"])
    out = s.handle(ClientCancelledKeys("c", ["y"]))
    freed_running = [k for i in out if isinstance(i, FreeKeys) and i.running for k in i.keys]
    # y, sent ahead, still waited on x: it cannot be running, and takes no thread
    assert freed_running == ["x"]
    assert {k for i in out if isinstance(i, FreeKeys) for k in i.keys} == {"x", "y"}
    assert s.s.workers["a"].n_ending == 1
    s.handle(CancelledTasksEnded("a", ["x", "y", "unknown"]))
    assert s.s.workers["a"].n_ending == 0


def test_a_key_freed_twice_while_running_counts_twice():
    s = Sched(("a", 2))  # the second run goes to the thread the first does not take
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


# -- issue 26.1: a thread running a cancelled task is no free slot -------------------------


def test_a_worker_whose_only_thread_runs_a_cancelled_task_gets_no_new_work():
    """Before, it counted as one task busier: with worker_saturation 1.5 it still took a
    task, which waited behind the cancelled one (19.5 s in the issue)."""
    s = Sched(("a", 1), ("b", 1), saturation=1.5)
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    s.handle(ClientCancelledKeys("c", ["slow"]))
    out = s.submit({f"t{i}": () for i in range(6)}, [f"t{i}" for i in range(6)])
    assert set(where(out).values()) == {"b"}
    assert len(where(out)) == 2  # b's room (1 thread x 1.5); the rest wait in the queue
    for key in list(where(out)):
        out = s.finish(key, "b")
        assert set(where(out).values()) <= {"b"}
    out = s.handle(CancelledTasksEnded("a", ["slow"]))
    assert "a" in set(where(out).values())  # free again: it takes queued work


def test_a_worker_is_judged_by_its_free_threads():
    s = Sched(("a", 2), ("b", 2), saturation=1.0)
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    s.handle(ClientReleasedKeys("c", ["slow"]))
    out = s.submit({f"t{i}": () for i in range(3)}, [f"t{i}" for i in range(3)])
    # b has two free threads, a one: a gets one task, b two
    assert sorted(where(out).values()) == ["a", "b", "b"]


def test_tasks_with_inputs_and_tasks_sent_ahead_avoid_a_worker_with_no_free_thread():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"x": ()}, ["x"], workers=["a"])
    s.finish("x", "a")
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    s.handle(ClientCancelledKeys("c", ["slow"]))
    out = s.submit({"y": ("x",)}, ["y"])
    assert where(out) == {"y": "b"}  # b fetches x rather than wait behind slow on a
    out = s.submit({"z": (), "after": ("z",)}, ["after"])
    assert where(out) == {"z": "b", "after": "b"}


def test_tasks_pinned_to_a_worker_with_no_free_thread_wait_for_it():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    s.handle(ClientCancelledKeys("c", ["slow"]))
    out = s.submit({"pinned": ()}, ["pinned"], workers=["a"])
    assert not where(out) and s.state("pinned") == "queued"
    out = s.handle(CancelledTasksEnded("a", ["slow"]))
    assert where(out) == {"pinned": "a"}


def test_work_is_taken_back_from_a_worker_whose_threads_all_run_cancelled_tasks():
    s = Sched(("a", 1), ("b", 1), saturation=float("inf"))
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    out = s.submit({"q1": (), "q2": ()}, ["q1", "q2"], workers=["a"], allow_other_workers=True)
    assert where(out) == {"q1": "a", "q2": "a"}  # behind slow, on a's only thread
    out = s.handle(ClientCancelledKeys("c", ["slow"]))
    assert not where(out)  # slow may have ended already: nothing is taken back yet
    out = s.handle(CancelledTasksRunning("a", ["slow"]))
    # slow runs on a's only thread: q1 and q2 cannot start there; they go to b, and are
    # freed on a without counting a thread (none can be running there)
    assert where(out) == {"q1": "b", "q2": "b"}
    assert {(i.worker, k, i.running) for i in out if isinstance(i, FreeKeys) for k in i.keys} == {
        ("a", "q1", False),
        ("a", "q2", False),
    }
    assert s.s.workers["a"].n_ending == 1 and not s.s.workers["a"].processing
    out = s.handle(CancelledTasksEnded("a", ["slow"]))
    assert not s.s.workers["a"].running_cancelled
    out = s.submit({"later": ()}, ["later"], workers=["a"])
    assert where(out) == {"later": "a"}


def test_a_worker_with_a_free_thread_left_keeps_its_work():
    s = Sched(("a", 2), ("b", 1), saturation=float("inf"))
    s.submit({"slow": ()}, ["slow"], workers=["a"])
    s.submit({"q": ()}, ["q"], workers=["a"])
    s.handle(ClientCancelledKeys("c", ["slow"]))
    out = s.handle(CancelledTasksRunning("a", ["slow"]))
    assert not where(out) and s.s.tasks["q"].processing_on.address == "a"


def test_a_result_from_a_worker_a_cancelled_key_was_taken_from_is_no_replica():
    """Cancel a running key and submit it again at once: it runs anew on b, while a's
    first run ends before a reads the free. a's late result is not a copy the scheduler
    may send for: a drops it when the free arrives. Counted as one, a gather that asked
    a for it found nothing ("no longer on the cluster": a KeyError under load)."""
    s = Sched(("a", 1), ("b", 1))
    s.submit({"k": ()}, ["k"])
    assert s.s.tasks["k"].processing_on.address == "a"
    s.handle(ClientCancelledKeys("c", ["k"]))  # FreeKeys(a, k, running) on its way
    out = s.submit({"k": ()}, ["k"])
    assert where(out) == {"k": "b"}  # a's thread may still run the first k
    s.finish("k", "b")
    out = s.finish("k", "a")  # the first run, ended before a read the free
    assert [w.address for w in s.s.tasks["k"].who_has] == ["b"]
    assert ("a", "k") in freed(out)


def test_a_task_sent_ahead_and_then_freed_takes_no_thread():
    s = Sched(("a", 1))
    s.submit({"x": (), "y": ("x",)}, ["x", "y"])
    out = s.handle(ClientReleasedKeys("c", ["y"]))
    assert [(k, i.running) for i in out if isinstance(i, FreeKeys) for k in i.keys] == [
        ("y", False)
    ]
    assert s.s.workers["a"].n_ending == 0


# -- the worker's side ---------------------------------------------------------------------


def ended(out: list) -> list:
    return [k for i in of(SendCancelledTasksEnded, out) for k in i.keys]


def test_worker_says_a_freed_executing_task_ended_only_when_it_did():
    w = W(nthreads=1)
    assert executes(w.compute("x")) == ["x"]
    out = w.handle(FreeKeysRequested(["x"], running=True))
    assert not ended(out)
    assert [k for i in of(SendCancelledTasksRunning, out) for k in i.keys] == ["x"]
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
