"""The worker shell: turns WorkerState instructions into thread-pool work and fetches.

It carries out every instruction of the state machine (raising on one it does not
know, after the others), and speaks to the scheduler only through a channel of
messages (engine/wire.py), so the same class serves embedded workers (a LocalChannel
on the kernel's engine loop, which passes the objects) and subprocess workers (a TCP
stream, which encodes them).

The worker holds the task shell (state machine in, task threads and messages out) and
owns two parts made for it in ``__init__`` with exactly what each needs: ``memory``, a
MemoryMonitor (memory_monitor.py: spill, pause, stuck), and ``transfers``, its
PeerTransfers (transfers.py: fetches from peers, replies to them, transfer logs). Both
reach back only through the callables they are given (``handle``, ``now``, sending to
the scheduler); neither is on a task's path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

import psutil

from ..core.annotations import current_span
from ..core.keys import Key
from ..core.metrics import MeterFrame, MetricsLedger
from ..core.scheduler_messages import FreeKeys, SetClusterBusy, ToWorker
from ..core.thread_accounts import ThreadTimeline
from ..core.worker_messages import (
    Execute,
    ExecuteAfter,
    ExecuteSkipped,
    ExecuteSucceeded,
    GatherDep,
    SendCancelledTasksEnded,
    SendTaskErred,
    SendTaskFinished,
    ToScheduler,
    WorkerEvent,
    WorkerInstruction,
)
from ..core.worker_state import WorkerState, WorkerTask
from . import code_sources
from .config import WorkerConfig
from .execute import TaskRunner, pack_exception, run_task_unmetered
from .handoff import PoolClaims, inputs_and, inputs_for
from .memory_monitor import MemoryMonitor
from .pool import TaskThreadPool
from .process_meter import context_meter
from .pulse import Pulse
from .secede import WorkerThreads, forget_worker
from .slots import RunningSlots
from .spill import SpillBuffer
from .stack_sampler import StackSampler
from .transfers import PeerData, PeerTransfers
from .wire import (
    CodeSources,
    Heartbeat,
    HeartbeatNow,
    HeartbeatReply,
)

logger = logging.getLogger(__name__)


class Channel(Protocol):
    def send(self, msgs: list) -> None: ...


class Worker:
    """The I/O shell around a WorkerState: the scheduler's messages in, tasks run on its
    thread pool, heartbeats out. Its memory monitor (``memory``, memory_monitor.py) and
    its peer transfers (``transfers``, transfers.py) are parts it owns."""

    def __init__(
        self,
        *,
        address: str,
        loop: asyncio.AbstractEventLoop,
        peers: PeerData,
        config: WorkerConfig | None = None,
        data: MutableMapping | None = None,
        clock: Callable[[], float] = time.time,
        in_process: bool = True,
    ):
        """A worker with the settings of ``config`` (checked when it was made).

        ``data``, ``clock`` and ``in_process`` are how it is embedded, not settings:
        a store of its own, a clock to read, and whether it shares the scheduler's
        process (its clock and objects).
        """
        if config is None:
            config = WorkerConfig()
        self.config = config
        nthreads = config.nthreads
        self.address = address
        self.name = config.name or address
        self.nthreads = nthreads
        self.memory_limit = config.memory_limit
        self.loop = loop
        self.peers = peers
        self.clock = clock
        # Embedded workers share the scheduler's clock and its objects; a worker in
        # another process corrects its times by the offset its heartbeats measure and
        # sends exceptions as bytes (the kernel may not be able to unpickle them).
        self.in_process = in_process
        self.clock_offset = 0.0
        self._offset_samples: deque[tuple[float, float]] = deque(maxlen=10)
        self._process = psutil.Process()
        # values past target go to disk as they are stored (the monitor spills more)
        if data is None and config.memory_limit and config.local_directory:
            data = SpillBuffer(
                os.path.join(config.local_directory, "spill"),
                int(config.memory_limit * config.memory_target_fraction),
            )
        self.state = WorkerState(address=address, nthreads=nthreads, data=data)
        self.data = self.state.data
        self.scheduler: Channel | None = None
        self.timeline = ThreadTimeline()  # each task thread's account (core/thread_accounts.py)
        # which task each task thread runs (ident -> (key, prefix)): the profiler samples
        # these threads; its thread starts with the periodic tasks, and stops on close
        self.executing_by_thread: dict[int, tuple[Key, str]] = {}
        self.threads = WorkerThreads(
            self.timeline, self.executing_by_thread, loop, self.handle, self._is_closed
        )
        self.pool = TaskThreadPool(
            nthreads, self.name, self._wake_from_thread, on_thread=self.threads.on_thread
        )
        self.threads.pool = self.pool
        # a worker process's record of what each task thread runs, read by its nanny
        # after a death to blame the right tasks (engine/slots.py); None when embedded
        self.slots: RunningSlots | None = None
        # a worker process's proof of life while its loop is busy (engine/pulse.py)
        self.pulse: Pulse | None = None
        # key -> the task the thread running it may run next (ExecuteAfter). The thread
        # takes an offer by popping it when the key ends; an offer it missed (made just
        # after) is dropped when the loop handles the key's outcome, and the task is
        # then made ready the usual way. Empty unless chains are running.
        self._follow: dict[Key, Any] = {}
        # tasks handed to the pool and not started yet, which a free may withdraw
        self.claims = PoolClaims()
        # fine performance metrics: see core/metrics.py for what each part does
        self.metrics = MetricsLedger()
        self._runners: dict[int, TaskRunner] = {}  # by thread, made on their first task
        self._idle = 0.0
        self._disk_writes: dict[Key, float] = {}  # seconds spent spilling to store a result
        self.timeline.add_threads(self.pool.idents, time.perf_counter())
        self.memory = MemoryMonitor(
            config,
            address=address,
            in_process=in_process,
            state=self.state,
            data=self.data,
            pool=self.pool,
            metrics=self.metrics,
            process=self._process,
            handle=self.handle,
            send_to_scheduler=self._send_to_scheduler,
            closed=self._is_closed,
        )
        self.transfers = PeerTransfers(
            address=address,
            state=self.state,
            data=self.data,
            peers=peers,
            metrics=self.metrics,
            log_length=config.transfer_log_length,
            now=self.now,
            handle=self.handle,
            run_function=self.run_function,
            send_to_scheduler=self._send_to_scheduler,
        )
        self._use_fine_metrics(config.fine_metrics)
        self.profiler: StackSampler | None = None
        self._profile_cycle_interval = config.profile_cycle_interval
        if config.profile:
            self.profiler = self._new_profiler(config.profile_interval)
        # every asyncio task this worker starts (heartbeats, memory monitor, fetches):
        # cancelled and awaited when it closes (``stop_tasks``)
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._started = False

    def set_fine_metrics(self, on: bool) -> None:
        """Collect fine performance metrics or not (call on the loop thread).

        What was collected stays; switching on starts the threads' time accounts
        afresh, so the time spent with metrics off is nobody's. The overhead benchmark
        compares the same workers both ways.
        """
        if on:  # before the first metered task can start
            self.timeline.restart(time.perf_counter(), self.pool.running)
            for runner in list(self._runners.values()):
                runner.reread_cpu_clock()
        self._use_fine_metrics(on)

    def _use_fine_metrics(self, on: bool) -> None:
        self.fine_metrics = on
        self.transfers.fine_metrics = on
        if isinstance(self.data, SpillBuffer):
            # storing a result may spill: charge that to the task whose result it was
            scope = context_meter.scope(self._charge_storing, MeterFrame()) if on else None
            self.data.store_scope = scope

    def _new_profiler(self, interval: float) -> StackSampler:
        return StackSampler(
            self.executing_by_thread,
            self.now,
            interval=interval,
            cycle_interval=self._profile_cycle_interval,
            name=self.name,
        )

    def set_profiling(self, interval: float | None) -> None:
        """Switch the statistical profiler off (None) or on at ``interval`` seconds.

        Switching on starts a new profile (the samples taken so far are dropped), so
        a cluster's profiling cost can be compared on and off on the very same workers.
        """
        new = None if interval is None else self._new_profiler(interval)  # checks it
        old, self.profiler = self.profiler, new
        if old is not None:
            old.stop()
        if new is not None and self._started and not self._closed:
            new.start()

    def connect(self, scheduler: Channel) -> None:
        self.scheduler = scheduler

    def _send_to_scheduler(self, msgs: list) -> None:
        """Send ``msgs`` if connected (the parts' way to the scheduler)."""
        if self.scheduler is not None:
            self.scheduler.send(msgs)

    def _is_closed(self) -> bool:
        return self._closed

    # -- what the parts hold, where the rest of the engine and users look -------------

    @property
    def transfer_incoming_log(self) -> deque[dict]:
        """The latest fetches from peers (``transfers.incoming_log``): read by the
        performance report (diagnostics) and by ``client.run`` functions."""
        return self.transfers.incoming_log

    @property
    def transfer_outgoing_log(self) -> deque[dict]:
        """The latest data sent to peers and the kernel (``transfers.outgoing_log``)."""
        return self.transfers.outgoing_log

    @property
    def memory_stuck_seconds(self) -> float:
        """How long the worker may stay paused with nothing to free before it gives up
        (``memory.stuck_seconds``, from the config); set it to change it on a live worker."""
        return self.memory.stuck_seconds

    @memory_stuck_seconds.setter
    def memory_stuck_seconds(self, seconds: float) -> None:
        self.memory.stuck_seconds = seconds

    # -- inbound ----------------------------------------------------------------------

    def handle_scheduler_messages(self, msgs: list) -> None:
        """Messages from the scheduler (wire.py's classes, decoded already when they
        came over TCP): its instructions go to the state machine as they are."""
        events: list[WorkerEvent | ToWorker] = []
        for msg in msgs:
            t = type(msg)
            if t is FreeKeys and msg.running:
                # those not started end now (before the free), so the scheduler hears
                # at once that they take no thread
                events.extend(self.claims.withdraw(msg.keys, self._follow))
                events.append(msg)
            elif isinstance(msg, ToWorker):  # ComputeTask(Alone), FreeKeys
                events.append(msg)
            elif t is HeartbeatReply:
                self._learn_clock_offset(msg)
            elif t is HeartbeatNow:
                self.heartbeat()
            elif t is CodeSources:
                if not self.in_process:  # the kernel's line cache is this process's
                    code_sources.install(msg.sources)
            elif t is SetClusterBusy:
                # followed with metrics off too, so they start right when switched on
                idle = self.timeline.set_busy(msg.busy, time.perf_counter(), self.pool.running)
                if self.fine_metrics:
                    self._idle += idle
            else:
                logger.warning("Worker %s ignored an unknown message %r", self.address, msg)
        self.handle(*events)

    def now(self) -> float:
        """The scheduler's clock, as well as this worker can tell."""
        return self.clock() + self.clock_offset

    def _learn_clock_offset(self, msg: HeartbeatReply) -> None:
        if self.in_process:
            return  # same clock
        received = self.clock()
        rtt = received - msg.sent
        self._offset_samples.append((rtt, msg.time - (msg.sent + received) / 2))
        # the fastest round trip brackets the scheduler's reading most tightly
        self.clock_offset = min(self._offset_samples)[1]

    def heartbeat(self) -> None:
        if self.scheduler is None or self._closed:
            return
        self.scheduler.send(
            [
                Heartbeat(
                    sent=self.clock(),
                    memory=self._process.memory_info().rss,
                    managed=self.memory.managed_bytes(),
                    spilled=getattr(self.data, "spilled", 0),
                    executing=len(self.state.executing),
                    ready=len(self.state.ready),
                    metrics=self.metrics_delta(),
                )
            ]
        )

    async def heartbeat_loop(self, interval: float) -> None:
        while not self._closed:
            self.heartbeat()
            if self.pulse is not None:
                self.pulse.loop_turned()
            await asyncio.sleep(interval)

    def start_periodic(self) -> None:
        """Start the heartbeats, the memory monitor and the profiler (on the loop)."""
        self._spawn(self.heartbeat_loop(self.config.heartbeat_interval))
        self._spawn(self.memory.run())
        self._started = True
        if self.profiler is not None:
            self.profiler.start()

    def _spawn(self, coro: Any) -> asyncio.Task:
        """Run ``coro`` as a task of this worker: ``stop_tasks`` ends it."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _wake_from_thread(self) -> None:
        if not self._closed:
            self.loop.call_soon_threadsafe(self._on_tasks_done)

    def _on_tasks_done(self) -> None:
        if self._closed:
            return
        events = self.pool.drain()
        self.claims.settle([ev.key for ev in events])
        follow = self._follow
        if follow:  # offers their thread did not take
            for ev in events:
                follow.pop(ev.key, None)
        self.handle(*events)

    # -- fine performance metrics -----------------------------------------------------

    def _charge_storing(self, label: Any, value: float, unit: str) -> None:
        key: Any = getattr(self.data, "storing", None)  # the key being stored, or None
        ts = self.state.tasks.get(key) if key is not None else None
        if ts is not None:
            self.metrics.add(("execute", ts.span_id, ts.prefix, label, unit), value)
            if label == "disk-write" and unit == "seconds":  # for the task stream
                self._disk_writes[key] = self._disk_writes.get(key, 0.0) + value
        else:
            self.metrics.add(("memory-monitor", label, unit), value)

    def metrics_delta(self) -> dict:
        """Metrics since the last call: what the next heartbeat carries."""
        add = self.metrics.add
        self.timeline.take(add)  # what the task threads added since the last heartbeat
        if self._idle:
            add(("execute", None, None, "idle", "seconds"), self._idle)
            self._idle = 0.0
        return self.metrics.take_delta()

    @property
    def digests_total(self) -> dict:
        """Every metric this worker has recorded (what has gone out in heartbeats)."""
        return self.metrics.total

    # -- the door into the state machine ----------------------------------------------

    def handle(self, *events: WorkerEvent | ToWorker) -> None:
        if self._closed or not events:
            return
        instructions = self.state.handle_stimulus(*events)
        if not instructions:
            return
        msgs: list[ToScheduler] = []  # the ToScheduler instructions are the messages
        ended: SendCancelledTasksEnded | None = None
        unknown: list[WorkerInstruction] = []
        # when this batch's tasks are handed to the pool: the time until a thread
        # starts one is executor (one clock reading for the batch)
        submitted = time.perf_counter() if self.fine_metrics else 0.0
        for inst in instructions:
            if isinstance(inst, Execute):
                self._execute(inst.key, submitted)
            elif isinstance(inst, SendTaskFinished):
                if self._disk_writes and inst.key in self._disk_writes:
                    t1 = self.now()
                    seconds = self._disk_writes.pop(inst.key)
                    inst.startstops = [*inst.startstops, ("disk-write", t1 - seconds, t1)]
                if self.clock_offset:
                    inst.startstops = self._scheduler_times(inst.startstops)
                msgs.append(inst)
            elif isinstance(inst, SendTaskErred):
                exc = inst.exception
                # the kernel may not be able to unpickle them: sent as bytes
                if not self.in_process and isinstance(exc, BaseException):
                    inst.exception, inst.traceback = pack_exception(exc, inst.traceback)
                inst.startstops = self._scheduler_times(inst.startstops)
                msgs.append(inst)
            elif isinstance(inst, ExecuteAfter):
                self._offer_after(inst)
            elif isinstance(inst, GatherDep):
                self._spawn(self.transfers.gather_dep(inst))
            elif isinstance(inst, SendCancelledTasksEnded):
                if ended is None:  # one message for the batch (a cancel frees one key a go)
                    ended = SendCancelledTasksEnded([], inst.stimulus_id)
                    msgs.append(ended)
                ended.keys.extend(inst.keys)
            elif isinstance(inst, ToScheduler):  # SendReplicasAdded, SendDependencyUnavailable
                msgs.append(inst)
            else:
                unknown.append(inst)
        if msgs and self.scheduler is not None:
            self.scheduler.send(msgs)
        if unknown:
            raise TypeError(
                f"Worker {self.address} does not know the instruction {unknown[0]!r} "
                f"({len(unknown)} unknown in all): carry it out in Worker.handle."
            )

    def _scheduler_times(self, startstops: list[tuple]) -> list[tuple]:
        off = self.clock_offset
        if not off:
            return startstops
        return [
            (action, start + off, stop + off, *rest) for action, start, stop, *rest in startstops
        ]

    def _execute(self, key: Key, submitted: float) -> None:
        ts = self.state.tasks[key]
        inputs = inputs_for(self.data, ts.dependencies)
        claim = self.claims.hand(key)
        self.pool.submit(self._run, key, ts.spec, inputs, ts.annotation, submitted, claim)

    def _offer_after(self, inst: ExecuteAfter) -> None:
        """Offer ``inst.key`` to the thread running ``inst.after`` (see ``_run``). One
        offer per key: a second one is dropped, and that task is made ready the usual
        way when ``after``'s result is handled."""
        ts = self.state.tasks.get(inst.key)
        if ts is None or ts.state != "waiting":  # freed later in the same batch
            return
        others = [d.key for d in ts.dependencies if d.key != inst.after]
        self._follow.setdefault(inst.after, (inst.key, ts.spec, others, ts.annotation))

    def _run(
        self,
        key: Key,
        spec: Any,
        inputs: Any,
        annotation: dict | None,
        submitted: float,
        claim: int,
    ) -> Any:
        """On a task thread: run the task, then, while one was offered (``_offer_after``),
        the task waiting on nothing but its result, without waiting for the loop.
        Nothing (None) for a task withdrawn before it started (handoff.py)."""
        if not self.claims.start(claim):
            return None
        ev = self._run_one(key, spec, inputs, annotation, submitted)
        follow = self._follow
        while follow and type(ev) is ExecuteSucceeded:
            offer = follow.pop(key, None)
            if offer is None:
                break
            next_key, spec, others, annotation = offer
            inputs = inputs_and(self.data, others, key, ev.value)
            if inputs is None:  # released meanwhile: the loop will sort it out
                break
            ev.then = next_key
            self.pool.emit(ev)
            key = next_key
            # handed over the moment its input ended (0): until it starts is executor
            ev = self._run_one(key, spec, inputs, annotation, 0.0)
        return ev

    def _run_one(
        self, key: Key, spec: Any, inputs: Any, annotation: dict | None, submitted: float
    ) -> Any:
        """Skip a task cancelled while it waited in the pool's queue."""
        ts = self.state.tasks.get(key)
        if ts is None or ts.cancelled or self.state.paused:
            return ExecuteSkipped(key)
        ident = threading.get_ident()
        executing = self.executing_by_thread
        was_idle = not executing
        executing[ident] = (key, ts.prefix)
        slots = self.slots
        if slots is not None:
            slots.enter(ident, key)
        profiler = self.profiler
        if was_idle and profiler is not None and profiler.resting:
            profiler.wake()  # it rests while no task runs
        try:
            if annotation is None:
                return self._run_task(ident, ts, spec, inputs, submitted)
            # inside the task, get_annotations() and new submissions see its span
            token = current_span.set((tuple(annotation["name"]), tuple(annotation["ids"])))
            try:
                return self._run_task(ident, ts, spec, inputs, submitted)
            finally:
                current_span.reset(token)
        finally:
            del executing[ident]
            if slots is not None:
                slots.leave(ident)

    def _run_task(
        self, ident: int, ts: WorkerTask, spec: Any, inputs: Any, submitted: float
    ) -> Any:
        if not self.fine_metrics:
            return run_task_unmetered(ts.key, spec, inputs)
        runner = self._runners.get(ident)
        if runner is None:  # the thread's first metered task: listen to its meters
            runner = self._runners[ident] = TaskRunner(self.timeline.accounts[ident])
        return runner.run(ts.key, spec, inputs, submitted, (ts.span_id, ts.prefix))

    async def run_function(self, fn: Callable[..., Any]) -> Any:
        """``client.run``: call ``fn(dask_worker=self)`` (or ``fn()``) on this worker's loop."""
        import inspect

        try:
            params: Any = inspect.signature(fn).parameters  # or {}: names are looked up
        except (TypeError, ValueError):
            params = {}
        result = fn(dask_worker=self) if "dask_worker" in params else fn()
        if inspect.isawaitable(result):
            result = await result
        return result

    def stop_accepting(self) -> None:
        """No more messages or results are handled; running tasks finish on their own."""
        self._closed = True

    async def stop_tasks(self) -> None:
        """The loop side of closing: stop accepting, then cancel every task this worker
        started and wait for them to end, so that none is left pending on the loop."""
        self._closed = True
        me = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not me]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self, timeout: float = 10.0) -> None:
        """Stop everything this worker started: its tasks on the loop (``stop_tasks``,
        awaited here when called from another thread than the loop's), its profiler,
        its task threads (joined) and its spill files."""
        self._closed = True
        if self._tasks:
            self._stop_tasks_from_outside(timeout)
        if self.profiler is not None:
            self.profiler.stop()
        self.pool.stop()
        forget_worker(self.threads)
        if isinstance(self.data, SpillBuffer):
            self.data.close()

    def _stop_tasks_from_outside(self, timeout: float) -> None:
        loop = self.loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop.is_running() and not on_loop:
            future = asyncio.run_coroutine_threadsafe(self.stop_tasks(), loop)
            try:
                future.result(timeout)
            except TimeoutError:
                logger.warning("Worker %s: its tasks did not end within %s s", self.name, timeout)
            return
        # on the loop (await ``stop_tasks`` first to see them end), or a loop not
        # running: they end when it next runs
        for task in list(self._tasks):
            task.cancel()
