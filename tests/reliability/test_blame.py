"""Blame for a worker's death, as the state machines apply it (no engine, no clock).

End to end (real processes, os._exit) this is in test_nanny.py; here each rule is
pinned down on its own: who counts a death, who runs alone afterwards, and what
the worker does with a task it must run alone.
"""

from __future__ import annotations

from kernel_cluster.core.blame import SLOT_SIZE, key_text
from kernel_cluster.core.scheduler_messages import (
    ClientAdded,
    ComputeTask,
    ComputeTaskAlone,
    GraphSubmitted,
    WorkerAdded,
    WorkerRemoved,
)
from kernel_cluster.core.scheduler_state import SchedulerState
from kernel_cluster.core.worker_messages import (
    ComputeAloneRequested,
    ComputeRequested,
    Execute,
    ExecuteSucceeded,
)
from kernel_cluster.core.worker_state import WorkerState


def scheduler(*workers: str, allowed_failures: int = 3) -> SchedulerState:
    s = SchedulerState(worker_saturation=float("inf"), allowed_failures=allowed_failures)
    for w in workers:
        s.handle_stimulus(WorkerAdded(w, 2))
    s.handle_stimulus(ClientAdded("c"))
    return s


def submit(s: SchedulerState, *keys: str) -> list:
    specs = {k: f"spec-{k}" for k in keys}
    return s.handle_stimulus(
        GraphSubmitted("c", specs, {k: frozenset() for k in keys}, list(keys), None, None)
    )


def test_only_the_tasks_running_at_a_death_are_blamed() -> None:
    s = scheduler("w1", "w2")
    submit(s, "killer", "beside", "queued")
    for k in ("killer", "beside", "queued"):  # all on one worker, as on a busy cluster
        ts = s.tasks[k]
        ts.processing_on.processing.discard(ts)
        ts.processing_on = s.workers["w1"]
        s.workers["w1"].processing.add(ts)
    out = s.handle_stimulus(WorkerRemoved("w1", running=(b"killer", b"beside")))
    s.validate_state()
    # two running: an ambiguous death, counted for neither, but both are suspects now
    assert s.tasks["killer"].suspicious == s.tasks["beside"].suspicious == 0
    assert s.tasks["killer"].alone and s.tasks["beside"].alone
    assert s.tasks["queued"].suspicious == 0 and not s.tasks["queued"].alone
    # the suspects run alone from now on; the others as usual
    sent = {i.key: type(i) for i in out if isinstance(i, ComputeTask)}
    assert sent == {"killer": ComputeTaskAlone, "beside": ComputeTaskAlone, "queued": ComputeTask}


def test_a_suspect_in_an_ambiguous_death_again_counts_it() -> None:
    s = scheduler("w1", "w2")
    submit(s, "a", "b")
    s.tasks["a"].alone = True  # alone, yet found beside another: no second free death
    w = s.tasks["a"].processing_on.address
    s.tasks["b"].processing_on.processing.discard(s.tasks["b"])
    s.tasks["b"].processing_on = s.workers[w]
    s.workers[w].processing.add(s.tasks["b"])
    s.handle_stimulus(WorkerRemoved(w, running=(b"a", b"b")))
    assert s.tasks["a"].suspicious == 1 and s.tasks["b"].suspicious == 0


def test_one_task_running_counts_the_death() -> None:
    s = scheduler("w1", "w2")
    submit(s, "a")
    w = s.tasks["a"].processing_on.address
    s.handle_stimulus(WorkerRemoved(w, running=(b"a",)))
    assert s.tasks["a"].suspicious == 1 and s.tasks["a"].alone


def test_unknown_slots_blame_every_task_as_before() -> None:
    s = scheduler("w1", "w2")
    submit(s, "a")
    w = s.tasks["a"].processing_on.address
    out = s.handle_stimulus(WorkerRemoved(w, running=None))
    assert s.tasks["a"].suspicious == 1
    assert not any(isinstance(i, ComputeTaskAlone) for i in out)


def test_a_task_killing_every_worker_alone_still_fails() -> None:
    s = scheduler("w1", allowed_failures=1)
    submit(s, "killer")
    for i in range(2):
        w = s.tasks["killer"].processing_on.address
        s.handle_stimulus(WorkerRemoved(w, running=(b"killer",)))
        s.handle_stimulus(WorkerAdded(f"new-{i}", 2))
    assert s.tasks["killer"].state == "erred"


def test_long_keys_are_matched_by_their_cut_text() -> None:
    s = scheduler("w1", "w2")
    long = "x" * 1000
    submit(s, long)
    w = s.tasks[long].processing_on.address
    s.handle_stimulus(WorkerRemoved(w, running=(key_text(long)[: SLOT_SIZE - 2],)))
    assert s.tasks[long].suspicious == 1


def _compute(cls: type, key: str, priority: int) -> object:
    return cls(key, f"spec-{key}", {}, {}, (priority,), key)


def executed(out: list) -> list:
    return [i.key for i in out if isinstance(i, Execute)]


def test_worker_runs_a_suspect_with_nothing_beside_it() -> None:
    ws = WorkerState(address="w", nthreads=2, prefetch=0)
    assert executed(ws.handle_stimulus(_compute(ComputeRequested, "a", 0))) == ["a"]
    # the suspect waits for the running task to end; a task after it waits for it
    out = ws.handle_stimulus(
        _compute(ComputeAloneRequested, "suspect", 1), _compute(ComputeRequested, "b", 2)
    )
    assert executed(out) == []
    out = ws.handle_stimulus(ExecuteSucceeded("a", None, 1, "NoneType", []))
    assert executed(out) == ["suspect"]  # alone, though a thread is free for b
    out = ws.handle_stimulus(ExecuteSucceeded("suspect", None, 1, "NoneType", []))
    assert executed(out) == ["b"]
    ws.validate_state()
    assert not ws.alone
