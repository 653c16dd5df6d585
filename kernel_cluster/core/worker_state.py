"""A worker as a state machine: which tasks wait, run, fetch inputs or hold data.

One door, :meth:`WorkerState.handle_stimulus`: typed events in (``WorkerEvent``,
core/worker_messages.py, and the scheduler's ``ToWorker`` instructions as it sent
them), typed instructions out (``WorkerInstruction``); an event of a type it has no
handler for raises. The shell (engine/worker.py) turns the instructions into
thread-pool work and network fetches and feeds the outcomes back as events. ``data`` is injected: a
plain dict, or a spill buffer that moves values to disk; core does not care.

Task states here: ``waiting`` (inputs missing), ``ready``, ``executing``,
``long-running`` (executing, but its thread waits for other tasks and gave its slot
to another: ``secede``), ``memory``, ``error``, and for inputs held elsewhere
``fetch`` -> ``flight``.
A task the scheduler no longer wants while it runs or travels is marked
``cancelled``; its outcome is dropped when it arrives.

A task that waits on one input only, which this worker is about to compute, is
offered to the thread that will compute it (``ExecuteAfter``). If the thread
takes the offer, it runs the task right after the input, and the input's
``ExecuteSucceeded`` says so (``then``): the task goes from ``waiting`` straight
to ``executing``. Otherwise the task is made ready the usual way.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any, Literal

from .keys import Key
from .lazysets import EMPTY, added, discarded
from .scheduler_messages import ComputeTask, ComputeTaskAlone, FreeKeys, ToWorker
from .worker_messages import (
    ComputeAloneRequested,
    ComputeRequested,
    Execute,
    ExecuteAfter,
    ExecuteFailed,
    ExecuteSeceded,
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
    SendTaskSeceded,
    WorkerEvent,
    WorkerInstruction,
)

WorkerTaskStateName = Literal[
    "released",
    "waiting",
    "ready",
    "executing",
    "long-running",
    "memory",
    "error",
    "fetch",
    "flight",
]
ACTIVE = frozenset({"waiting", "ready", "executing", "long-running"})
RUNNING = frozenset({"executing", "long-running"})


class WorkerTask:
    """One key on a worker: a task to run here, or an input to fetch.

    ``dependencies``, ``dependents`` and ``waiting_for_data`` are read like sets, but
    change only through the ``add_*``/``discard_*`` methods (or by assigning
    ``EMPTY``): while empty they are the shared ``EMPTY``. ``startstops`` (transfers
    of its inputs, reported with the task's own) is an empty tuple until one arrives.
    """

    __slots__ = (
        "alone",
        "annotation",
        "cancelled",
        "dependencies",
        "dependents",
        "end_awaited",
        "key",
        "nbytes",
        "offered",
        "prefix",
        "priority",
        "requested",
        "span_id",
        "spec",
        "startstops",
        "state",
        "waiting_for_data",
        "who_has",
    )

    def __init__(self, key: Key):
        self.key = key
        self.state: WorkerTaskStateName = "released"
        self.spec: Any = None
        self.priority: tuple[Any, ...] = ()
        self.prefix = ""
        self.span_id: str | None = None
        self.annotation: dict[Any, Any] | None = None
        self.dependencies: WorkerTaskSet = EMPTY
        self.dependents: WorkerTaskSet = EMPTY
        self.waiting_for_data: WorkerTaskSet = EMPTY
        self.who_has: tuple[str, ...] = ()
        self.nbytes = 0
        self.startstops: tuple[tuple[Any, ...], ...] = ()
        self.requested = False  # the scheduler asked this worker to compute it
        self.offered = False  # waiting, and offered to the thread of its input (ExecuteAfter)
        self.cancelled = False
        # cancelled while executing, and the scheduler counts it as taking a thread
        # until told it ended (SendCancelledTasksEnded)
        self.end_awaited = False
        self.alone = False  # a suspect of killing workers: nothing runs beside it

    def __repr__(self) -> str:
        flag = " cancelled" if self.cancelled else ""
        return f"<WorkerTask {self.key!r} {self.state}{flag}>"

    def __lt__(self, other: WorkerTask) -> bool:
        return self.priority < other.priority

    # -- the lazily made sets (see core/lazysets.py) ------------------------------------

    def add_dependency(self, ts: WorkerTask) -> None:
        self.dependencies = added(self.dependencies, ts)

    def add_dependent(self, ts: WorkerTask) -> None:
        self.dependents = added(self.dependents, ts)

    def discard_dependent(self, ts: WorkerTask) -> None:
        self.dependents = discarded(self.dependents, ts)

    def add_waiting_for(self, ts: WorkerTask) -> None:
        self.waiting_for_data = added(self.waiting_for_data, ts)

    def discard_waiting_for(self, ts: WorkerTask) -> None:
        self.waiting_for_data = discarded(self.waiting_for_data, ts)


# a set of worker tasks, or EMPTY while empty
WorkerTaskSet = set[WorkerTask] | frozenset[WorkerTask]


class WorkerState:
    def __init__(
        self,
        *,
        address: str,
        nthreads: int,
        data: MutableMapping[Key, Any] | None = None,
        prefetch: int | None = None,
        max_concurrent_gathers: int = 8,
        max_gather_nbytes: int = 64 * 2**20,
        transition_log_length: int = 10_000,
    ):
        self.address = address
        self.nthreads = nthreads
        # Tasks handed to the thread pool beyond one per thread, so threads go from
        # task to task without waiting for the event loop; results come back in batches.
        self.prefetch = max(8, 2 * nthreads) if prefetch is None else prefetch
        self.data: MutableMapping[Key, Any] = {} if data is None else data
        self.tasks: dict[Key, WorkerTask] = {}
        self.ready: list[tuple[tuple[Any, ...], WorkerTask]] = []  # heap; stale entries skipped
        self.executing: set[WorkerTask] = set()
        self.long_running: set[WorkerTask] = set()  # seceded: they take no thread
        self.alone: set[WorkerTask] = set()  # suspects to run alone; pruned lazily
        self.fetch: set[WorkerTask] = set()
        self.in_flight: dict[str, set[WorkerTask]] = {}  # peer -> tasks travelling from it
        self.paused = False
        self.max_concurrent_gathers = max_concurrent_gathers
        self.max_gather_nbytes = max_gather_nbytes
        self.transition_log: deque[tuple[Key, str, str, str]] = deque(
            maxlen=transition_log_length or None
        )
        self.on_transition: Callable[[WorkerTask, str, str], None] | None = None
        self._out: list[WorkerInstruction] = []
        self._stimulus_id = ""

    def handle_stimulus(self, *events: WorkerEvent | ToWorker) -> list[WorkerInstruction]:
        """Take ``events`` in order; the instructions they lead to, in order."""
        out: list[WorkerInstruction] = []
        self._out = out
        handlers = self._handlers
        for event in events:
            try:
                handler = handlers[type(event)]
            except KeyError:
                raise TypeError(
                    f"The worker state machine has no handler for {event!r}: events are "
                    "the WorkerEvent classes of core/worker_messages.py and the scheduler's "
                    "ToWorker instructions, each listed in WorkerState._handlers."
                ) from None
            self._stimulus_id = event.stimulus_id
            handler(self, event)
        self._ensure_communicating()
        self._ensure_computing()
        self._out = []
        return out

    # -- scheduler requests -----------------------------------------------------------

    def _handle_compute_requested(self, ev: ComputeRequested | ComputeTask) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None:
            ts = self.tasks[ev.key] = WorkerTask(ev.key)
        elif ts.end_awaited:  # the scheduler counts it as processing here again
            ts.end_awaited = False
            self._out.append(SendCancelledTasksEnded([ts.key], self._stimulus_id))
        ts.requested = True
        ts.cancelled = False
        state = ts.state
        if state == "memory":
            self._out.append(SendTaskFinished(ts.key, ts.nbytes, "", [], None, self._stimulus_id))
            return
        if state in ACTIVE or state == "flight":
            return  # already on its way; a flight result is reported on arrival
        if state == "fetch":
            self.fetch.discard(ts)
        ts.spec = ev.spec
        ts.priority = ev.priority
        ts.prefix = ev.prefix
        ts.span_id = ev.span_id
        ts.annotation = ev.annotation
        ts.startstops = ()
        for dep_key, holders in ev.who_has.items():
            dts = self.tasks.get(dep_key)
            if dts is None:
                dts = self.tasks[dep_key] = WorkerTask(dep_key)
            ts.add_dependency(dts)
            dts.add_dependent(ts)
            if dts.state == "memory":
                continue
            ts.add_waiting_for(dts)
            if dts.state in ("released", "fetch", "error"):
                dts.who_has = tuple(h for h in holders if h != self.address)
                dts.nbytes = ev.nbytes.get(dep_key, 0)
                if not dts.priority or ev.priority < dts.priority:
                    dts.priority = ev.priority
                dts.cancelled = False
                if dts.state != "fetch":
                    self._set_state(dts, "fetch")
                    self.fetch.add(dts)
            elif dts.state == "flight":
                dts.cancelled = False
        if ts.waiting_for_data:
            self._set_state(ts, "waiting")
            self._offer_continuation(ts)
        else:
            self._make_ready(ts)

    def _handle_compute_alone(self, ev: ComputeAloneRequested | ComputeTaskAlone) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None:
            ts = self.tasks[ev.key] = WorkerTask(ev.key)
        ts.alone = True  # before: it must not be offered to a thread as a continuation
        self.alone.add(ts)
        self._handle_compute_requested(ev)

    def _offer_continuation(self, ts: WorkerTask) -> None:
        """``ts`` waits on one input only, which a task thread here will compute (it is
        ready or executing, or itself offered): that thread may run ``ts`` straight
        after (``ExecuteAfter``). A chain of tasks then runs link after link on one
        thread, without a wake-up of the event loop and of a task thread per link."""
        if len(ts.waiting_for_data) != 1 or self.paused or ts.alone:
            return
        for dts in ts.waiting_for_data:
            state = dts.state
            if (
                state == "ready" or state == "executing" or (state == "waiting" and dts.offered)
            ) and not dts.cancelled:
                ts.offered = True
                self._out.append(ExecuteAfter(ts.key, dts.key, self._stimulus_id))

    def _make_ready(self, ts: WorkerTask) -> None:
        self._set_state(ts, "ready")
        ts.offered = False
        heapq.heappush(self.ready, (ts.priority, ts))
        for dts in ts.dependents:
            if dts.state == "waiting" and not dts.offered:
                self._offer_continuation(dts)

    def _handle_free_keys_requested(self, ev: FreeKeysRequested) -> None:
        if ev.running:
            self._free_running(ev.keys)
            return
        for key in ev.keys:
            ts = self.tasks.get(key)
            if ts is not None:
                ts.requested = False
                self._release(ts)

    def _free_running(self, keys: list[Key]) -> None:
        """Free tasks the scheduler had processing here; it counts each as taking a
        thread until told otherwise: at once for those not executing, at their end for
        the others, which it is told are still running (the shell withdraws a task
        handed to the pool but not started before this, see engine/handoff.py)."""
        ended = []
        running = []
        for key in keys:
            ts = self.tasks.get(key)
            if ts is None:
                ended.append(key)
                continue
            ts.requested = False
            self._release(ts)
            if ts.state == "executing":
                ts.end_awaited = True
                running.append(key)
            else:
                ended.append(key)
        if ended:
            self._out.append(SendCancelledTasksEnded(ended, self._stimulus_id))
        if running:
            self._out.append(SendCancelledTasksRunning(running, self._stimulus_id))

    def _release(self, ts: WorkerTask) -> None:
        state = ts.state
        if state in RUNNING or state == "flight" or any(d.state in ACTIVE for d in ts.dependents):
            # running, travelling or still read by a local task: drop it when that ends
            ts.cancelled = True
            return
        if state == "memory":
            self.data.pop(ts.key, None)
        elif state == "fetch":
            self.fetch.discard(ts)
        self._set_state(ts, "released")
        self._detach(ts)
        self._forget_if_unused(ts)

    def _detach(self, ts: WorkerTask) -> None:
        """``ts`` is done with its inputs: let go of fetched inputs nobody else needs."""
        if not ts.dependencies:
            return
        ts.waiting_for_data = EMPTY
        for dts in ts.dependencies:
            dts.discard_dependent(ts)
            if dts.dependents:
                continue
            if dts.cancelled or (not dts.requested and dts.state in ("fetch", "flight")):
                self._release(dts)
            elif dts.state == "released":
                self._forget_if_unused(dts)
        ts.dependencies = EMPTY

    def _forget_if_unused(self, ts: WorkerTask) -> None:
        if ts.state == "released" and not ts.dependents and not ts.requested:
            self.tasks.pop(ts.key, None)

    def _handle_pause_changed(self, ev: PauseChanged) -> None:
        self.paused = ev.paused

    # -- execution --------------------------------------------------------------------

    def _ensure_computing(self) -> None:
        if self.paused:
            return
        if self.alone and self._start_alone():
            return
        ready = self.ready
        limit = self.nthreads + self.prefetch
        while ready and len(self.executing) < limit:
            ts = heapq.heappop(ready)[1]
            if ts.state != "ready":
                continue
            self._set_state(ts, "executing")
            self.executing.add(ts)
            self._out.append(Execute(ts.key, self._stimulus_id))

    def _start_alone(self) -> bool:
        """Start tasks while a suspect (``alone``) is here: False if none is left.

        A ready suspect waits until nothing else executes (tasks handed to the pool
        included), then starts, and nothing starts beside it until it ends: if the
        process dies meanwhile, the suspect alone is blamed. Tasks ahead of it in
        priority order start as usual.
        """
        alone = self.alone
        for ts in [
            ts for ts in alone if ts.state not in ACTIVE or self.tasks.get(ts.key) is not ts
        ]:
            alone.discard(ts)
            ts.alone = False
        if not alone:
            return False
        executing = self.executing
        if any(ts.state == "executing" for ts in alone):
            return True
        ready = self.ready
        limit = self.nthreads + self.prefetch
        while ready and len(executing) < limit:
            ts = ready[0][1]
            if ts.state != "ready":
                heapq.heappop(ready)
                continue
            if ts.alone and executing:
                break  # until the threads are free
            heapq.heappop(ready)
            self._set_state(ts, "executing")
            executing.add(ts)
            self._out.append(Execute(ts.key, self._stimulus_id))
            if ts.alone:
                break
        return True

    def _end_execution(self, key: Key) -> WorkerTask | None:
        """The pool is done with ``key``: the task, unless it was cancelled meanwhile."""
        ts = self.tasks.get(key)
        if ts is None or ts.state not in RUNNING:
            return None
        if ts.state == "executing":
            self.executing.discard(ts)
        else:
            self.long_running.discard(ts)
        if ts.cancelled:
            if ts.end_awaited:  # set only on a cancelled task
                ts.end_awaited = False
                self._out.append(SendCancelledTasksEnded([key], self._stimulus_id))
            ts.cancelled = False
            self._set_state(ts, "released")
            self._detach(ts)
            self._forget_if_unused(ts)
            return None
        return ts

    def _handle_execute_succeeded(self, ev: ExecuteSucceeded) -> None:
        ts = self._end_execution(ev.key)
        if ts is None:
            return
        if ev.then is not None:
            # the thread went on to this waiting dependent: it is executing already
            nts = self.tasks.get(ev.then)
            if nts is not None and nts.state == "waiting" and nts.waiting_for_data == {ts}:
                nts.waiting_for_data = EMPTY
                nts.offered = False
                self._set_state(nts, "executing")
                self.executing.add(nts)
        self.data[ts.key] = ev.value
        ts.nbytes = ev.nbytes
        self._set_state(ts, "memory")
        self._out.append(
            SendTaskFinished(
                ts.key,
                ev.nbytes,
                ev.type_name,
                [*ts.startstops, *ev.startstops] if ts.startstops else ev.startstops,
                ev.thread,
                self._stimulus_id,
            )
        )
        ts.startstops = ()
        ts.spec = None
        self._detach(ts)
        self._wake_dependents(ts)

    def _handle_execute_failed(self, ev: ExecuteFailed) -> None:
        ts = self._end_execution(ev.key)
        if ts is None:
            return
        self._set_state(ts, "error")
        self._out.append(
            SendTaskErred(
                ts.key,
                ev.exception,
                ev.traceback,
                ev.exception_text,
                [*ts.startstops, *ev.startstops],
                ev.thread,
                self._stimulus_id,
            )
        )
        ts.spec = None
        self._detach(ts)

    def _handle_execute_seceded(self, ev: ExecuteSeceded) -> None:
        """The task waits for others and gave its thread's slot away: another task may
        start here, and the scheduler may send one in its place."""
        ts = self.tasks.get(ev.key)
        if ts is None or ts.state != "executing":
            return
        self.executing.discard(ts)
        self.long_running.add(ts)
        self._set_state(ts, "long-running")
        if not ts.cancelled:
            self._out.append(SendTaskSeceded(ts.key, self._stimulus_id))

    def _handle_execute_skipped(self, ev: ExecuteSkipped) -> None:
        ts = self._end_execution(ev.key)
        if ts is not None:  # re-requested meanwhile, or skipped for a pause: run it later
            self._make_ready(ts)

    def _wake_dependents(self, ts: WorkerTask) -> None:
        for dts in ts.dependents:
            if dts.state == "waiting":
                dts.discard_waiting_for(ts)
                if not dts.waiting_for_data:
                    self._make_ready(dts)
                else:
                    self._offer_continuation(dts)

    # -- fetching inputs from peers ---------------------------------------------------

    def _ensure_communicating(self) -> None:
        if not self.fetch:
            return
        by_peer: dict[str, list[WorkerTask]] = {}
        for ts in sorted(self.fetch):
            peer = self._pick_peer(ts)
            if peer is None:
                continue
            by_peer.setdefault(peer, []).append(ts)
        for peer, tss in by_peer.items():
            if len(self.in_flight) >= self.max_concurrent_gathers:
                break
            if peer in self.in_flight:
                continue  # one transfer per peer at a time; the rest go next round
            batch: list[WorkerTask] = []
            total = 0
            for ts in tss:
                if batch and total + ts.nbytes > self.max_gather_nbytes:
                    break
                batch.append(ts)
                total += ts.nbytes
            for ts in batch:
                self.fetch.discard(ts)
                self._set_state(ts, "flight")
            self.in_flight[peer] = set(batch)
            self._out.append(GatherDep(peer, [t.key for t in batch], total, self._stimulus_id))

    def _pick_peer(self, ts: WorkerTask) -> str | None:
        """A holder we are not already fetching from, else any holder."""
        if not ts.who_has:
            self._give_up_on(ts)
            return None
        for peer in ts.who_has:
            if peer not in self.in_flight:
                return peer
        return ts.who_has[0]

    def _give_up_on(self, dts: WorkerTask) -> None:
        """No holder left for an input: tell the scheduler about each task that needed it."""
        self.fetch.discard(dts)
        for ts in list(dts.dependents):
            if ts.state in ("waiting", "ready"):
                self._out.append(SendDependencyUnavailable(ts.key, dts.key, self._stimulus_id))
                ts.requested = False
                self._set_state(ts, "released")
                self._detach(ts)
                self._forget_if_unused(ts)
        if dts.state != "released":
            self._set_state(dts, "released")
        self._forget_if_unused(dts)

    def _handle_gather_dep_succeeded(self, ev: GatherDepSucceeded) -> None:
        tss = self.in_flight.pop(ev.worker, set())
        added: list[Key] = []
        nbytes: dict[Key, int] = {}
        for ts in tss:
            if ts.state != "flight":
                continue
            if ts.key not in ev.data:
                # the peer did not have it (any more): forget that holder
                ts.who_has = tuple(h for h in ts.who_has if h != ev.worker)
                self._set_state(ts, "fetch")
                self.fetch.add(ts)
                continue
            if ts.cancelled and not ts.dependents:
                ts.cancelled = False
                self._set_state(ts, "released")
                self._forget_if_unused(ts)
                continue
            ts.cancelled = False
            self.data[ts.key] = ev.data[ts.key]
            ts.nbytes = ev.nbytes.get(ts.key, ts.nbytes)
            self._set_state(ts, "memory")
            added.append(ts.key)
            nbytes[ts.key] = ts.nbytes
            for dts in ts.dependents:
                dts.startstops += (("transfer", ev.start, ev.stop, ev.worker),)
            if ts.requested:
                self._out.append(
                    SendTaskFinished(ts.key, ts.nbytes, "", [], None, self._stimulus_id)
                )
            self._wake_dependents(ts)
        if added:
            self._out.append(SendReplicasAdded(added, nbytes, self._stimulus_id))

    def _handle_gather_dep_failed(self, ev: GatherDepFailed) -> None:
        tss = self.in_flight.pop(ev.worker, set())
        for ts in tss:
            if ts.state != "flight":
                continue
            ts.who_has = tuple(h for h in ts.who_has if h != ev.worker)
            if ts.cancelled and not ts.dependents:
                self._set_state(ts, "released")
                self._forget_if_unused(ts)
                continue
            self._set_state(ts, "fetch")
            self.fetch.add(ts)

    # -- bookkeeping ------------------------------------------------------------------

    def _set_state(self, ts: WorkerTask, new: WorkerTaskStateName) -> None:
        old = ts.state
        ts.state = new
        self.transition_log.append((ts.key, old, new, self._stimulus_id))
        if self.on_transition is not None:
            self.on_transition(ts, old, new)

    def story(self, *keys: Key) -> list[tuple[Any, ...]]:
        wanted = set(keys)
        return [entry for entry in self.transition_log if entry[0] in wanted]

    def validate_state(self) -> None:
        for key, ts in self.tasks.items():
            assert ts.key == key
            if ts.state == "memory":
                assert key in self.data, ts
            if ts.state == "executing":
                assert ts in self.executing, ts
            if ts.state == "long-running":
                assert ts in self.long_running, ts
            if ts.state == "fetch":
                assert ts in self.fetch, ts
            if ts.state == "waiting":
                assert ts.waiting_for_data, ts
                assert all(d.state != "memory" for d in ts.waiting_for_data), ts
            for dts in ts.dependencies:
                assert ts in dts.dependents, (ts, dts)
        for ts in self.executing:
            assert ts.state == "executing", ts
        assert len(self.executing) <= self.nthreads + self.prefetch
        for peer, tss in self.in_flight.items():
            for ts in tss:
                assert ts.state in ("flight", "released", "memory", "fetch"), (peer, ts)

    # the one place an event type meets its handler
    _handlers: dict[type[WorkerEvent | ToWorker], Callable[[WorkerState, Any], None]] = {
        ComputeRequested: _handle_compute_requested,
        FreeKeysRequested: _handle_free_keys_requested,
        # the scheduler's own instructions, as a local channel hands them over
        ComputeTask: _handle_compute_requested,
        ComputeAloneRequested: _handle_compute_alone,
        ComputeTaskAlone: _handle_compute_alone,
        FreeKeys: _handle_free_keys_requested,
        ExecuteSucceeded: _handle_execute_succeeded,
        ExecuteFailed: _handle_execute_failed,
        ExecuteSkipped: _handle_execute_skipped,
        ExecuteSeceded: _handle_execute_seceded,
        GatherDepSucceeded: _handle_gather_dep_succeeded,
        GatherDepFailed: _handle_gather_dep_failed,
        PauseChanged: _handle_pause_changed,
    }
