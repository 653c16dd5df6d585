"""What a timeout says a task is doing (issue 32), fed as events: only what the
scheduler knows. Sent to a worker is not "running" when the worker still fetches
its inputs (it tells the scheduler of each replica), is paused, or got more tasks
than threads."""

from __future__ import annotations

from kernel_cluster.core.scheduler_messages import ReplicasAdded, WorkerPauseChanged
from kernel_cluster.core.task_status import task_status

from .test_scheduler_state import Sched


def status(s: Sched, key: str) -> str:
    return task_status(s.s.tasks, key)


def test_a_task_alone_on_its_worker_is_running():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"])
    assert status(s, "x") == "it is running on worker a (or about to start)"


def test_a_task_whose_input_is_on_another_worker_is_said_to_wait_for_it_until_it_arrives():
    s = Sched(("a", 1), ("b", 1))
    s.submit({"x": ()}, ["x"], workers=["a"])
    s.finish("x", "a")
    s.submit({"y": ("x",)}, ["y"], workers=["b"])
    assert s.state("y") == "processing"
    text = status(s, "y")
    assert "sent to worker b" in text and "fetches 1 of its input(s)" in text, text
    assert "'x'" in text and "running" not in text, text
    s.handle(ReplicasAdded("b", ["x"], {"x": 10}))  # b has it now
    assert status(s, "y") == "it is running on worker b (or about to start)"


def test_a_task_with_a_dependent_sent_ahead_to_its_worker_is_running():
    """A user trial: the dependent waiting there for this task's value counted as a
    task competing for the thread ("whose 1 thread(s) have 2 tasks")."""
    s = Sched(("a", 1))
    s.submit({"x": (), "y": ("x",)}, ["y"])
    assert s.state("y") == "processing"  # sent ahead, to a
    assert status(s, "x") == "it is running on worker a (or about to start)"


def test_a_task_sent_past_the_threads_may_wait_there():
    s = Sched(("a", 1), saturation=3.0)
    s.submit({"x": (), "y": (), "z": ()}, ["x", "y", "z"])
    assert {s.state(k) for k in "xyz"} == {"processing"}
    text = status(s, "z")
    assert "whose 1 thread(s) have 3 tasks" in text and "waits there" in text, text


def test_a_task_on_a_paused_worker_waits_for_it():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"])
    s.handle(WorkerPauseChanged("a", True))
    assert s.state("x") == "processing"  # a task already sent stays there
    text = status(s, "x")
    assert "sent to worker a, which is paused" in text and "running" not in text, text


def test_a_task_sent_ahead_of_its_inputs_waits_for_them_there():
    s = Sched(("a", 1))
    s.submit({"x": (), "y": ("x",)}, ["y"])
    assert s.state("y") == "processing"  # sent ahead, to the worker computing x
    text = status(s, "y")
    assert text.startswith("it was sent to worker a, where it waits"), text
    assert "waits for 1 input(s) still being computed: 'x'" in text, text


def test_the_other_states_in_words():
    s = Sched(("a", 1))
    s.submit({"x": ()}, ["x"])
    assert "no longer holds it" in status(s, "nothing")
    s.finish("x", "a")
    assert "finished" in status(s, "x")
