"""The scheduler state machine, fed events synchronously: no engine, threads or clock."""

from __future__ import annotations

import dataclasses

import pytest

from kernel_cluster.core import scheduler_messages
from kernel_cluster.core.scheduler_messages import (
    ClientAdded,
    ClientCancelledKeys,
    ClientReleasedKeys,
    ClientRemoved,
    ComputeTask,
    DependencyFetchFailed,
    FreeKeys,
    GraphSubmitted,
    ReplicasAdded,
    ReportKey,
    SchedulerEvent,
    SchedulerInstruction,
    SetClusterBusy,
    TaskErred,
    TaskFinished,
    WorkerAdded,
    WorkerRemoved,
)
from kernel_cluster.core.scheduler_state import KilledWorker, LostDependency, SchedulerState
from kernel_cluster.core.scheduler_tasks import EMPTY


class Sched:
    """A SchedulerState with helpers that read like the story being tested."""

    def __init__(self, *workers: tuple[str, int], saturation: float = float("inf"), **kw):
        self.s = SchedulerState(worker_saturation=saturation, **kw)
        for address, nthreads in workers:
            self.s.handle_stimulus(WorkerAdded(address, nthreads))
        self.s.handle_stimulus(ClientAdded("c"))

    def submit(self, graph: dict[str, tuple], wanted: list, client: str = "c", **ann) -> list:
        """``graph`` maps key -> tuple of dependency keys."""
        specs = {k: f"spec-{k}" for k in graph}
        deps = {k: frozenset(v) for k, v in graph.items()}
        return self.handle(GraphSubmitted(client, specs, deps, wanted, None, ann or None))

    def finish(self, key, worker: str, nbytes: int = 10, startstops=None) -> list:
        return self.handle(TaskFinished(key, worker, nbytes, startstops or []))

    def handle(self, *events) -> list:
        out = self.s.handle_stimulus(*events)
        self.s.validate_state()
        return out

    def state(self, key) -> str:
        ts = self.s.tasks.get(key)
        return "forgotten" if ts is None else ts.state


def computes(instructions: list) -> dict:
    return {i.key: i for i in instructions if isinstance(i, ComputeTask)}


def reports(instructions: list) -> dict:
    return {(i.client, i.key): i for i in instructions if isinstance(i, ReportKey)}


def freed(instructions: list) -> set:
    return {(i.worker, k) for i in instructions if isinstance(i, FreeKeys) for k in i.keys}


def test_task_sets_are_shared_while_empty():
    """A task's sets start as the one shared EMPTY (no container per task for the cyclic GC
    to traverse), become real sets on the first add and go back to EMPTY once emptied."""
    s = Sched(("w", 1))
    s.submit({"a": (), "b": ("a",)}, ["a", "b"])
    a, b = s.s.tasks["a"], s.s.tasks["b"]
    assert a.dependencies is EMPTY and b.dependents is EMPTY and a.waiting_on is EMPTY
    assert a.who_has is EMPTY and b.who_has is EMPTY and b.waiters is EMPTY
    assert a.dependents == {b} and a.waiters == {b} and b.dependencies == b.waiting_on == {a}
    assert type(a.dependents) is set and type(b.waiting_on) is set
    b.discard_waiter(a)  # discarding from EMPTY: nothing happens
    b.discard_dependent(a)
    assert b.waiters is EMPTY and b.dependents is EMPTY
    s.finish("a", "w")
    assert b.waiting_on is EMPTY and {w.address for w in a.who_has} == {"w"}
    s.finish("b", "w")
    assert a.waiters is EMPTY and a.dependents == {b}  # b no longer needs a's data
    s.handle(ClientReleasedKeys("c", ["b"]))  # b is forgotten; a is still wanted
    assert s.state("b") == "forgotten" and s.state("a") == "memory"
    assert a.dependents is EMPTY and b.dependencies is EMPTY and b.who_has is EMPTY
    s.submit({"b": ("a",)}, ["b"])  # a new dependent after that: a real set again
    assert s.s.tasks["b"] in a.dependents and type(a.dependents) is set
    s.handle(ClientReleasedKeys("c", ["a", "b"]))
    assert not s.s.tasks and a.who_wants is EMPTY and a.who_has is EMPTY


def test_single_task_lifecycle():
    s = Sched(("w1", 1))
    out = s.submit({"x": ()}, ["x"])
    assert computes(out)["x"].worker == "w1"
    assert s.state("x") == "processing"
    out = s.finish("x", "w1", nbytes=123)
    assert reports(out)[("c", "x")].status == "finished"
    assert s.state("x") == "memory"
    assert s.s.tasks["x"].nbytes == 123
    out = s.handle(ClientReleasedKeys("c", ["x"]))
    assert freed(out) == {("w1", "x")}
    assert s.state("x") == "forgotten"
    assert not s.s.task_groups


def test_dependent_waits_and_gets_who_has():
    s = Sched(("w1", 1), ("w2", 1))
    s.submit({"a1": (), "a2": ()}, ["a1", "a2"])
    s.finish("a1", "w1")
    s.finish("a2", "w2", nbytes=20)
    out = s.submit({"b": ("a1", "a2", "c"), "c": ()}, ["b"])
    assert set(computes(out)) == {"c"}  # b's inputs are on two workers: it waits
    assert s.state("b") == "waiting"
    worker = computes(out)["c"].worker
    out = s.finish("c", worker, nbytes=1)
    ct = computes(out)["b"]
    assert ct.who_has == {"a1": ("w1",), "a2": ("w2",), "c": (worker,)}
    assert ct.worker == "w2"  # prefers the worker holding most of the input bytes
    s.finish("b", "w2")
    s.handle(ClientReleasedKeys("c", ["a1", "a2"]))
    # the inputs are no longer needed: their data is dropped but they stay as lineage
    assert s.state("a1") == s.state("a2") == s.state("c") == "released"
    s.handle(ClientReleasedKeys("c", ["b"]))
    assert all(s.state(k) == "forgotten" for k in ("a1", "a2", "b", "c"))


def test_dependent_waiting_on_one_input_is_sent_ahead_to_its_worker():
    s = Sched(("w1", 1), ("w2", 1))
    out = s.submit({"a": (), "b": ("a",)}, ["b"])
    worker = computes(out)["a"].worker
    # b waits on a alone, which runs on `worker`: it would go there anyway, so it goes
    # now, and the worker starts it the moment a is done
    ct = computes(out)["b"]
    assert ct.worker == worker and ct.who_has == {"a": ()}
    assert s.state("b") == "processing" and s.s.tasks["b"].waiting_on == {s.s.tasks["a"]}
    out = s.finish("a", worker)
    assert not computes(out)
    assert s.state("b") == "processing" and not s.s.tasks["b"].waiting_on
    s.finish("b", worker)
    # "a" is no longer needed: its data is dropped but it stays as lineage of "b"
    assert s.state("a") == "released"
    s.handle(ClientReleasedKeys("c", ["b"]))
    assert s.state("a") == s.state("b") == "forgotten"


def test_intermediates_released_as_soon_as_unneeded():
    s = Sched(("w", 1))
    s.submit({"a": (), "b": ("a",), "c": ("b",)}, ["c"])
    s.finish("a", "w")
    out = s.finish("b", "w")
    assert ("w", "a") in freed(out)
    assert s.state("a") == "released"
    assert s.state("b") == "memory"
    out = s.finish("c", "w")
    assert ("w", "b") in freed(out)
    assert [k for k, ts in s.s.tasks.items() if ts.state == "memory"] == ["c"]


def test_least_occupied_worker_for_root_tasks():
    s = Sched(("w1", 2), ("w2", 2))
    out = s.submit({f"x{i}": () for i in range(8)}, [f"x{i}" for i in range(8)])
    by_worker: dict = {}
    for ct in computes(out).values():
        by_worker[ct.worker] = by_worker.get(ct.worker, 0) + 1
    assert by_worker == {"w1": 4, "w2": 4}


def test_queueing_keeps_workers_saturated_not_flooded():
    s = Sched(("w", 2), saturation=1.0)
    keys = [f"x{i}" for i in range(5)]
    out = s.submit({k: () for k in keys}, keys)
    sent = list(computes(out))
    assert len(sent) == 2
    assert sum(s.state(k) == "queued" for k in keys) == 3
    out = s.finish(sent[0], "w")
    assert len(computes(out)) == 1  # the freed slot is refilled, highest priority first
    assert next(iter(computes(out))) == "x2"


def test_error_propagates_to_dependents_with_same_exception():
    s = Sched(("w", 1))
    s.submit({"a": (), "b": ("a",), "c": ("b",)}, ["c", "b"])
    exc = ZeroDivisionError("boom")
    out = s.handle(TaskErred("a", "w", exc, None, "text"))
    r = reports(out)
    assert r[("c", "c")].status == "error" and r[("c", "c")].exception is exc
    assert r[("c", "b")].exception is exc
    assert s.state("b") == s.state("c") == "erred"
    assert s.s.tasks["c"].exception_blame is s.s.tasks["a"]
    # submitting a new task on top of an erred one fails at once, without running
    out = s.submit({"d": ("c",)}, ["d"])
    assert not computes(out)
    assert reports(out)[("c", "d")].exception is exc


def test_release_while_processing_frees_on_worker_and_forgets():
    s = Sched(("w", 1))
    s.submit({"a": ()}, ["a"])
    out = s.handle(ClientReleasedKeys("c", ["a"]))
    assert freed(out) == {("w", "a")}
    assert s.state("a") == "forgotten"
    # the worker finishes anyway: the late result is dropped on the worker
    out = s.finish("a", "w")
    assert freed(out) == {("w", "a")}
    assert s.state("a") == "forgotten"


def test_two_clients_share_a_key():
    s = Sched(("w", 1))
    s.handle(ClientAdded("d"))
    s.submit({"x": ()}, ["x"], client="c")
    s.submit({"x": ()}, ["x"], client="d")
    out = s.finish("x", "w")
    assert set(reports(out)) == {("c", "x"), ("d", "x")}
    s.handle(ClientReleasedKeys("c", ["x"]))
    assert s.state("x") == "memory"
    s.handle(ClientReleasedKeys("d", ["x"]))
    assert s.state("x") == "forgotten"


def test_resubmitting_key_in_memory_reports_at_once():
    s = Sched(("w", 1))
    s.submit({"x": ()}, ["x"])
    s.finish("x", "w")
    s.handle(ClientAdded("d"))
    out = s.submit({"x": ()}, ["x"], client="d")
    assert not computes(out)
    assert reports(out)[("d", "x")].status == "finished"


def test_released_lineage_is_recomputed_when_wanted_again():
    s = Sched(("w", 1))
    s.submit({"a": (), "b": ("a",)}, ["b"])
    s.finish("a", "w")
    s.finish("b", "w")
    assert s.state("a") == "released"
    out = s.submit({"a": ()}, ["a"])
    assert "a" in computes(out)


def test_cancel_stops_task_and_pending_dependents():
    s = Sched(("w", 1))
    s.submit({"a": (), "b": ("a",)}, ["a", "b"])
    out = s.handle(ClientCancelledKeys("c", ["a"]))
    r = reports(out)
    assert r[("c", "a")].status == "cancelled"
    assert r[("c", "b")].status == "cancelled"
    assert ("w", "a") in freed(out)
    assert s.state("a") == s.state("b") == "forgotten"


def test_cancel_only_this_clients_future_when_others_want_it():
    s = Sched(("w", 1))
    s.handle(ClientAdded("d"))
    s.submit({"x": ()}, ["x"], client="c")
    s.submit({"x": ()}, ["x"], client="d")
    out = s.handle(ClientCancelledKeys("c", ["x"]))
    assert reports(out)[("c", "x")].status == "cancelled"
    assert ("d", "x") not in reports(out)
    assert s.state("x") == "processing"


def test_client_removed_releases_everything_it_wanted():
    s = Sched(("w", 1))
    s.submit({"x": (), "y": ()}, ["x", "y"])
    s.finish("x", "w")
    s.handle(ClientRemoved("c"))
    assert not s.s.tasks


def test_no_workers_then_worker_arrives():
    s = Sched()
    out = s.submit({"x": ()}, ["x"])
    assert not computes(out)
    assert s.state("x") == "queued"
    out = s.handle(WorkerAdded("w", 1))
    assert computes(out)["x"].worker == "w"


def test_worker_restrictions_strict_and_loose():
    s = Sched(("w1", 4), ("w2", 4))
    out = s.submit({"x": ()}, ["x"], workers=("w2",))
    assert computes(out)["x"].worker == "w2"
    out = s.submit({"y": ()}, ["y"], workers=("w9",))
    assert not computes(out) and s.state("y") == "no-worker"  # w9 is not a worker (yet)
    out = s.handle(WorkerAdded("w9", 1))
    assert computes(out)["y"].worker == "w9"
    out = s.submit({"z": ()}, ["z"], workers=("nowhere",), allow_other_workers=True)
    assert computes(out)["z"].worker in ("w1", "w2", "w9")


def test_per_task_annotations_restrict_only_their_tasks():
    # dask.annotate(workers=...) around part of a graph: one submission, some tasks bound
    s = Sched(("w1", 4), ("w2", 4))
    tasks = {"a": {"workers": ("w2",)}, "b": {"workers": ("w9",), "allow_other_workers": True}}
    tasks["c"] = {"retries": 2}
    out = s.submit({"a": (), "b": (), "c": (), "d": ()}, ["a", "b", "c", "d"], tasks=tasks)
    assert computes(out)["a"].worker == "w2"
    assert s.s.tasks["b"].worker_restrictions == {"w9"} and s.s.tasks["b"].loose_restrictions
    assert s.s.tasks["c"].worker_restrictions is None and s.s.tasks["c"].annotations == {
        "retries": 2
    }
    assert set(computes(out)) == {"a", "b", "c", "d"}


def test_retries_run_a_failed_task_again_then_fail_it():
    s = Sched(("w1", 1))
    out = s.submit({"a": (), "b": ("a",)}, ["b"], tasks={"a": {"retries": 1}})
    assert set(computes(out)) == {"a", "b"}  # b sent ahead, to wait for a on w1
    out = s.handle(TaskErred("a", "w1", ValueError("flaky"), None, "text"))
    # a runs again; b, sent ahead to wait for the failed run, is taken back and sent
    # ahead anew, to wait for the new run where it happens
    frees = [i for i in out if isinstance(i, FreeKeys)]
    assert {k for i in frees for k in i.keys} == {"a", "b"}
    assert set(computes(out)) == {"a", "b"} and s.s.tasks["b"].waiting_on == {s.s.tasks["a"]}
    assert s.s.tasks["a"].annotations == {"retries": 0}
    out = s.handle(TaskErred("a", "w1", ValueError("again"), None, "text"))
    assert s.state("b") == "erred" and reports(out)[("c", "b")].status == "error"
    assert str(s.s.tasks["b"].exception) == "again"


def test_worker_death_reschedules_processing_and_recomputes_lost_data():
    s = Sched(("w1", 1), ("w2", 1))
    s.submit({"a": ()}, ["a"], workers=("w1",), allow_other_workers=True)
    s.submit({"b": ("a",)}, ["b"])
    s.finish("a", "w1")
    assert s.s.tasks["b"].processing_on.address == "w1"
    out = s.handle(WorkerRemoved("w1"))
    # "a" was only on w1 and a client wants it: it runs again, on the survivor
    assert reports(out)[("c", "a")].status == "lost"
    assert computes(out)["a"].worker == "w2"
    # b waits on a alone again: sent ahead to where a now runs
    assert computes(out)["b"].worker == "w2"
    s.finish("a", "w2")
    assert s.state("b") == "processing"
    assert s.s.tasks["b"].suspicious == 1


def test_task_that_keeps_killing_workers_fails_with_killed_worker():
    s = Sched(("w0", 1), allowed_failures=2)
    s.submit({"x": ()}, ["x"])
    for i in range(3):
        out = s.handle(WorkerRemoved(f"w{i}"))
        if i < 2:
            s.handle(WorkerAdded(f"w{i + 1}", 1))
    r = reports(out)[("c", "x")]
    assert r.status == "error"
    assert isinstance(r.exception, KilledWorker)
    assert "'x'" in str(r.exception)
    assert s.state("x") == "erred"


def test_replicas_and_dependency_unavailable():
    s = Sched(("w1", 1), ("w2", 1))
    s.submit({"a": ()}, ["a"], workers=("w1",))
    s.submit({"b": ("a",)}, ["b"], workers=("w2",))
    s.finish("a", "w1")
    s.handle(ReplicasAdded("w2", ["a"], {"a": 10}))
    assert {w.address for w in s.s.tasks["a"].who_has} == {"w1", "w2"}
    # w1 dies; w2 still has "a", so nothing is recomputed
    out = s.handle(WorkerRemoved("w1"))
    assert "a" not in computes(out)
    assert s.state("a") == "memory"
    # the dependent, now on w2, reports it could not fetch: it is rescheduled
    ts_b = s.s.tasks["b"]
    worker_b = ts_b.processing_on.address
    out = s.handle(DependencyFetchFailed("b", "a", worker_b))
    assert "b" in computes(out)


def test_lost_dependency_is_a_clear_error():
    s = Sched(("w", 1))
    out = s.submit({"b": ("gone",)}, ["b"])
    err = reports(out)[("c", "b")].exception
    assert isinstance(err, LostDependency) and "gone" in str(err)


def test_aggregates_count_states_durations_and_bytes():
    s = Sched(("w", 2))
    keys = [("x-3f2a9c1b", i) for i in range(3)]
    s.submit({k: () for k in keys}, keys)
    group = s.s.tasks[keys[0]].group
    prefix = group.prefix
    assert group.name == "x-3f2a9c1b" and prefix.name == "x"
    assert group.states["processing"] == 3
    s.finish(keys[0], "w", nbytes=100, startstops=[("compute", 10.0, 12.0)])
    s.finish(keys[1], "w", nbytes=50, startstops=[("transfer", 9.0, 9.5), ("compute", 11.0, 14.0)])
    assert group.states["memory"] == 2 and group.states["processing"] == 1
    assert prefix.states["memory"] == 2
    assert group.nbytes_total == 150 == prefix.nbytes_total
    assert group.all_durations["compute"] == pytest.approx(5.0)
    assert group.all_durations["transfer"] == pytest.approx(0.5)
    assert (group.start, group.stop) == (10.0, 14.0)
    assert not group.done
    s.finish(keys[2], "w")
    assert group.done


def test_story_traces_transitions_to_their_stimulus():
    s = Sched(("w", 1))
    s.s.handle_stimulus(
        GraphSubmitted("c", {"x": 1}, {"x": frozenset()}, ["x"], stimulus_id="submit-1")
    )
    s.s.handle_stimulus(TaskFinished("x", "w", 1, stimulus_id="done-1"))
    assert s.s.story("x") == [
        ("x", "released", "waiting", "submit-1"),
        ("x", "waiting", "processing", "submit-1"),
        ("x", "processing", "memory", "done-1"),
    ]


def test_transition_hook_sees_every_change_with_its_event():
    s = Sched(("w", 1))
    seen = []
    s.s.on_transition = lambda ts, old, new, ev: seen.append((ts.key, old, new, ev))
    s.submit({"x": ()}, ["x"])
    s.finish("x", "w", startstops=[("compute", 1.0, 2.0)])
    assert [(k, o, n) for k, o, n, _ in seen] == [
        ("x", "released", "waiting"),
        ("x", "waiting", "processing"),
        ("x", "processing", "memory"),
    ]
    assert isinstance(seen[-1][3], TaskFinished)


def test_long_chain_released_without_recursion():
    s = Sched(("w", 1))
    n = 5000
    graph = {"k0": ()}
    graph.update({f"k{i}": (f"k{i - 1}",) for i in range(1, n)})
    s.s.handle_stimulus(
        GraphSubmitted(
            "c", dict.fromkeys(graph), {k: frozenset(v) for k, v in graph.items()}, [f"k{n - 1}"]
        )
    )
    for i in range(n):
        s.s.handle_stimulus(TaskFinished(f"k{i}", "w", 1))
    assert s.state(f"k{n - 1}") == "memory"
    s.handle(ClientReleasedKeys("c", [f"k{n - 1}"]))
    assert not s.s.tasks


@pytest.mark.parametrize("duration, extra_expected", [(0.001, True), (1.0, False)])
def test_queue_depth_follows_task_duration(duration, extra_expected):
    """Short tasks earn a deeper queue per worker (round trips would idle its threads);
    long ones stay at ``worker_saturation`` so the scheduler keeps control of placement."""
    s = Sched(("w", 1), saturation=1.0, queue_seconds=0.05)
    first = [f"x-{i}" for i in range(2)]
    s.submit({k: () for k in first}, first)
    assert sum(s.state(k) == "processing" for k in first) == 1  # nothing known: 1 per thread
    for k in first:
        while s.state(k) != "memory":
            s.finish(k, "w", startstops=[("compute", 0.0, duration)])
    keys = [f"x-{i}" for i in range(2, 202)]
    s.submit({k: () for k in keys}, keys)
    sent = sum(s.state(k) == "processing" for k in keys)
    if extra_expected:
        assert sent == 1 + min(int(0.05 / 0.001), 32)
    else:
        assert sent == 1


def test_cluster_busy_is_announced_when_work_starts_and_ends():

    s = Sched(("w", 1))
    out = s.submit({"a": (), "b": ("a",)}, ["b"])
    assert [i.busy for i in out if isinstance(i, SetClusterBusy)] == [True]
    out = s.finish("a", "w")
    assert not any(isinstance(i, SetClusterBusy) for i in out)  # still busy: no message
    out = s.finish("b", "w")
    assert [i.busy for i in out if isinstance(i, SetClusterBusy)] == [False]
    assert s.s.n_pending == 0


# -- dependents sent ahead of their inputs (_send_ahead) ------------------------------------


def chain(n: int) -> dict:
    return {f"x{i}": ((f"x{i - 1}",) if i else ()) for i in range(n)}


def test_a_chain_is_sent_ahead_a_bounded_number_of_links_at_a_time():
    from kernel_cluster.core.scheduler_state import SEND_AHEAD

    s = Sched(("w", 1))
    out = s.submit(chain(30), ["x29"])
    ahead = 1 + SEND_AHEAD  # one per thread, plus SEND_AHEAD
    assert list(computes(out)) == [f"x{i}" for i in range(ahead)]
    assert all(ct.worker == "w" for ct in computes(out).values())
    assert computes(out)["x1"].who_has == {"x0": ()}  # the input is not anywhere yet
    # each link that finishes makes room for one more
    out = s.finish("x0", "w")
    assert list(computes(out)) == [f"x{ahead}"]
    for i in range(1, 30):
        s.finish(f"x{i}", "w")
    assert s.state("x29") == "memory"


def test_input_failing_fails_the_dependents_sent_ahead_and_frees_them():
    s = Sched(("w", 1))
    s.submit(chain(3), ["x2"])
    exc = ValueError("bad")
    out = s.handle(TaskErred("x0", "w", exc, None, "text"))
    assert {("w", "x1"), ("w", "x2")} <= freed(out)
    assert s.state("x2") == "erred" and s.state("x1") in ("erred", "released")
    assert reports(out)[("c", "x2")].exception is exc


def test_input_taken_back_takes_back_the_dependents_sent_ahead():
    s = Sched(("w1", 1), ("w2", 1))
    s.submit({"z": ()}, ["z"])
    s.finish("z", "w1")
    s.submit({"a": ("z",), "b": ("a",)}, ["b"])
    assert s.s.tasks["b"].processing_on.address == "w1"
    # w1 could not read z for a: a is taken back and scheduled anew, and b with it
    out = s.handle(DependencyFetchFailed("a", "z", "w1"))
    assert {("w1", "a"), ("w1", "b")} <= freed(out)
    sent = computes(out)
    assert set(sent) == {"a", "b"} and sent["b"].worker == sent["a"].worker


def test_worker_death_takes_back_a_chain_sent_ahead():
    s = Sched(("w1", 1), ("w2", 1))
    s.submit(chain(4), ["x3"])
    first = s.s.tasks["x0"].processing_on.address
    other = "w2" if first == "w1" else "w1"
    out = s.handle(WorkerRemoved(first))
    # the chain starts over on the survivor, sent ahead again there
    assert {ct.worker for ct in computes(out).values()} == {other}
    assert set(computes(out)) == {"x0", "x1", "x2", "x3"}
    for i in range(4):
        s.finish(f"x{i}", other)
    assert s.state("x3") == "memory"


def test_input_killing_its_worker_fails_the_dependents_sent_ahead_there():
    s = Sched(("w0", 1), ("w1", 1), allowed_failures=1)
    s.submit({"x0": ()}, ["x0"])
    first = s.s.tasks["x0"].processing_on.address
    s.handle(WorkerRemoved(first))  # x0 has killed one worker
    s.submit({"x1": ("x0",)}, ["x1"])
    survivor = s.s.tasks["x0"].processing_on.address
    assert s.s.tasks["x1"].processing_on.address == survivor
    out = s.handle(WorkerRemoved(survivor))  # and a second: x0 fails, and so does x1
    assert isinstance(reports(out)[("c", "x1")].exception, KilledWorker)
    # erred, not brought back to waiting by the removal of the worker it was sent to
    assert s.state("x0") == s.state("x1") == "erred"


def test_cancelling_a_chain_sent_ahead_frees_every_link_on_the_worker():
    s = Sched(("w", 1))
    s.submit(chain(3), ["x2"])
    out = s.handle(ClientCancelledKeys("c", ["x2"]))
    assert freed(out) == {("w", "x0"), ("w", "x1"), ("w", "x2")}
    assert not s.s.tasks


# -- the edges: typed events in, typed instructions out, compared whole ------------------


def test_a_chain_as_the_exact_instructions_it_makes():
    """b is sent ahead to the worker computing a, its one input; a finishing then says
    nothing; b finishing reports b and frees a. Each instruction names its stimulus."""
    s = SchedulerState(worker_saturation=float("inf"))
    assert s.handle_stimulus(WorkerAdded("w", 1, stimulus_id="s0"), ClientAdded("c", "s1")) == []
    out = s.handle_stimulus(
        GraphSubmitted(
            "c",
            {"a": "spec-a", "b": "spec-b"},
            {"a": frozenset(), "b": frozenset({"a"})},
            ["b"],
            {"a": 0, "b": 1},
            None,
            "s2",
            1.0,
        )
    )
    assert out == [
        ComputeTask("w", "a", "spec-a", {}, {}, (1, 0, 1), "a", "default-1", "s2"),
        ComputeTask("w", "b", "spec-b", {"a": ()}, {"a": 0}, (1, 1, 2), "b", "default-1", "s2"),
        SetClusterBusy(True, "s2"),
    ]
    assert s.handle_stimulus(TaskFinished("a", "w", 10, stimulus_id="s3", time=2.0)) == []
    out = s.handle_stimulus(TaskFinished("b", "w", 20, stimulus_id="s4", time=3.0))
    assert out == [
        FreeKeys("w", ["a"], "s4"),
        ReportKey("c", "b", "finished", None, None, "s4"),
        SetClusterBusy(False, "s4"),
    ]
    assert s.handle_stimulus(ClientReleasedKeys("c", ["b"], "s5")) == [FreeKeys("w", ["b"], "s5")]
    s.validate_state()
    assert not s.tasks


def test_an_error_as_the_exact_instructions_it_makes():
    s = SchedulerState(worker_saturation=float("inf"))
    s.handle_stimulus(WorkerAdded("w", 2), ClientAdded("c"))
    s.handle_stimulus(
        GraphSubmitted("c", {"x": "spec-x"}, {"x": frozenset()}, ["x"], stimulus_id="s1")
    )
    boom = ValueError("boom")
    out = s.handle_stimulus(TaskErred("x", "w", boom, None, "ValueError: boom", stimulus_id="s2"))
    assert out == [
        ReportKey("c", "x", "error", boom, None, "s2"),
        FreeKeys("w", ["x"], "s2"),
        SetClusterBusy(False, "s2"),
    ]
    s.validate_state()


def test_an_event_of_no_known_kind_is_refused_by_name():
    @dataclasses.dataclass(slots=True)
    class MoonRose(SchedulerEvent):
        stimulus_id: str = "moon"
        time: float = 0.0

    s = SchedulerState()
    with pytest.raises(TypeError, match=r"no handler for .*MoonRose"):
        s.handle_stimulus(MoonRose())
    with pytest.raises(TypeError, match="no handler for 'not an event'"):
        s.handle_stimulus("not an event")  # type: ignore[arg-type]


def test_every_event_has_a_handler_and_every_message_its_base():
    """Events and instructions are slotted dataclasses under the two bases, and every
    event class is handled: adding one without a handler fails here, not in use."""
    classes = [
        c
        for c in vars(scheduler_messages).values()
        if isinstance(c, type) and c.__module__ == scheduler_messages.__name__
    ]
    events = [c for c in classes if issubclass(c, SchedulerEvent) and c is not SchedulerEvent]
    instructions = [c for c in classes if issubclass(c, SchedulerInstruction)]
    assert set(events) | set(instructions) | {SchedulerEvent} == set(classes)
    for cls in events + instructions:
        if dataclasses.is_dataclass(cls):
            assert "__slots__" in vars(cls), cls
            assert "stimulus_id" in {f.name for f in dataclasses.fields(cls)}, cls
    assert set(events) == set(SchedulerState._handlers)
    assert {"GraphSubmitted", "TaskFinished", "WorkerRemoved"} <= {c.__name__ for c in events}
