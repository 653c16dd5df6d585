"""Issue 32.2, fed as events: a task that may only run on workers that are not there is
``no-worker``, reported once, and fails when its spell's timer says so."""

from __future__ import annotations

from kernel_cluster.core.restrictions import NoValidWorkerError
from kernel_cluster.core.scheduler_messages import (
    ClientReleasedKeys,
    NoWorkerTimedOut,
    ReportNoWorker,
    WorkerAdded,
    WorkerPauseChanged,
    WorkerRemoved,
)

from .test_scheduler_state import Sched, computes, reports


def no_worker_reports(out: list) -> list[ReportNoWorker]:
    return [i for i in out if isinstance(i, ReportNoWorker)]


def test_a_task_pinned_to_an_absent_worker_is_no_worker_and_fails_when_its_time_is_up():
    s = Sched(("a", 1))
    out = s.submit({"x": ()}, ["x"], workers=["elsewhere"])
    assert s.state("x") == "no-worker" and not computes(out)
    (report,) = no_worker_reports(out)
    assert report.workers == {"elsewhere"} and [k for k, _ in report.keys] == ["x"]
    out = s.handle(NoWorkerTimedOut(report.keys, 30.0))
    assert s.state("x") == "erred"
    err = reports(out)[("c", "x")].exception
    assert isinstance(err, NoValidWorkerError)
    assert "elsewhere" in str(err) and "30 s" in str(err)


def test_a_worker_that_joins_takes_it_and_the_old_timer_does_nothing():
    s = Sched(("a", 1))
    (report,) = no_worker_reports(s.submit({"x": ()}, ["x"], workers=["b"]))
    out = s.handle(WorkerAdded("b", 1))
    assert computes(out)["x"].worker == "b"
    s.handle(WorkerRemoved("b"))  # it dies running x: no-worker again, a new spell
    assert s.state("x") == "no-worker"
    s.handle(NoWorkerTimedOut(report.keys, 30.0))  # the first spell's timer
    assert s.state("x") == "no-worker"


def test_tasks_queued_for_a_paused_worker_that_leaves_become_no_worker():
    s = Sched(("a", 1), ("b", 1))
    s.handle(WorkerPauseChanged("b", True))
    s.submit({"x": ()}, ["x"], workers=["b"])
    assert s.state("x") == "queued"  # b is there, paused: x waits for it
    out = s.handle(WorkerRemoved("b"))
    assert s.state("x") == "no-worker" and no_worker_reports(out)


def test_a_released_no_worker_task_is_forgotten():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"], workers=["gone"])
    s.handle(ClientReleasedKeys("c", ["x"]))
    assert s.state("x") == "forgotten" and not s.s.unrunnable and not s.s.no_worker


def test_a_dependent_of_a_no_worker_task_fails_with_it():
    s = Sched(("a", 1))
    out = s.submit({"x": ()}, ["x"], workers=["gone"])
    s.submit({"y": ("x",)}, ["y"])
    (report,) = no_worker_reports(out)
    out = s.handle(NoWorkerTimedOut(report.keys, 5.0))
    assert s.state("y") == "erred"
    assert isinstance(reports(out)[("c", "y")].exception, NoValidWorkerError)


def test_loose_tasks_are_never_no_worker():
    s = Sched(("a", 1))
    out = s.submit({"x": ()}, ["x"], workers=["gone"], allow_other_workers=True)
    assert computes(out)["x"].worker == "a" and not no_worker_reports(out)
