"""The worker state machine, fed events synchronously."""

from __future__ import annotations

import dataclasses

import pytest

from kernel_cluster.core import worker_messages
from kernel_cluster.core.scheduler_messages import ComputeTask, ComputeTaskAlone, FreeKeys, ToWorker
from kernel_cluster.core.worker_messages import (
    ComputeRequested,
    Execute,
    ExecuteAfter,
    ExecuteFailed,
    ExecuteSkipped,
    ExecuteSucceeded,
    FreeKeysRequested,
    GatherDep,
    GatherDepFailed,
    GatherDepSucceeded,
    PauseChanged,
    SendCancelledTasksEnded,
    SendCancelledTasksRunning,
    SendDependencyUnavailable,
    SendReplicasAdded,
    SendTaskErred,
    SendTaskFinished,
    WorkerEvent,
    WorkerInstruction,
)
from kernel_cluster.core.worker_state import EMPTY, WorkerState


class W:
    def __init__(self, nthreads: int = 1, prefetch: int = 0):
        self.w = WorkerState(address="me", nthreads=nthreads, prefetch=prefetch)
        self.priority = 0

    def compute(self, key, who_has=None, nbytes=None, priority=None) -> list:
        self.priority += 1
        p = (0, priority if priority is not None else self.priority, self.priority)
        return self.handle(
            ComputeRequested(key, f"spec-{key}", who_has or {}, nbytes or {}, p, key)
        )

    def done(self, key, value=1, nbytes=8, start=0.0, stop=1.0, then=None) -> list:
        return self.handle(
            ExecuteSucceeded(key, value, nbytes, "int", [("compute", start, stop)], then=then)
        )

    def handle(self, *events) -> list:
        out = self.w.handle_stimulus(*events)
        self.w.validate_state()
        return out


def executes(out: list) -> list:
    return [i.key for i in out if isinstance(i, Execute)]


def of(kind, out: list) -> list:
    return [i for i in out if isinstance(i, kind)]


def test_runs_up_to_nthreads_plus_prefetch_in_priority_order():
    w = W(nthreads=1, prefetch=1)
    out = w.handle(
        *[
            ComputeRequested(k, None, {}, {}, (0, p, p), "x")
            for k, p in [("late", 9), ("early", 1), ("mid", 5)]
        ]
    )
    assert executes(out) == ["early", "mid"]
    out = w.done("early")
    assert executes(out) == ["late"]
    finished = of(SendTaskFinished, out)
    assert [f.key for f in finished] == ["early"]
    assert w.w.data["early"] == 1


def test_finished_message_carries_bytes_type_and_startstops():
    w = W()
    w.compute("x")
    out = w.handle(ExecuteSucceeded("x", "v", 42, "str", [("compute", 1.0, 2.0)], thread=7))
    (msg,) = of(SendTaskFinished, out)
    assert (msg.nbytes, msg.type_name, msg.startstops, msg.thread) == (
        42,
        "str",
        [("compute", 1.0, 2.0)],
        7,
    )


def test_local_inputs_make_a_task_ready_at_once():
    w = W()
    w.compute("a")
    w.done("a")
    out = w.compute("b", who_has={"a": ("me",)})
    assert executes(out) == ["b"]


def test_fetches_inputs_from_peers_in_one_batch_per_peer():
    w = W()
    out = w.compute("c", who_has={"a": ("p1",), "b": ("p1",)}, nbytes={"a": 5, "b": 7})
    (gd,) = of(GatherDep, out)
    assert gd.worker == "p1" and sorted(gd.keys) == ["a", "b"] and gd.total_nbytes == 12
    assert not executes(out)
    out = w.handle(GatherDepSucceeded("p1", {"a": 1, "b": 2}, {"a": 5, "b": 7}, 3.0, 4.0))
    assert executes(out) == ["c"]
    (added,) = of(SendReplicasAdded, out)
    assert sorted(added.keys) == ["a", "b"]
    out = w.done("c", start=4.0, stop=5.0)
    (msg,) = of(SendTaskFinished, out)
    # the transfer is attached to the task that needed the data
    assert ("transfer", 3.0, 4.0, "p1") in msg.startstops
    assert ("compute", 4.0, 5.0) in msg.startstops


def test_task_sets_are_shared_while_empty():
    """No set (nor startstops list) per task while it has nothing to hold: see EMPTY."""
    w = W()
    w.compute("a")
    a = w.w.tasks["a"]
    assert a.dependencies is a.dependents is a.waiting_for_data is EMPTY
    assert a.startstops == ()
    w.compute("b", who_has={"x": ("p1",)}, nbytes={"x": 5})
    b, x = w.w.tasks["b"], w.w.tasks["x"]
    assert b.dependencies == b.waiting_for_data == {x} and x.dependents == {b}
    b.discard_dependent(x)  # discarding from EMPTY: nothing happens
    assert b.dependents is EMPTY
    w.handle(GatherDepSucceeded("p1", {"x": 1}, {"x": 5}, 3.0, 4.0))
    assert b.waiting_for_data is EMPTY and b.startstops == (("transfer", 3.0, 4.0, "p1"),)
    w.done("a")
    out = w.done("b", start=4.0, stop=5.0)
    (msg,) = of(SendTaskFinished, out)
    assert msg.startstops == [("transfer", 3.0, 4.0, "p1"), ("compute", 4.0, 5.0)]
    assert b.dependencies is EMPTY and b.startstops == ()
    assert x.dependents is EMPTY and x.state == "memory"  # a replica until freed


def test_fetch_retries_other_holder_then_gives_up():
    w = W()
    out = w.compute("c", who_has={"a": ("p1", "p2")})
    first = of(GatherDep, out)[0].worker
    out = w.handle(GatherDepFailed(first, ["a"]))
    (gd,) = of(GatherDep, out)
    assert gd.worker != first
    # the second holder answers without the key: nobody has it, tell the scheduler
    out = w.handle(GatherDepSucceeded(gd.worker, {}, {}, 0.0, 0.0))
    (msg,) = of(SendDependencyUnavailable, out)
    assert (msg.key, msg.dependency) == ("c", "a")
    assert "c" not in w.w.tasks and "a" not in w.w.tasks


def test_cancelled_while_executing_drops_the_result():
    w = W()
    w.compute("x")
    w.handle(FreeKeysRequested(["x"]))
    assert w.w.tasks["x"].cancelled
    out = w.done("x")
    assert not of(SendTaskFinished, out)
    assert "x" not in w.w.data and "x" not in w.w.tasks


def test_re_requested_while_cancelled_reports_normally():
    w = W()
    w.compute("x")
    w.handle(FreeKeysRequested(["x"]))
    w.compute("x")
    out = w.done("x")
    assert [m.key for m in of(SendTaskFinished, out)] == ["x"]


def test_free_keys_drops_data():
    w = W()
    w.compute("x")
    w.done("x")
    w.handle(FreeKeysRequested(["x"]))
    assert not w.w.data and not w.w.tasks


def test_freed_input_still_read_by_a_local_task_waits_for_it():
    w = W(nthreads=1, prefetch=1)
    w.compute("a")
    w.done("a")
    w.compute("b", who_has={"a": ("me",)})
    w.handle(FreeKeysRequested(["a"]))
    assert "a" in w.w.data  # "b" is about to read it
    w.done("b")
    assert "a" not in w.w.data


def test_failure_is_reported_with_its_exception():
    w = W()
    w.compute("x")
    exc = ValueError("bad")
    out = w.handle(ExecuteFailed("x", exc, None, "ValueError: bad", [("compute", 0.0, 1.0)]))
    (msg,) = of(SendTaskErred, out)
    assert msg.exception is exc and msg.exception_text == "ValueError: bad"
    assert w.w.tasks["x"].state == "error"


def test_pause_stops_new_work_and_skipped_tasks_run_later():
    w = W(nthreads=1, prefetch=1)
    w.compute("a")
    w.compute("b")
    w.handle(PauseChanged(True))
    out = w.compute("c")
    assert not executes(out)
    # the thread found the worker paused and handed "b" back
    w.handle(ExecuteSkipped("b"))
    assert w.w.tasks["b"].state == "ready"
    out = w.done("a")
    assert not executes(out)
    out = w.handle(PauseChanged(False))
    assert executes(out) == ["b", "c"]


def test_skipped_because_cancelled_is_forgotten():
    w = W(nthreads=1, prefetch=1)
    w.compute("a")
    w.compute("b")
    w.handle(FreeKeysRequested(["b"]))
    w.handle(ExecuteSkipped("b"))
    assert "b" not in w.w.tasks


def test_compute_for_key_already_held_reports_at_once():
    w = W()
    w.compute("a", who_has={}, nbytes={})
    w.done("a")
    out = w.compute("a")
    assert [m.key for m in of(SendTaskFinished, out)] == ["a"]
    assert not executes(out)


# -- a chain's links run one after the other on one thread (ExecuteAfter) ------------------


def offers(out: list) -> list:
    return [(i.key, i.after) for i in out if isinstance(i, ExecuteAfter)]


def test_a_task_waiting_on_one_local_input_is_offered_to_the_thread_computing_it():
    w = W()
    assert executes(w.compute("a")) == ["a"]
    # the scheduler sent b and c ahead of their inputs (who_has is empty)
    out = w.compute("b", who_has={"a": ()})
    assert offers(out) == [("b", "a")] and not executes(out)
    assert offers(w.compute("c", who_has={"b": ()})) == [("c", "b")]
    # the thread ran b straight after a, then c after b: neither is handed to the pool
    out = w.done("a", then="b")
    assert not executes(out) and w.w.tasks["b"].state == "executing"
    out = w.done("b", then="c")
    assert not executes(out) and w.w.tasks["c"].state == "executing"
    out = w.done("c")
    assert [m.key for m in of(SendTaskFinished, out)] == ["c"]
    assert w.w.tasks["c"].state == "memory"


def test_an_offer_the_thread_did_not_take_runs_the_usual_way():
    w = W()
    w.compute("a")
    assert offers(w.compute("b", who_has={"a": ()})) == [("b", "a")]
    # the thread had finished a before the offer reached it
    out = w.done("a")
    assert executes(out) == ["b"]


def test_no_offer_while_another_input_is_missing_or_the_input_is_not_local():
    w = W()
    w.compute("a")
    out = w.compute("b", who_has={"a": (), "x": ("peer",)})
    assert not offers(out) and of(GatherDep, out)
    # the fetched input arrives while a still runs: now b waits on a alone
    out = w.handle(GatherDepSucceeded("peer", {"x": 1}, {"x": 8}, 0.0, 1.0))
    assert offers(out) == [("b", "a")]
    # an input fetched from a peer has no thread to follow
    assert not offers(w.compute("c", who_has={"y": ("peer",)}))


def test_offered_task_whose_input_fails_waits_until_the_scheduler_frees_it():
    w = W()
    w.compute("a")
    w.compute("b", who_has={"a": ()})
    out = w.handle(ExecuteFailed("a", ValueError("bad"), None, "ValueError: bad", []))
    assert of(SendTaskErred, out) and not executes(out)
    assert w.w.tasks["b"].state == "waiting"
    w.handle(FreeKeysRequested(["b"]))
    w.handle(FreeKeysRequested(["a"]))
    assert not w.w.tasks


def test_offered_task_freed_before_its_thread_reports_is_dropped():
    w = W()
    w.compute("a")
    w.compute("b", who_has={"a": ()})
    w.handle(FreeKeysRequested(["b"]))
    assert "b" not in w.w.tasks
    # the thread had taken the offer: its run of b (skipped, or done) changes nothing
    out = w.done("a", then="b")
    assert "b" not in w.w.tasks and not executes(out)
    for outcome in (ExecuteSkipped("b"), ExecuteSucceeded("b", 2, 8, "int", [])):
        out = w.handle(outcome)
        assert not of(SendTaskFinished, out) and "b" not in w.w.data


def test_no_offers_while_paused():
    w = W()
    w.compute("a")
    w.handle(PauseChanged(True))
    assert not offers(w.compute("b", who_has={"a": ()}))


def test_an_offer_followed_by_its_release_in_one_batch_is_withdrawn():
    w = W()
    w.compute("a")
    out = w.handle(
        ComputeRequested("b", "spec-b", {"a": ()}, {}, (0, 9, 9), "b"), FreeKeysRequested(["b"])
    )
    # the offer went out before the release: the shell must find b gone and skip it
    assert offers(out) == [("b", "a")] and "b" not in w.w.tasks


# -- the edges: typed events in, typed instructions out, compared whole ------------------


def test_a_worker_story_as_the_exact_instructions_it_makes():
    """The scheduler's instructions are events here as they were sent (ComputeTask,
    FreeKeys); each instruction out names the stimulus that caused it."""
    w = W(nthreads=1, prefetch=0)
    out = w.handle(ComputeTask("me", "a", "spec-a", {}, {}, (0, 1, 1), "a", None, "s1"))
    assert out == [Execute("a", "s1")]
    out = w.handle(
        ComputeTask("me", "b", "spec-b", {"a": ("me",)}, {"a": 8}, (0, 2, 2), "b", None, "s2")
    )
    assert out == [ExecuteAfter("b", "a", "s2")]  # b waits on a alone, which runs here
    out = w.handle(
        ComputeTask("me", "c", "spec-c", {"z": ("peer",)}, {"z": 100}, (0, 3, 3), "c", None, "s3")
    )
    assert out == [GatherDep("peer", ["z"], 100, "s3")]
    out = w.handle(ExecuteSucceeded("a", 1, 8, "int", [("compute", 0.0, 1.0)], 7, "s4"))
    assert out == [
        SendTaskFinished("a", 8, "int", [("compute", 0.0, 1.0)], 7, "s4"),
        Execute("b", "s4"),
    ]
    out = w.handle(GatherDepSucceeded("peer", {"z": 5}, {"z": 100}, 1.0, 2.0, "s5"))
    assert out == [SendReplicasAdded(["z"], {"z": 100}, "s5")]  # c waits for the thread
    boom = ValueError("boom")
    out = w.handle(ExecuteFailed("b", boom, None, "ValueError: boom", [("compute", 1, 2)], 7, "s6"))
    assert out == [
        SendTaskErred("b", boom, None, "ValueError: boom", [("compute", 1, 2)], 7, "s6"),
        Execute("c", "s6"),
    ]
    # freed while it runs: the scheduler hears that its thread is still taken, and
    # when it ends
    assert w.handle(FreeKeys("me", ["c"], "s7", running=True)) == [
        SendCancelledTasksRunning(["c"], "s7")
    ]
    out = w.handle(ExecuteSucceeded("c", 3, 8, "int", [("compute", 2, 3)], 7, "s8"))
    assert out == [SendCancelledTasksEnded(["c"], "s8")]


def test_an_event_of_no_known_kind_is_refused_by_name():
    @dataclasses.dataclass(slots=True)
    class MoonRose(WorkerEvent):
        stimulus_id: str = "moon"

    w = WorkerState(address="me", nthreads=1)
    with pytest.raises(TypeError, match=r"no handler for .*MoonRose"):
        w.handle_stimulus(MoonRose())


def test_every_event_has_a_handler_and_every_message_its_base():
    classes = [
        c
        for c in vars(worker_messages).values()
        if isinstance(c, type) and c.__module__ == worker_messages.__name__
    ]
    events = [c for c in classes if issubclass(c, WorkerEvent) and c is not WorkerEvent]
    instructions = [c for c in classes if issubclass(c, WorkerInstruction)]
    assert set(events) | set(instructions) | {WorkerEvent} == set(classes)
    for cls in events + instructions:
        if dataclasses.is_dataclass(cls):
            assert "__slots__" in vars(cls), cls
            assert "stimulus_id" in {f.name for f in dataclasses.fields(cls)}, cls
    # the scheduler's instructions for a worker are events here, as they arrive
    to_worker = {ComputeTask, ComputeTaskAlone, FreeKeys}
    assert all(issubclass(c, ToWorker) for c in to_worker)
    assert set(events) | to_worker == set(WorkerState._handlers)
