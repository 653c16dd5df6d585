"""Issue 32.1, fed as events: a task that secedes takes no thread, on the worker and on
the scheduler, so other tasks go in its place."""

from __future__ import annotations

from kernel_cluster.core.scheduler_messages import TaskSeceded
from kernel_cluster.core.worker_messages import (
    ExecuteSeceded,
    FreeKeysRequested,
    SendCancelledTasksEnded,
    SendTaskSeceded,
)

from .test_pause_and_cancelled_running import where
from .test_scheduler_state import Sched, reports
from .test_worker_state import W, executes, of


def test_the_worker_starts_another_task_when_one_secedes():
    w = W(nthreads=1)
    assert executes(w.compute("parent")) == ["parent"]
    assert executes(w.compute("child")) == []  # the thread is taken
    out = w.handle(ExecuteSeceded("parent"))
    assert [i.key for i in of(SendTaskSeceded, out)] == ["parent"]
    assert executes(out) == ["child"]
    assert w.w.tasks["parent"].state == "long-running"
    out = w.done("parent")  # a long-running task ends as any other
    assert w.w.tasks["parent"].state == "memory"


def test_a_seceded_task_freed_takes_no_thread_and_its_result_is_dropped():
    w = W(nthreads=1)
    w.compute("parent")
    w.handle(ExecuteSeceded("parent"))
    out = w.handle(FreeKeysRequested(["parent"], running=True))
    assert [k for i in of(SendCancelledTasksEnded, out) for k in i.keys] == ["parent"]
    out = w.done("parent")
    assert "parent" not in w.w.tasks and not of(SendCancelledTasksEnded, out)


def test_seceding_twice_or_after_the_end_changes_nothing():
    w = W(nthreads=1)
    w.compute("x")
    w.handle(ExecuteSeceded("x"))
    assert not of(SendTaskSeceded, w.handle(ExecuteSeceded("x")))
    w.done("x")
    assert not of(SendTaskSeceded, w.handle(ExecuteSeceded("x")))


def test_the_scheduler_sends_queued_work_in_place_of_a_seceded_task():
    s = Sched(("a", 1), saturation=1.0)
    out = s.submit({"parent": ()}, ["parent"])
    assert where(out) == {"parent": "a"}
    out = s.submit({"c1": (), "c2": ()}, ["c1", "c2"])
    assert not where(out)  # a's only thread runs parent
    out = s.handle(TaskSeceded("parent", "a"))
    assert where(out) == {"c1": "a"}  # parent waits: it fills no thread
    assert s.s.workers["a"].long_running == {s.s.tasks["parent"]}
    out = s.finish("c1", "a")
    assert where(out) == {"c2": "a"}
    s.finish("c2", "a")
    out = s.finish("parent", "a")
    assert reports(out)[("c", "parent")].status == "finished"
    assert not s.s.workers["a"].long_running


def test_a_seceded_report_for_a_task_processing_elsewhere_is_ignored():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"x": ()}, ["x"], workers=["a"])
    s.handle(TaskSeceded("x", "b"), TaskSeceded("gone", "a"))
    assert not s.s.workers["b"].long_running and not s.s.workers["a"].long_running
