"""The scheduler as a state machine: events in, instructions out, no I/O.

One door, :meth:`SchedulerState.handle_stimulus`: typed events in
(``SchedulerEvent``, core/scheduler_messages.py), typed instructions out
(``SchedulerInstruction``); an event of a type it has no handler for raises.
Handlers are named ``_handle_<event>``. Transitions are plain methods
driven by explicit work lists rather than recursion, so a 100,000-task chain is
released without touching Python's recursion limit.

Reference counting: a task is *needed* while a client wants it or a dependent
waits on it. A task nobody needs is released (its data dropped); a released task
with no dependents and no client is forgotten. Released tasks that still have
dependents stay as lineage, so lost data can be recomputed.

A task is ``processing`` once it is sent to a worker: normally when all its
inputs are in memory, or earlier when its one missing input is processing on
that same worker (``_send_ahead``), so that the worker can start it the moment
the input is done. Until then its ``waiting_on`` still holds that input.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from .blame import running_tasks
from .keys import Key, key_group, key_split
from .lazysets import EMPTY
from .restrictions import NoValidWorkerError, none_present
from .scheduler_messages import (
    CancelledTasksEnded,
    CancelledTasksRunning,
    ClientAdded,
    ClientCancelledKeys,
    ClientReleasedKeys,
    ClientRemoved,
    ComputeTask,
    ComputeTaskAlone,
    DependencyFetchFailed,
    FreeKeys,
    GraphSubmitted,
    NoWorkerTimedOut,
    ReplicasAdded,
    ReportKey,
    ReportNoWorker,
    ResultSerializationFailed,
    SchedulerEvent,
    SchedulerInstruction,
    SetClusterBusy,
    TaskErred,
    TaskFinished,
    TaskSeceded,
    WorkerAdded,
    WorkerPauseChanged,
    WorkerRemoved,
)
from .scheduler_tasks import (
    PENDING_STATES,
    ClientRecord,
    TaskGroup,
    TaskPrefix,
    TaskState,
    TaskStateName,
    WorkerRecord,
)
from .spans import SpanTree

# a transition's listener: the task, its old and new state, and the event that caused
# it (TaskFinished, TaskErred...) when the hook wants it, else None
TransitionHook = Callable[[TaskState, str, str, SchedulerEvent | None], None]


class KilledWorker(RuntimeError):
    """A task was running on workers that died too many times; it may be what kills them.

    ``reason``: why the last of those workers went, when the engine knows (its nanny
    ended it for passing its memory limit, say), with what to do about it.
    """

    def __init__(self, key: Key, last_worker: str, allowed_failures: int, reason: str = ""):
        self.key = key
        self.last_worker = last_worker
        self.allowed_failures = allowed_failures
        self.reason = reason
        if reason:
            super().__init__(
                f"Task {key!r} was running on a worker that died {allowed_failures + 1} times "
                f"(last: {last_worker}). The last time, {reason}"
            )
        else:
            super().__init__(
                f"Task {key!r} was running on a worker that died {allowed_failures + 1} times "
                f"(last: {last_worker}). It may crash its worker (memory, segfault, os._exit); "
                "run it alone to check, or raise `allowed_failures` if the workers are flaky."
            )

    def __reduce__(self) -> tuple[type[KilledWorker], tuple[Key, str, int, str]]:
        return (KilledWorker, (self.key, self.last_worker, self.allowed_failures, self.reason))


class LostDependency(RuntimeError):
    """A task was submitted with a future whose data was already released."""

    def __init__(self, key: Key, dependency: Key):
        self.key = key
        self.dependency = dependency
        super().__init__(
            f"Task {key!r} depends on {dependency!r}, which the scheduler no longer has. "
            "Keep a reference to the dependency's future until its dependents are submitted."
        )

    def __reduce__(self) -> tuple[type[LostDependency], tuple[Key, Key]]:
        return (LostDependency, (self.key, self.dependency))


_priority = attrgetter("priority")
_NO_INPUTS: dict[Any, Any] = {}  # shared by every task without inputs; never mutated
MAX_EXTRA_SLOTS = 32  # per thread; see _extra_slots
# tasks a worker may be processing, beyond one per thread, before no more are sent to it
# ahead of their inputs (see _send_ahead)
SEND_AHEAD = 8


class SchedulerState:
    def __init__(
        self,
        *,
        worker_saturation: float = 1.5,
        queue_seconds: float = 0.05,
        allowed_failures: int = 3,
        transition_log_length: int = 100_000,
        spans: SpanTree | None = None,
    ):
        """``worker_saturation``: tasks without inputs sent to a worker per thread before
        the rest wait here (``queued``), so the scheduler can still place work where
        its inputs end up. ``queue_seconds``: on top of that, enough tasks to keep each
        thread busy that long, judged by the prefix's average duration, so that a
        round trip to a worker process never leaves short tasks' threads idle."""
        self.tasks: dict[Key, TaskState] = {}
        self.spans = spans if spans is not None else SpanTree(now=lambda: 0.0)
        # what changed since a reader's cursor (live views read only that)
        self.changes = self.spans.changes
        self.workers: dict[str, WorkerRecord] = {}
        self.clients: dict[str, ClientRecord] = {}
        self.task_prefixes: dict[str, TaskPrefix] = {}
        self.task_groups: dict[tuple[str, str | None], TaskGroup] = {}
        self.worker_saturation = worker_saturation
        self.queue_seconds = queue_seconds
        self.allowed_failures = allowed_failures
        self.queued: list[tuple[tuple[Any, ...], TaskState]] = []  # heap; stale entries skipped
        # restricted to workers that are paused, busy with cancelled tasks or gone (the
        # task is then ``no-worker``, and its spell's mark is in ``no_worker``)
        self.unrunnable: set[TaskState] = set()
        self.no_worker: dict[TaskState, int] = {}
        self._no_worker_marks = 0
        self.generation = 0
        self._task_counter = 0  # makes priorities unique: heaps never compare tasks
        self.total_nthreads = 0
        self.transition_log: deque[tuple[Key, str, str, str]] = deque(
            maxlen=transition_log_length or None
        )
        self.log_transitions = transition_log_length > 0
        self.on_transition: TransitionHook | None = None
        # when set, only these (start, finish) pairs reach on_transition: the hook sits on
        # every task's path, and most listeners want few transitions
        self.transition_filter: frozenset[tuple[str, str]] | None = None
        self._instructions: list[SchedulerInstruction] = []
        self._stimulus_id = ""
        self._time = 0.0  # of the event being handled
        self.n_pending = 0  # tasks waiting, queued or processing
        self._last_work_kept = False  # some prefix holds finished counts
        self.busy = False
        self.holds_queued = False  # ready tasks wait in ``queued`` (workers are told)
        self.last_span: Any = None  # of the task that finished last (told when quiet)
        self._ready: list[TaskState] = []

    # -- the one door -----------------------------------------------------------------

    def handle_stimulus(self, *events: SchedulerEvent) -> list[SchedulerInstruction]:
        """Take ``events`` in order; the instructions they lead to, in order."""
        out: list[SchedulerInstruction] = []
        handlers = self._handlers
        for event in events:
            try:
                handler = handlers[type(event)]
            except KeyError:
                raise TypeError(
                    f"The scheduler state machine has no handler for {event!r}: events "
                    "are the SchedulerEvent classes of core/scheduler_messages.py, each "
                    "listed in SchedulerState._handlers."
                ) from None
            self._stimulus_id = event.stimulus_id
            self._time = event.time
            self._instructions = out
            handler(self, event)
            self._flush_ready()
            busy = self.n_pending > 0
            queue = self.queued
            holds = bool(queue) and (queue[0][1].state == "queued" or self._holds_queued())
            if busy is not self.busy or holds is not self.holds_queued:
                self.busy = busy
                self.holds_queued = holds
                span = None if busy else self.last_span
                out.append(SetClusterBusy(busy, self._stimulus_id, holds, span))
        self._instructions = []
        return out

    def _holds_queued(self) -> bool:
        """Whether a task in ``queued`` still waits (entries left behind by tasks that
        moved on are dropped from the top of the heap, as ``_refill`` would)."""
        queue = self.queued
        while queue and queue[0][1].state != "queued":
            heapq.heappop(queue)
        return bool(queue)

    # -- graph ------------------------------------------------------------------------

    def _handle_graph_submitted(self, ev: GraphSubmitted) -> None:
        self.generation += 1
        gen = self.generation
        client = self._client(ev.client)
        ann = ev.annotations or {}
        code = ann.get("code", ())
        restrictions = ann.get("workers")
        loose = bool(ann.get("allow_other_workers", False))
        order = ev.order or {}
        per_task = ann.get("tasks")  # {key: annotations} of some tasks (dask.annotate)
        span_of = self._span_chooser(ann.get("span"), per_task, ev.time, code)
        tasks = self.tasks
        new: list[TaskState] = []
        for key, spec in ev.specs.items():
            ts = tasks.get(key)
            if ts is None:
                self._task_counter += 1
                ts = self._new_task(
                    key, spec, span_of(key), (gen, order.get(key, 0), self._task_counter)
                )
                if restrictions:
                    ts.worker_restrictions = frozenset(restrictions)
                    ts.loose_restrictions = loose
                if ann.get("extra"):
                    ts.annotations = dict(ann["extra"])
                if per_task is not None and key in per_task:
                    self._annotate(ts, per_task[key])
                new.append(ts)
            elif ts.state == "released" and ts.spec is None:
                ts.spec = spec
        lost: list[tuple[TaskState, Key]] = []
        deps_of = ev.dependencies
        for ts in new:
            for dep_key in deps_of.get(ts.key, ()):
                dts = tasks.get(dep_key)
                if dts is None:
                    lost.append((ts, dep_key))
                    continue
                ts.add_dependency(dts)
                dts.add_dependent(ts)
        for key in ev.wanted:
            ts = tasks.get(key)
            if ts is not None and ts not in client.wants_what:
                client.wants_what.add(ts)
                ts.add_who_wants(client)
        for ts, dep_key in lost:
            self._set_erred(ts, LostDependency(ts.key, dep_key), None, ts)
        for key in ev.wanted:
            ts = tasks.get(key)
            if ts is None:
                continue
            if ts.state == "memory" or ts.state == "erred":
                self._report(ts, client)
            elif ts.state == "released":
                self._compute(ts)
        for ts in new:
            if ts.state == "released" and not ts.who_wants and not ts.dependents:
                self._forget(ts)

    def _span_chooser(
        self,
        annotation: dict[str, Any] | None,
        per_task: dict[Key, dict[str, Any]] | None,
        time: float,
        code: tuple[Any, ...],
    ) -> Callable[[Key], str]:
        """``key -> span id`` for a submission: a task's own ``span`` annotation (a dask
        collection built inside ``span()``) wins over the submission's (the span open
        where it was computed). Spans are made as they are first needed, so a
        submission whose tasks all carry their own makes no empty default span."""
        chosen: dict[tuple[str, ...], str] = {}
        submission: list[str] = []

        def of_submission() -> str:
            if not submission:
                submission.append(self.spans.observe(annotation, time, code).id)
            return submission[0]

        if not per_task:
            return lambda key: of_submission()

        def span_of(key: Key) -> str:
            own = per_task.get(key)
            if own is None:
                return of_submission()
            span_ann = own.get("span")
            if not span_ann:
                return of_submission()
            ids = tuple(span_ann["ids"])
            span_id = chosen.get(ids)
            if span_id is None:
                span_id = chosen[ids] = self.spans.observe(span_ann, time, code).id
            return span_id

        return span_of

    @staticmethod
    def _annotate(ts: TaskState, own: dict[str, Any]) -> None:
        """One task's own annotations: where it may run (over the submission's), and
        the rest kept on the task (``retries``...)."""
        workers = own.get("workers")
        if workers:
            ts.worker_restrictions = frozenset(workers)
            ts.loose_restrictions = bool(own.get("allow_other_workers", False))
        rest = {k: v for k, v in own.items() if k not in ("workers", "allow_other_workers", "span")}
        if rest:
            ts.annotations = {**(ts.annotations or {}), **rest}

    def _new_task(
        self, key: Key, spec: Any, span_id: str | None, priority: tuple[Any, ...]
    ) -> TaskState:
        if self._last_work_kept and self.n_pending == 0:
            self._forget_last_work()  # new work on an idle cluster: it is the last now
        pname = key_split(key)
        prefix = self.task_prefixes.get(pname)
        if prefix is None:
            prefix = self.task_prefixes[pname] = TaskPrefix(pname)
        gkey = (pname if type(key) is not tuple else key_group(key), span_id)
        group = self.task_groups.get(gkey)
        if group is None:
            group = self.task_groups[gkey] = TaskGroup(gkey[0], prefix, span_id)
            prefix.groups.append(group)
            span = self.spans.spans.get(span_id) if span_id is not None else None
            if span is not None:
                span.groups.add(group)
        group.n_live += 1
        group.states["released"] += 1
        ts = TaskState(key, spec, group, priority)
        self.tasks[key] = ts
        return ts

    def _compute(self, root: TaskState) -> None:
        """Make a released task (and its released inputs) run again."""
        stack = [root]
        while stack:
            ts = stack.pop()
            if ts.state != "released" or not (ts is root or ts.waiters or ts.who_wants):
                continue
            self._set_state(ts, "waiting")
            for dts in ts.dependencies:
                state = dts.state
                if state == "memory":
                    dts.add_waiter(ts)
                    continue
                if state == "erred":
                    self._set_erred(ts, dts.exception, dts.traceback, dts.exception_blame or dts)
                    break
                dts.add_waiter(ts)
                ts.add_waiting_on(dts)
                if state == "released":
                    stack.append(dts)
            else:
                if not ts.waiting_on:
                    self._ready.append(ts)
                elif len(ts.waiting_on) == 1:
                    # submitted after its input started (a chain of client.submit calls)
                    for dts in ts.waiting_on:
                        if dts.state == "processing" and dts.processing_on is not None:
                            self._send_ahead(dts, dts.processing_on, (ts,))

    # -- choosing a worker ------------------------------------------------------------

    def _flush_ready(self) -> None:
        if not self._ready:
            return
        ready = self._ready
        self._ready = []
        if len(ready) > 1:
            ready.sort(key=_priority)
        for ts in ready:
            if ts.state == "waiting" and not ts.waiting_on:
                self._schedule(ts)

    def _schedule(self, ts: TaskState) -> None:
        ws = self._decide_worker(ts)
        if ws is None:
            self._queue(ts)
        else:
            self._send(ts, ws)

    def _decide_worker(self, ts: TaskState) -> WorkerRecord | None:
        workers = self.workers
        if not workers:
            return None
        if ts.worker_restrictions is not None:
            allowed = [workers[a] for a in ts.worker_restrictions if a in workers]
            if allowed:
                ws = self._best_of(ts, allowed, saturate=False)
                if ws is not None or not ts.loose_restrictions:
                    return ws  # None: every allowed worker is paused
            elif not ts.loose_restrictions:
                return None
        if ts.dependencies:
            return self._best_of(ts, workers.values(), saturate=False)
        return self._best_of(ts, workers.values(), saturate=True)

    def _best_of(
        self, ts: TaskState, candidates: Iterable[WorkerRecord], saturate: bool
    ) -> WorkerRecord | None:
        """Most dependency bytes held locally, then the least occupied; never a paused
        worker. A thread still running a task freed while it ran (``n_ending``) is not
        free: a worker with no free thread gets nothing, and the others are judged by
        their free threads."""
        best = None
        best_score: tuple[Any, ...] = ()
        deps = ts.dependencies
        limit_extra = self._extra_slots(ts) if saturate else 0
        for ws in candidates:
            if ws.paused:
                continue
            free = ws.nthreads - ws.n_ending
            if free <= 0:
                continue
            n = len(ws.processing)
            if ws.long_running:
                n -= len(ws.long_running)
            if saturate and n >= self._room(ws, free, limit_extra):
                continue
            local = 0
            if deps:
                for dts in deps:
                    if ws in dts.who_has:
                        local += dts.nbytes or 1
            score = (-local, n / free)
            if best is None or score < best_score:
                best, best_score = ws, score
        return best

    def _room(self, ws: WorkerRecord, free: int, extra: int) -> int:
        """Tasks ``ws`` may be processing (root tasks are sent up to this) with ``free``
        of its threads free and ``extra`` tasks per thread on top (``_extra_slots``)."""
        if free == ws.nthreads:
            return ws.saturation_limit + extra * free
        sat = self.worker_saturation
        limit = 1 << 62 if math.isinf(sat) else max(1, math.ceil(free * sat))
        return limit + extra * free

    def _extra_slots(self, ts: TaskState) -> int:
        """Extra tasks per thread that ``queue_seconds`` of this prefix's work amounts to.

        Capped: enough to cover a round trip to a worker process for the tiniest tasks,
        few enough that root tasks cannot run far ahead of the reductions that consume
        them (each one in flight may become a result held in memory).
        """
        avg = ts.prefix.duration_average
        if avg is None or math.isinf(self.worker_saturation):
            return 0
        return min(int(self.queue_seconds / max(avg, 1e-6)), MAX_EXTRA_SLOTS)

    def _queue(self, ts: TaskState) -> None:
        restrictions = ts.worker_restrictions
        if restrictions is not None and not ts.loose_restrictions:
            self.unrunnable.add(ts)
            if none_present(restrictions, self.workers):
                self._no_worker(ts)
            else:
                self._set_state(ts, "queued")
        else:
            self._set_state(ts, "queued")
            heapq.heappush(self.queued, (ts.priority, ts))

    def _no_worker(self, ts: TaskState) -> None:
        """``ts`` may only run on workers none of which is here (core/restrictions.py)."""
        self._set_state(ts, "no-worker")
        self._no_worker_marks += 1
        mark = self.no_worker[ts] = self._no_worker_marks
        assert ts.worker_restrictions is not None
        self._instructions.append(
            ReportNoWorker([(ts.key, mark)], ts.worker_restrictions, self._stimulus_id)
        )

    def _leave_unrunnable(self, ts: TaskState) -> None:
        self.unrunnable.discard(ts)
        if self.no_worker:
            self.no_worker.pop(ts, None)

    def _handle_no_worker_timed_out(self, ev: NoWorkerTimedOut) -> None:
        for key, mark in ev.keys:
            ts = self.tasks.get(key)
            if ts is None or ts.state != "no-worker" or self.no_worker.get(ts) != mark:
                continue
            self._leave_unrunnable(ts)
            assert ts.worker_restrictions is not None
            err = NoValidWorkerError(ts.key, ts.worker_restrictions, ev.timeout)
            self._set_erred(ts, err, None, ts, ev)

    def _send(self, ts: TaskState, ws: WorkerRecord) -> None:
        self._set_state(ts, "processing")
        ts.processing_on = ws
        ts.sent = self._time
        ws.processing.add(ts)
        if ts.dependencies:
            who_has = {}
            nbytes = {}
            for dts in ts.dependencies:
                who_has[dts.key] = tuple(w.address for w in dts.who_has)
                nbytes[dts.key] = dts.nbytes
        else:
            who_has = nbytes = _NO_INPUTS
        self._instructions.append(
            (ComputeTaskAlone if ts.alone else ComputeTask)(
                ws.address,
                ts.key,
                ts.spec,
                who_has,
                nbytes,
                ts.priority,
                ts.prefix.name,
                ts.group.span_id,
                self._stimulus_id,
                self._span_annotation(ts.group.span_id),
            )
        )
        if ts.dependents:
            self._send_ahead(ts, ws)

    def _send_ahead(
        self, ts: TaskState, ws: WorkerRecord, dependents: Iterable[TaskState] = ()
    ) -> None:
        """Send ``ts``'s dependents that wait on ``ts`` alone, and whose other inputs are
        all on ``ws``, to ``ws`` now, before ``ts`` has finished.

        They would go to ``ws`` anyway once ``ts`` is in memory there (all their input
        bytes would be local). Sent now, the worker starts each the moment its input is
        ready, on the very thread that made it (the worker's ExecuteAfter), instead of
        after a round trip through the scheduler: a chain of tasks runs without waking
        the event loop between its links. Such a task is ``processing`` while its
        input is still processing on the same worker (``waiting_on`` holds it); at most
        ``nthreads + SEND_AHEAD`` tasks are processing on a worker for this. A paused
        worker gets none: they are placed when ``ts`` is done.
        """
        if ws.paused or ws.n_ending >= ws.nthreads:
            return
        for dts in dependents or ts.dependents:
            if dts.state != "waiting" or len(dts.waiting_on) != 1:
                continue
            allowed = dts.worker_restrictions
            if allowed is not None and ws.address not in allowed:
                continue
            if any(d is not ts and ws not in d.who_has for d in dts.dependencies):
                continue
            if len(ws.processing) >= ws.nthreads + SEND_AHEAD:
                ws.ahead_blocked.append(ts)  # tried again as tasks finish here
                return
            self._send(dts, ws)

    def _send_blocked_ahead(self, ws: WorkerRecord) -> None:
        blocked = ws.ahead_blocked
        while blocked and len(ws.processing) < ws.nthreads + SEND_AHEAD:
            ts = blocked.pop()
            if ts.processing_on is ws:
                self._send_ahead(ts, ws)

    def _span_annotation(self, span_id: str | None) -> dict[Any, Any] | None:
        span = self.spans.spans.get(span_id) if span_id is not None else None
        return span.annotation if span is not None else None

    def _refill(self, ws: WorkerRecord) -> None:
        """A slot freed on ``ws``: hand it the highest-priority queued task."""
        queue = self.queued
        free = ws.nthreads - ws.n_ending
        if ws.paused or free <= 0:
            return
        while queue:
            ts = queue[0][1]
            if ts.state != "queued":
                heapq.heappop(queue)
                continue
            if ws.occupancy >= self._room(ws, free, self._extra_slots(ts)):
                break
            heapq.heappop(queue)
            self._send(ts, ws)

    def _stop_processing(self, ts: TaskState, ws: WorkerRecord, may_run: bool = True) -> None:
        """Take ``ts`` back from ``ws``, where it may be running: a task cannot be
        interrupted, so it takes a thread there until the worker says it ended.

        It cannot be running while it still waits on an input (sent ahead), nor on a
        worker whose every thread runs a task freed before (``running_cancelled``), nor
        when the worker said it let go of it (``may_run`` False): then it is freed
        without counting a thread."""
        ws.processing.discard(ts)
        if ws.long_running:
            ws.long_running.discard(ts)
        ts.processing_on = None
        if not may_run or ts.waiting_on or len(ws.running_cancelled) >= ws.nthreads:
            self._instructions.append(FreeKeys(ws.address, [ts.key], self._stimulus_id))
            return
        ws.ending[ts.key] = ws.ending.get(ts.key, 0) + 1
        ws.n_ending += 1
        self._instructions.append(FreeKeys(ws.address, [ts.key], self._stimulus_id, True))

    def _handle_cancelled_tasks_ended(self, ev: CancelledTasksEnded) -> None:
        ws = self.workers.get(ev.worker)
        if ws is None:
            return
        ending = ws.ending
        for key in ev.keys:
            n = ending.get(key)
            if n is None:
                continue
            if n == 1:
                del ending[key]
                ws.running_cancelled.discard(key)
            else:
                ending[key] = n - 1
            ws.n_ending -= 1
        self._wake_unrunnable(ws)
        self._refill(ws)

    def _handle_cancelled_tasks_running(self, ev: CancelledTasksRunning) -> None:
        """Tasks freed while they ran still run on ``ev.worker``'s threads. Once they take
        every thread there, the tasks still processing there cannot start before one of
        them ends, which may be never (a task that ignores cancellation): take those
        back and place them on free threads elsewhere."""
        ws = self.workers.get(ev.worker)
        if ws is None:
            return
        for key in ev.keys:
            if key in ws.ending:
                ws.running_cancelled.add(key)
        if len(ws.running_cancelled) < ws.nthreads:
            return
        for ts in sorted(ws.processing - ws.long_running):
            if ts.processing_on is ws:  # not taken back already, with an input
                self._reschedule(ts)

    def _handle_task_seceded(self, ev: TaskSeceded) -> None:
        """The task runs on, but its thread waits for other tasks (``secede``): it fills
        no thread any more, so another task may go there."""
        ts = self.tasks.get(ev.key)
        ws = self.workers.get(ev.worker)
        if ts is None or ws is None or ts.processing_on is not ws:
            return
        ws.long_running.add(ts)
        self._refill(ws)

    def _wake_unrunnable(self, ws: WorkerRecord) -> None:
        """``ws`` can take work again: tasks held back for it alone are placed anew."""
        if not self.unrunnable or ws.paused or ws.n_ending >= ws.nthreads:
            return
        for ts in list(self.unrunnable):
            if ts.worker_restrictions and ws.address in ts.worker_restrictions:
                self._leave_unrunnable(ts)
                self._set_state(ts, "waiting")
                self._ready.append(ts)

    def _handle_worker_pause_changed(self, ev: WorkerPauseChanged) -> None:
        """A paused worker keeps what it has (it spills, and runs it once it resumes)
        but gets nothing new; resumed, it takes queued work again."""
        ws = self.workers.get(ev.worker)
        if ws is None or ws.paused is ev.paused:
            return
        ws.paused = ev.paused
        if ev.paused:
            return
        self._wake_unrunnable(ws)  # restricted to paused workers, this one among them
        self._refill(ws)
        if ws.ahead_blocked:
            self._send_blocked_ahead(ws)

    def _update_saturation(self, ws: WorkerRecord) -> None:
        sat = self.worker_saturation
        if math.isinf(sat):
            ws.saturation_limit = 1 << 62
        else:
            ws.saturation_limit = max(1, math.ceil(ws.nthreads * sat))

    # -- results ----------------------------------------------------------------------

    def _handle_task_finished(self, ev: TaskFinished) -> None:
        ts = self.tasks.get(ev.key)
        ws = self.workers.get(ev.worker)
        if ws is None:
            return
        if ts is None or ts.processing_on is not ws:
            # a run taken back from ws (cancelled, placed elsewhere): a free is on its
            # way there, and ws drops the value when it arrives; counted as a copy, a
            # gather could ask ws for a value it no longer has
            if ts is None or ws not in ts.who_has:
                self._instructions.append(FreeKeys(ws.address, [ev.key], self._stimulus_id))
            return
        ws.processing.discard(ts)
        if ws.long_running:
            ws.long_running.discard(ts)
        ts.processing_on = None
        self.last_span = ts.group.span_id
        ts.nbytes = ev.nbytes
        ts.type_name = ev.type_name
        ts.group.nbytes_total += ev.nbytes
        ts.prefix.nbytes_total += ev.nbytes
        if ev.startstops:
            ts.group.add_startstops(ev.startstops)
            ts.prefix.add_startstops(ev.startstops)
        self._add_replica(ts, ws, ev.nbytes)
        self._set_state(ts, "memory", ev)
        ready = self._ready
        for dts in ts.dependents:
            state = dts.state
            if state == "waiting":
                dts.discard_waiting_on(ts)
                if not dts.waiting_on:
                    ready.append(dts)
            elif state == "processing":  # sent ahead (_send_ahead)
                dts.discard_waiting_on(ts)
        self._release_inputs(ts)
        if ts.who_wants:
            self._report(ts)
        elif not ts.waiters:
            self._release(ts)
        self._refill(ws)
        if ws.ahead_blocked:
            self._send_blocked_ahead(ws)

    def _add_replica(self, ts: TaskState, ws: WorkerRecord, nbytes: int) -> None:
        if ws not in ts.who_has:
            ts.add_who_has(ws)
            ws.has_what.add(ts)
            ws.nbytes += nbytes

    def _release_inputs(self, ts: TaskState) -> None:
        """``ts`` no longer waits on its dependencies: release those nobody needs."""
        for dts in ts.dependencies:
            dts.discard_waiter(ts)
            if not dts.waiters and not dts.who_wants and dts.state != "released":
                self._release(dts)

    def _handle_task_erred(self, ev: TaskErred) -> None:
        ts = self.tasks.get(ev.key)
        ws = self.workers.get(ev.worker)
        if ts is None or ws is None or ts.processing_on is not ws:
            return
        ws.processing.discard(ts)
        if ws.long_running:
            ws.long_running.discard(ts)
        ts.processing_on = None
        if ev.startstops:
            ts.group.add_startstops(ev.startstops)
            ts.prefix.add_startstops(ev.startstops)
        ts.exception_text = ev.exception_text
        if ts.annotations is not None and ts.annotations.get("retries"):
            self._retry(ts, ws, ev)
            return
        self._set_erred(ts, ev.exception, ev.traceback, ts, ev)
        # the error lives here now; the worker need not keep its record of the task
        self._instructions.append(FreeKeys(ws.address, [ts.key], self._stimulus_id))
        self._refill(ws)

    def _retry(self, ts: TaskState, ws: WorkerRecord, ev: TaskErred) -> None:
        """``ts`` failed but may run again (``dask.annotate(retries=n)``): it waits for a
        worker anew, and dependents sent ahead to wait for it there are taken back."""
        assert ts.annotations is not None
        ts.annotations["retries"] -= 1
        self._instructions.append(FreeKeys(ws.address, [ts.key], self._stimulus_id))
        for dts in ts.dependents:
            other = dts.processing_on
            if other is not None and ts in dts.waiting_on:
                self._stop_processing(dts, other)
                self._set_state(dts, "waiting")
                if other is not ws:
                    self._refill(other)
        self._set_state(ts, "waiting", ev)
        self._ready.append(ts)
        self._refill(ws)

    def _set_erred(
        self,
        root: TaskState,
        exception: BaseException | None,
        traceback: Any,
        blame: TaskState,
        ev: SchedulerEvent | None = None,
    ) -> None:
        """``root`` failed: it and every dependent still to run fail with the same error."""
        stack = [root]
        while stack:
            ts = stack.pop()
            if ts.state == "erred" or (ts.state == "memory" and ts is not root):
                continue
            if ts.state == "memory":  # its value exists but is unusable: drop every copy
                for holder in ts.who_has:
                    holder.has_what.discard(ts)
                    holder.nbytes -= ts.nbytes
                    self._instructions.append(FreeKeys(holder.address, [ts.key], self._stimulus_id))
                ts.who_has = EMPTY
            ws = ts.processing_on
            if ws is not None:  # a dependent running elsewhere: stop it
                self._stop_processing(ts, ws)
                self._refill(ws)
            elif ts.state == "queued" or ts.state == "no-worker":
                self._leave_unrunnable(ts)
            for dts in ts.waiting_on:
                dts.discard_waiter(ts)
            ts.waiting_on = EMPTY
            ts.exception = exception
            ts.traceback = traceback
            ts.exception_blame = blame
            self._set_state(ts, "erred", ev if ts is root else None)
            self._release_inputs(ts)
            if ts.who_wants:
                self._report(ts)
            stack.extend(ts.dependents)

    def _report(self, ts: TaskState, only: ClientRecord | None = None) -> None:
        clients = (only,) if only is not None else ts.who_wants
        state = ts.state
        for cs in clients:
            if state == "memory":
                self._instructions.append(
                    ReportKey(cs.id, ts.key, "finished", None, None, self._stimulus_id)
                )
            elif state == "erred":
                self._instructions.append(
                    ReportKey(cs.id, ts.key, "error", ts.exception, ts.traceback, self._stimulus_id)
                )

    def _handle_result_serialization_failed(self, ev: ResultSerializationFailed) -> None:
        ts = self.tasks.get(ev.key)
        if ts is None or ts.state != "memory":
            return
        ts.exception_text = ev.exception_text
        self._set_erred(ts, ev.exception, None, ts, ev)

    def _handle_replicas_added(self, ev: ReplicasAdded) -> None:
        ws = self.workers.get(ev.worker)
        if ws is None:
            return
        stale = []
        for key in ev.keys:
            ts = self.tasks.get(key)
            if ts is not None and ts.state == "memory":
                self._add_replica(ts, ws, ev.nbytes.get(key, ts.nbytes))
            else:
                stale.append(key)
        if stale:
            self._instructions.append(FreeKeys(ws.address, stale, self._stimulus_id))

    def _handle_dependency_fetch_failed(self, ev: DependencyFetchFailed) -> None:
        """A worker failed to fetch an input: forget that holder and run the task again."""
        ts = self.tasks.get(ev.key)
        dts = self.tasks.get(ev.dependency)
        ws = self.workers.get(ev.worker)
        if dts is not None:
            for holder in list(dts.who_has):
                if holder.address not in self.workers:
                    self._drop_replica(dts, holder)
        if ts is None or ws is None or ts.processing_on is not ws:
            return
        self._reschedule(ts, may_run=False)  # the worker let go of it

    def _reschedule(self, root: TaskState, may_run: bool = True) -> None:
        """Take a processing task back and schedule it again from scratch, with the
        dependents sent ahead to wait for it on the same worker (``_send_ahead``).
        ``may_run``: whether ``root`` may have started there (see _stop_processing)."""
        stack = [root]
        while stack:
            ts = stack.pop()
            ws = ts.processing_on
            if ws is not None:
                self._stop_processing(ts, ws, may_run or ts is not root)
            self._set_state(ts, "waiting")
            self._requeue_waiting(ts)
            for dts in ts.dependents:
                if dts.state == "processing" and ts in dts.waiting_on:
                    stack.append(dts)
            if ws is not None:
                self._refill(ws)

    # -- releasing and forgetting -----------------------------------------------------

    def _handle_client_released_keys(self, ev: ClientReleasedKeys) -> None:
        cs = self.clients.get(ev.client)
        if cs is None:
            return
        for key in ev.keys:
            ts = self.tasks.get(key)
            if ts is not None and cs in ts.who_wants:
                self._unwant(ts, cs)

    def _unwant(self, ts: TaskState, cs: ClientRecord) -> None:
        ts.discard_who_wants(cs)
        cs.wants_what.discard(ts)
        if ts.who_wants or ts.waiters:
            return
        if ts.state == "released" or ts.state == "erred":
            self._maybe_forget(ts)
        else:
            self._release(ts)

    def _release(self, root: TaskState) -> None:
        """Drop a task's data or stop it running; cascade to inputs nobody needs any more."""
        stack = [root]
        while stack:
            ts = stack.pop()
            state = ts.state
            if state == "released" or state == "forgotten":
                continue
            if state == "processing":
                ws = ts.processing_on
                assert ws is not None
                self._stop_processing(ts, ws)
                self._refill(ws)
            elif state == "memory":
                for ws in ts.who_has:
                    ws.has_what.discard(ts)
                    ws.nbytes -= ts.nbytes
                    self._instructions.append(FreeKeys(ws.address, [ts.key], self._stimulus_id))
                ts.who_has = EMPTY
            elif state == "queued" or state == "no-worker":
                self._leave_unrunnable(ts)
            elif state == "erred":
                ts.exception = ts.traceback = ts.exception_blame = None
            if state in PENDING_STATES:
                ts.waiting_on = EMPTY
                for dts in ts.dependencies:
                    dts.discard_waiter(ts)
                    if not dts.waiters and not dts.who_wants and dts.state != "released":
                        stack.append(dts)
            self._set_state(ts, "released")
            if not ts.dependents and not ts.who_wants:
                self._forget(ts)
            elif ts.waiters:
                # a dependent still needs it: compute it again
                self._compute(ts)

    def _maybe_forget(self, ts: TaskState) -> None:
        if ts.dependents or ts.who_wants:
            return
        if ts.state == "erred":
            ts.exception = ts.traceback = ts.exception_blame = None
            self._set_state(ts, "released")
        if ts.state == "released":
            self._forget(ts)

    def _forget_last_work(self) -> None:
        """Drop the counts of the finished groups kept for progress (see
        ``TaskPrefix.finished``)."""
        self._last_work_kept = False
        for prefix in self.task_prefixes.values():
            prefix.finished = {}

    def _forget(self, root: TaskState) -> None:
        stack = [root]
        while stack:
            ts = stack.pop()
            if ts.state == "forgotten":
                continue
            assert not ts.dependents and not ts.who_wants, ts
            self._set_state(ts, "forgotten")
            del self.tasks[ts.key]
            group = ts.group
            group.n_live -= 1
            if group.n_live == 0:
                self.task_groups.pop((group.name, group.span_id), None)
                group.prefix.groups.remove(group)
                finished = group.prefix.finished  # progress shows the last work
                for state, n in group.states.items():
                    if n:
                        finished[state] = finished.get(state, 0) + n
                self._last_work_kept = True
            for dts in ts.dependencies:
                dts.discard_dependent(ts)
                dts.discard_waiter(ts)
                if dts.dependents or dts.who_wants:
                    continue
                if dts.state == "released":
                    stack.append(dts)
                elif dts.state == "erred":
                    dts.exception = dts.traceback = dts.exception_blame = None
                    self._set_state(dts, "released")
                    stack.append(dts)
                elif dts.state == "memory" and not dts.waiters:
                    self._release(dts)
            ts.dependencies = EMPTY

    def _handle_client_cancelled_keys(self, ev: ClientCancelledKeys) -> None:
        cs = self.clients.get(ev.client)
        if cs is None:
            return
        for key in ev.keys:
            ts = self.tasks.get(key)
            if ts is None:
                continue
            if ts.who_wants - {cs}:
                # other clients still want it: cancel only this client's future
                self._instructions.append(
                    ReportKey(cs.id, ts.key, "cancelled", stimulus_id=self._stimulus_id)
                )
                self._unwant(ts, cs)
                continue
            # cancel the task and everything downstream that has not finished
            pending = []
            stack = [ts]
            seen = set()
            while stack:
                t = stack.pop()
                if t in seen or t.state in ("memory", "forgotten"):
                    continue
                seen.add(t)
                pending.append(t)
                stack.extend(t.dependents)
            if ts.state == "memory":
                pending.insert(0, ts)
            for t in pending:
                for c in list(t.who_wants):
                    self._instructions.append(
                        ReportKey(c.id, t.key, "cancelled", stimulus_id=self._stimulus_id)
                    )
                    c.wants_what.discard(t)
                t.who_wants = EMPTY
            for t in reversed(pending):
                if t.state in ("released", "forgotten"):
                    if t.state == "released":
                        self._maybe_forget(t)
                    continue
                if t.state == "erred":
                    self._maybe_forget(t)
                else:
                    self._release(t)

    # -- clients and workers ----------------------------------------------------------

    def _client(self, client_id: str) -> ClientRecord:
        cs = self.clients.get(client_id)
        if cs is None:
            cs = self.clients[client_id] = ClientRecord(client_id)
        return cs

    def _handle_client_added(self, ev: ClientAdded) -> None:
        self._client(ev.client)

    def _handle_client_removed(self, ev: ClientRemoved) -> None:
        cs = self.clients.pop(ev.client, None)
        if cs is None:
            return
        for ts in list(cs.wants_what):
            self._unwant(ts, cs)

    def _handle_worker_added(self, ev: WorkerAdded) -> None:
        if ev.address in self.workers:
            return
        ws = WorkerRecord(ev.address, ev.nthreads, ev.memory_limit, ev.name)
        self._update_saturation(ws)
        self.workers[ev.address] = ws
        self.total_nthreads += ws.nthreads
        self.spans.nthreads_changed(ev.time, self.total_nthreads)
        for ts in list(self.unrunnable):
            if ts.worker_restrictions and ev.address in ts.worker_restrictions:
                self._leave_unrunnable(ts)
                self._set_state(ts, "waiting")
                self._ready.append(ts)
        self._refill(ws)

    def _handle_worker_removed(self, ev: WorkerRemoved) -> None:
        ws = self.workers.pop(ev.address, None)
        if ws is None:
            return
        self.total_nthreads -= ws.nthreads
        self.spans.nthreads_changed(ev.time, self.total_nthreads)
        # Blame the tasks that were running at the death (the worker's slots say which);
        # those merely sent there run again without blame. Several running: any of
        # them, or all together (memory), may have done it. Each becomes a suspect
        # that runs alone from then on (core/blame.py); its next death is its own and
        # counts. Slots unknown: every task sent there counts the death, as ever.
        running = None if ev.running is None else running_tasks(ws.processing, ev.running)
        ambiguous = running is not None and len(running) > 1
        for ts in sorted(ws.processing):
            if ts.processing_on is not ws:
                continue  # erred meanwhile with an input that killed the worker
            ws.processing.discard(ts)
            ts.processing_on = None
            if not ev.expected and (running is None or ts in running):
                if not ambiguous or ts.alone:  # a suspect gets one death uncounted, no more
                    ts.suspicious += 1
                if running is not None:
                    ts.alone = True
            if ts.suspicious > self.allowed_failures:
                err = KilledWorker(ts.key, ws.address, self.allowed_failures, ev.cause)
                self._set_state(ts, "waiting")  # erred from a pending state
                self._set_erred(ts, err, None, ts)
            else:
                self._set_state(ts, "waiting")
                self._requeue_waiting(ts)
        for ts in list(ws.has_what):
            self._drop_replica(ts, ws)
        # tasks held back for workers that are all gone now cannot run
        for ts in sorted(self.unrunnable):
            restrictions = ts.worker_restrictions
            if (
                ts.state == "queued"
                and not ts.loose_restrictions
                and restrictions is not None
                and none_present(restrictions, self.workers)
            ):
                self._no_worker(ts)
        if not self.workers:
            return
        # tasks stuck behind restrictions to a dead worker may be allowed elsewhere
        for ts in list(self.unrunnable):
            if ts.loose_restrictions:
                self._leave_unrunnable(ts)
                self._set_state(ts, "waiting")
                self._ready.append(ts)

    def _requeue_waiting(self, ts: TaskState) -> None:
        ts.waiting_on = EMPTY
        for dts in ts.dependencies:
            dts.add_waiter(ts)
            if dts.state != "memory":
                ts.add_waiting_on(dts)
                if dts.state == "released":
                    self._compute(dts)
        if not ts.waiting_on:
            self._ready.append(ts)

    def _drop_replica(self, ts: TaskState, ws: WorkerRecord) -> None:
        """``ws`` lost its copy of ``ts``; with no copy left, recompute it if it is needed."""
        ts.discard_who_has(ws)
        ws.has_what.discard(ts)
        ws.nbytes -= ts.nbytes
        if ts.who_has or ts.state != "memory":
            return
        self._set_state(ts, "released")
        for cs in ts.who_wants:
            self._instructions.append(
                ReportKey(cs.id, ts.key, "lost", stimulus_id=self._stimulus_id)
            )
        # dependents already running elsewhere may not have their copy yet: run them again
        for dts in list(ts.dependents):
            if dts.state == "processing" and ts in dts.dependencies:
                self._reschedule(dts)
            elif dts.state == "waiting":
                dts.add_waiting_on(ts)
        if ts.who_wants or ts.waiters:
            self._compute(ts)
        elif not ts.dependents:
            self._forget(ts)

    # -- bookkeeping ------------------------------------------------------------------

    def _set_state(
        self, ts: TaskState, new: TaskStateName, ev: SchedulerEvent | None = None
    ) -> None:
        old = ts.state
        ts.state = new
        group = ts.group
        gs = group.states
        gs[old] -= 1
        gs[new] += 1
        self.changes.task_moved(group.span_id, group.prefix.name)
        if old in PENDING_STATES:
            self.n_pending -= 1
        if new in PENDING_STATES:
            self.n_pending += 1
        if self.log_transitions:
            self.transition_log.append((ts.key, old, new, self._stimulus_id))
        hook = self.on_transition
        if hook is not None:
            only = self.transition_filter
            if only is None or (old, new) in only:
                hook(ts, old, new, ev)

    def story(self, *keys: Key) -> list[tuple[Any, ...]]:
        """Every logged transition of these keys, oldest first."""
        wanted = set(keys)
        return [entry for entry in self.transition_log if entry[0] in wanted]

    def validate_state(self) -> None:
        """Check every invariant; tests call this after each scenario."""
        for key, ts in self.tasks.items():
            assert ts.key == key
            assert ts.state != "forgotten", ts
            if ts.state == "memory":
                assert ts.who_has, ts
                assert ts.processing_on is None, ts
            else:
                assert not ts.who_has, (ts, ts.who_has)
            if ts.state == "processing":
                ws = ts.processing_on
                assert ws is not None and ts in ws.processing, ts
                # inputs in memory, or (sent ahead) processing on the same worker
                for dts in ts.dependencies:
                    assert dts.state == "memory" or dts.processing_on is ws, (ts, dts)
            else:
                assert ts.processing_on is None, ts
            if ts.state in ("waiting", "processing"):
                assert ts.waiting_on == {d for d in ts.dependencies if d.state != "memory"}, ts
            for dts in ts.dependencies:
                assert ts in dts.dependents, (ts, dts)
                assert dts.key in self.tasks, (ts, dts)
            for dts in ts.waiters:
                assert dts.state in PENDING_STATES, (ts, dts)
                assert ts in dts.dependencies, (ts, dts)
            if ts.state in PENDING_STATES:
                for dts in ts.dependencies:
                    assert ts in dts.waiters, (ts, dts)
            for cs in ts.who_wants:
                assert ts in cs.wants_what
            if ts.state == "released":
                assert ts.dependents or ts.who_wants, f"{ts} should have been forgotten"
            if not ts.who_wants and not ts.waiters:
                assert ts.state not in PENDING_STATES, f"{ts} runs but nobody needs it"
                assert ts.state != "memory", f"{ts} holds data nobody needs"
        for ws in self.workers.values():
            for ts in ws.processing:
                assert ts.processing_on is ws, ts
            assert ws.n_ending == sum(ws.ending.values()), ws
            assert ws.running_cancelled <= ws.ending.keys(), ws
            assert ws.long_running <= ws.processing, ws
            for ts in ws.has_what:
                assert ws in ts.who_has, ts
        for ts in self.unrunnable:
            assert ts.state in ("queued", "no-worker"), ts
        for ts in self.no_worker:
            assert ts.state == "no-worker" and ts in self.unrunnable, ts
        for cs in self.clients.values():
            for ts in cs.wants_what:
                assert cs in ts.who_wants
        assert self.n_pending == sum(ts.state in PENDING_STATES for ts in self.tasks.values())
        counts: dict[Any, Any] = {}
        for ts in self.tasks.values():
            counts[(ts.group.name, ts.group.span_id, ts.state)] = (
                counts.get((ts.group.name, ts.group.span_id, ts.state), 0) + 1
            )
        for (gname, span_id), group in self.task_groups.items():
            for state, n in group.states.items():
                if state not in ("forgotten",):
                    assert counts.get((gname, span_id, state), 0) == n, (group, state, n)

    # the one place an event type meets its handler
    _handlers: dict[type[SchedulerEvent], Callable[[SchedulerState, Any], None]] = {
        GraphSubmitted: _handle_graph_submitted,
        TaskFinished: _handle_task_finished,
        TaskErred: _handle_task_erred,
        DependencyFetchFailed: _handle_dependency_fetch_failed,
        ResultSerializationFailed: _handle_result_serialization_failed,
        ReplicasAdded: _handle_replicas_added,
        ClientReleasedKeys: _handle_client_released_keys,
        ClientCancelledKeys: _handle_client_cancelled_keys,
        ClientAdded: _handle_client_added,
        ClientRemoved: _handle_client_removed,
        WorkerAdded: _handle_worker_added,
        WorkerRemoved: _handle_worker_removed,
        WorkerPauseChanged: _handle_worker_pause_changed,
        CancelledTasksEnded: _handle_cancelled_tasks_ended,
        CancelledTasksRunning: _handle_cancelled_tasks_running,
        TaskSeceded: _handle_task_seceded,
        NoWorkerTimedOut: _handle_no_worker_timed_out,
    }
