"""The scheduler shell: feeds SchedulerState and routes its instructions.

Workers talk to it through channels of messages (engine/wire.py, which also says
which event each of their messages becomes); clients live in the same process and
hand it core events directly, getting ``ReportKey`` batches back. An instruction
the shell does not know how to carry out raises (after the others are carried out).
Everything here runs on the engine's loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ..core.keys import Key
from ..core.metrics import add_metrics
from ..core.recent_minimum import RecentMinimum
from ..core.scheduler_messages import (
    ClientAdded,
    ClientCancelledKeys,
    ClientRemoved,
    GraphSubmitted,
    ReportKey,
    ReportNoWorker,
    ResultSerializationFailed,
    SchedulerEvent,
    SchedulerInstruction,
    SetClusterBusy,
    TaskErred,
    TaskFinished,
    ToWorker,
    WorkerAdded,
    WorkerRemoved,
)
from ..core.scheduler_state import SchedulerState
from ..core.scheduler_tasks import PENDING_STATES
from ..core.spans import SpanTree
from .code_sources import MAX_FILES
from .no_worker import NoWorkerTimers
from .plugins import PluginSet, SchedulerPlugin, startstop_dicts
from .run_function import run_on
from .task_stream_plugin import TaskStreamPlugin
from .tcp_workers import UnserializableResults
from .unspillable import UnspillableLedger
from .wire import (
    SCHEDULER_EVENTS,
    CodeSources,
    Heartbeat,
    HeartbeatNow,
    HeartbeatReply,
    MemoryStuck,
    UnspillableHeld,
)

logger = logging.getLogger(__name__)
_LOAD = ("executing", "ready", "managed", "spilled")  # heartbeat: the worker table

ReportHandler = Callable[[list[ReportKey], int], None]


class Channel(Protocol):
    def send(self, msgs: list) -> None: ...


class DataSource(Protocol):
    """Reads values held by workers (directly in embedded mode, over TCP otherwise)."""

    async def get_data(self, peer: str, keys: list[Key]) -> tuple[dict, dict]: ...

    async def run(self, peer: str, fn: Any) -> Any:
        """``fn()`` on the worker at ``peer`` (``client.run``)."""
        ...


class Scheduler:
    def __init__(
        self,
        *,
        data_source: DataSource,
        worker_saturation: float = 1.5,
        queue_seconds: float = 0.05,
        allowed_failures: int = 3,
        task_stream_length: int = 100_000,
        no_workers_timeout: float | None = 30.0,
        clock: Callable[[], float] = time.time,
    ):
        """``no_workers_timeout``: seconds a task restricted to workers that are not
        there waits for one of them to join before it fails (None: for ever)."""
        # default span ids unique to this scheduler: runs stored side by side never mix
        self.spans = SpanTree(now=clock, token=uuid.uuid4().hex[:12])
        self.extensions = {"spans": self.spans}  # where the seed finds them
        self.state = SchedulerState(
            worker_saturation=worker_saturation,
            queue_seconds=queue_seconds,
            allowed_failures=allowed_failures,
            spans=self.spans,
        )
        self.data_source = data_source
        self.plugins = PluginSet()
        self.task_stream = TaskStreamPlugin(maxlen=task_stream_length)
        self.register_plugin(self.task_stream)
        self.clock = clock
        self.worker_channels: dict[str, Channel] = {}
        self.on_unreachable: Callable[[str], None] | None = None
        self.running_source: Callable[[str], list[bytes] | None] | None = None
        # what heartbeats tell: memory, tasks running, last contact, process id
        self.worker_info: dict[str, dict[str, Any]] = {}
        self.client_handlers: dict[str, ReportHandler] = {}
        self.client_seq: dict[str, int] = {}  # last client event sequence number handled
        self._stimulus_counter = 0
        self._key_waiters: dict[Key, list[asyncio.Future]] = {}
        # fine performance metrics from heartbeats, summed exactly once per delta:
        # as workers send them, (context, span_id, prefix, activity, unit) for execute,
        # and without the span, as Dask's Scheduler.cumulative_worker_metrics has them
        self.worker_metrics: dict[tuple, float] = {}
        self.spans.keyed_metrics = self.worker_metrics  # re-keyed as default spans fold
        self._heartbeat_waiters: dict[str, list[asyncio.Future]] = {}
        self.no_worker = NoWorkerTimers(no_workers_timeout, self.handle, self._stimulus, clock)
        self.cumulative_worker_metrics: dict[tuple, float] = {}
        # values workers could not spill, and the restarts they cause (unspillable.py)
        self.unspillable = UnspillableLedger()
        # unmanaged memory over the last 30 s (Dask's distributed.memory.recent-to-old-time)
        self.unmanaged_window = RecentMinimum(30.0)
        # lines of notebook cells that tasks' code comes from (code_sources.py), for
        # worker processes, which cannot read them: the latest MAX_FILES files
        self.code_sources: dict[str, tuple[str, ...]] = {}

    # -- plugins -----------------------------------------------------------------------

    def register_plugin(self, plugin: SchedulerPlugin, name: str | None = None) -> str:
        name = self.plugins.add(plugin, name)
        self.plugins.call([plugin], "start", self)
        self._hook_transitions()
        return name

    def unregister_plugin(self, name: str) -> None:
        if self.plugins.remove(name) is None:
            raise KeyError(f"No scheduler plugin is registered as {name!r}.")
        self._hook_transitions()

    def _hook_transitions(self) -> None:
        wanted = self.plugins.wants_transitions()
        self.state.on_transition = self._on_transition if wanted else None
        self.state.transition_filter = self.plugins.transition_filter() if wanted else None

    def _on_transition(self, ts: Any, start: str, finish: str, ev: Any) -> None:
        callers = self.plugins.transition_callers(start, finish)
        if not callers:
            return
        t = type(ev)
        if t is TaskFinished or t is TaskErred:  # the task ran: where, when, what it made
            kw = {
                "prefix": ts.prefix.name,
                "span_id": ts.group.span_id,
                "worker": ev.worker,
                "startstops": ev.startstops,
                "thread": ev.thread,
                "nbytes": ev.nbytes if t is TaskFinished else 0,
                "stimulus_id": ev.stimulus_id,
                "dependencies": tuple([d.key for d in ts.dependencies]),
                "sent": ts.sent,
            }
        else:
            kw = {"prefix": ts.prefix.name, "span_id": ts.group.span_id}
            if ev is not None:
                kw["stimulus_id"] = ev.stimulus_id
        key = ts.key
        dicts: dict[str, Any] | None = None  # kw with Dask's startstops, made once
        for plugin, transition, raw in callers:
            try:
                if raw or "startstops" not in kw:
                    transition(key, start, finish, **kw)
                else:
                    if dicts is None:
                        dicts = {**kw, "startstops": startstop_dicts(kw["startstops"])}
                    transition(key, start, finish, **dicts)
            except Exception:
                self.plugins.failed(plugin, "transition")

    def close(self) -> None:
        self.no_worker.cancel()
        self.plugins.call_all("close")

    # -- membership -------------------------------------------------------------------

    def add_worker(
        self,
        address: str,
        channel: Channel,
        *,
        nthreads: int,
        memory_limit: int,
        name: str,
        pid: int | None = None,
    ) -> None:
        self.worker_channels[address] = channel
        if self.code_sources:  # before any task, which may come with WorkerAdded
            channel.send([CodeSources(dict(self.code_sources))])
        self.worker_info[address] = {
            "name": name,
            "pid": pid,
            "last_seen": self.clock(),
            "memory": 0,
            "executing": 0,
        }
        self.handle(
            WorkerAdded(
                address, nthreads, memory_limit, name, self._stimulus("add-worker"), self.clock()
            )
        )
        if self.state.busy:  # it joins mid-computation: its free threads are idle
            channel.send([SetClusterBusy(True, "add-worker", self.state.holds_queued)])
        self.plugins.call_all("add_worker", self, address)

    def remove_worker(
        self,
        address: str,
        reason: str = "",
        expected: bool = False,
        running: list[bytes] | None = None,
        cause: str = "",
    ) -> None:
        """``expected``: the worker was stopped on purpose, so its tasks are not suspects.
        Otherwise only the tasks ``running`` there (key texts, see core/blame.py) are;
        None: unknown, every task sent there is. ``running_source`` (the nanny's
        reading of a worker process's slots) is asked when ``running`` is not given.
        ``cause``: why it went, for the user (a task failing for this death says so)."""
        if self.worker_channels.pop(address, None) is None:
            return
        if not expected and running is None and self.running_source is not None:
            running = self.running_source(address)
        self.worker_info.pop(address, None)
        logger.info("Removing worker %s: %s", address, reason)
        self.handle(
            *self.unspillable.died(address, expected, self.state, self.clock()),
            WorkerRemoved(
                address,
                reason,
                expected,
                self._stimulus("remove-worker"),
                self.clock(),
                None if running is None else tuple(running),
                cause,
            ),
        )
        self.plugins.call_all("remove_worker", self, address)

    def drop_unreachable_worker(self, address: str) -> None:
        """Remove a worker that failed to answer, and cut its stream so that it exits."""
        if self.on_unreachable is not None:
            self.on_unreachable(address)
        self.remove_worker(address, reason="unreachable")

    def cancel_everything(self) -> None:
        """Every client's futures are cancelled and every task forgotten (restart)."""
        events = [
            ClientCancelledKeys(cs.id, [ts.key for ts in cs.wants_what])
            for cs in self.state.clients.values()
            if cs.wants_what
        ]
        self.handle(*events)

    def add_code_sources(self, sources: dict[str, tuple[str, ...]]) -> None:
        """Lines of files that tasks' code comes from and worker processes cannot read
        (notebook cells): sent to every worker now, ahead of those tasks, and to the
        workers that join later."""
        new = {f: lines for f, lines in sources.items() if f not in self.code_sources}
        if not new:
            return
        self.code_sources.update(new)
        for old in list(self.code_sources)[: max(0, len(self.code_sources) - MAX_FILES)]:
            del self.code_sources[old]
        for channel in self.worker_channels.values():
            channel.send([CodeSources(new)])

    async def run_on_workers(
        self,
        fn: Any,
        workers: list[str] | None = None,
        timeout: float | None = None,
        name: str = "",
    ) -> dict:
        """``client.run``: ``fn`` on each worker; exceptions are re-raised here, and a
        worker that has not answered in ``timeout`` seconds raises RunTimeoutError
        naming ``name`` (or ``fn``'s)."""
        addresses = workers if workers is not None else list(self.state.workers)
        return await run_on(self.data_source, addresses, fn, timeout, name)

    def add_client(self, client_id: str, handler: ReportHandler) -> None:
        self.client_handlers[client_id] = handler
        self.client_seq[client_id] = 0
        self.handle(ClientAdded(client_id, self._stimulus("add-client")))

    def remove_client(self, client_id: str) -> None:
        self.handle(ClientRemoved(client_id, self._stimulus("remove-client")))
        self.client_handlers.pop(client_id, None)
        self.client_seq.pop(client_id, None)

    # -- inbound ----------------------------------------------------------------------

    def handle_client_events(self, client_id: str, batch: list[tuple[int, Any]]) -> None:
        """Numbered events from an in-process client, in the order it sent them.

        Each report carries the number of the client's last handled event, so the
        client can ignore reports about a key it has since released and re-submitted.
        """
        if client_id not in self.client_handlers:
            return
        now = self.clock()
        sid = self._stimulus("client")
        for seq, ev in batch:
            ev.stimulus_id = sid
            ev.time = now
            self.client_seq[client_id] = seq
            if type(ev) is GraphSubmitted and len(self.plugins.plugins) > 1:
                self.plugins.call_all("update_graph", self, client=client_id, keys=ev.wanted)
            self.handle(ev)

    def handle_worker_messages(self, address: str, msgs: list[Any]) -> None:
        """Messages from the worker at ``address`` (wire.py's classes, decoded already
        when they came over TCP), made into the state machine's events as wire.py's
        ``SCHEDULER_EVENTS`` says."""
        events: list[SchedulerEvent] = []
        now = self.clock()
        to_event = SCHEDULER_EVENTS
        for msg in msgs:
            make = to_event.get(type(msg))
            if make is not None:
                events.append(make(msg, address, now))
            elif type(msg) is Heartbeat:
                self._heartbeat(address, msg)
            elif type(msg) is UnspillableHeld:
                self.unspillable.held(address, msg)
            elif type(msg) is MemoryStuck:
                events.extend(self.unspillable.stuck(address, msg, self.state, now))
            else:
                logger.warning("Scheduler ignored unknown message %r from %s", msg, address)
        self.handle(*events)

    # -- the door into the state machine, and routing ---------------------------------

    def handle(self, *events: SchedulerEvent) -> None:
        if not events:
            return
        instructions = self.state.handle_stimulus(*events)
        if instructions:
            self._route(instructions)

    def _route(self, instructions: list[SchedulerInstruction]) -> None:
        to_workers: dict[str, list[Any]] = {}
        to_clients: dict[str, list[ReportKey]] = {}
        no_worker: dict[frozenset[str], list] | None = None
        unknown: list[SchedulerInstruction] = []
        for inst in instructions:
            if isinstance(inst, ToWorker):  # ComputeTask(Alone), FreeKeys
                # the message itself: a channel over TCP encodes it (engine/wire.py)
                msgs = to_workers.get(inst.worker)
                if msgs is None:
                    msgs = to_workers[inst.worker] = []
                msgs.append(inst)
            elif isinstance(inst, ReportKey):
                waiters = self._key_waiters.pop(inst.key, None)
                if waiters:
                    for w in waiters:
                        if not w.done():
                            w.set_result(None)
                reports = to_clients.get(inst.client)
                if reports is None:
                    reports = to_clients[inst.client] = []
                reports.append(inst)
            elif isinstance(inst, SetClusterBusy):
                for msgs in [to_workers.setdefault(a, []) for a in self.worker_channels]:
                    msgs.append(inst)
            elif isinstance(inst, ReportNoWorker):
                if no_worker is None:
                    no_worker = {}
                no_worker.setdefault(inst.workers, []).extend(inst.keys)
            else:
                unknown.append(inst)
        if no_worker:
            self.no_worker.report(no_worker)
        # clients first: their handlers never call back, while a worker's may
        for client_id, reports in to_clients.items():
            handler = self.client_handlers.get(client_id)
            if handler is not None:
                handler(reports, self.client_seq.get(client_id, 0))
        for address, msgs in to_workers.items():
            channel = self.worker_channels.get(address)
            if channel is not None:
                channel.send(msgs)
        if unknown:
            raise TypeError(
                f"The scheduler shell does not know the instruction {unknown[0]!r} "
                f"({len(unknown)} unknown in all): route it in Scheduler._route."
            )

    def _heartbeat(self, address: str, msg: Heartbeat) -> None:
        info = self.worker_info.get(address)
        if info is None:
            return
        info["last_seen"] = self.clock()
        info["memory"] = msg.memory
        info["managed"] = msg.managed
        info["spilled"] = msg.spilled
        info["executing"] = msg.executing
        info["ready"] = msg.ready
        process, managed, _ = self.memory_totals()
        self.unmanaged_window.add(self.clock(), max(0, process - managed))
        metrics = msg.metrics
        if metrics:
            self.add_worker_metrics(metrics)
        for waiter in self._heartbeat_waiters.pop(address, ()):
            if not waiter.done():
                waiter.set_result(None)
        channel = self.worker_channels.get(address)
        if channel is not None:
            # the worker halves the round trip to learn how far its clock is from ours
            channel.send([HeartbeatReply(msg.sent, self.clock())])

    def memory_totals(self) -> tuple[int, int, int]:
        """The cluster's memory as the last heartbeats told it: process memory (each
        process once: embedded workers share the kernel's), managed and spilled bytes."""
        rss_by_pid: dict[object, int] = {}
        managed = spilled = 0
        for address, info in self.worker_info.items():
            rss_by_pid[info.get("pid") or address] = int(info.get("memory", 0))
            managed += int(info.get("managed", 0))
            spilled += int(info.get("spilled", 0))
        return sum(rss_by_pid.values()), managed, spilled

    def unmanaged_old(self) -> int:
        """The least unmanaged memory of the last ``unmanaged_window.window`` seconds
        of heartbeats (Dask's ``unmanaged_old``): the part that is not a passing spike."""
        process, managed, _ = self.memory_totals()
        now_unmanaged = max(0, process - managed)
        oldest = self.unmanaged_window.minimum(self.clock())
        return now_unmanaged if oldest is None else int(min(oldest, now_unmanaged))

    async def refresh_metrics(self, timeout: float = 2.0) -> None:
        """Ask every worker for a heartbeat now, so the metrics include the last moment.

        A worker that does not answer in time is left out of this refresh; its numbers
        arrive with its next heartbeat.
        """
        loop = asyncio.get_running_loop()
        waiters = []
        for address, channel in list(self.worker_channels.items()):
            waiter = loop.create_future()
            self._heartbeat_waiters.setdefault(address, []).append(waiter)
            waiters.append(waiter)
            channel.send([HeartbeatNow()])
        pending = [w for w in waiters if not w.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def add_worker_metrics(self, delta: dict) -> None:
        delta = self.spans.fold_keys(delta)  # tasks of a span that has folded since
        add_metrics(self.worker_metrics, delta)  # its rows go in the change log here:
        self.spans.add_metrics(delta)
        cumulative = self.cumulative_worker_metrics
        for key, value in delta.items():
            if key[0] == "execute" and len(key) == 5:
                key = ("execute", key[2], key[3], key[4])
            cumulative[key] = cumulative.get(key, 0) + value

    def _stimulus(self, what: str) -> str:
        self._stimulus_counter += 1
        return f"{what}-{self._stimulus_counter}"

    # -- data -------------------------------------------------------------------------

    async def gather(
        self, keys: list[Key], deadline: float | None = None
    ) -> tuple[dict, list[Key]]:
        """Values of ``keys``, and the keys that cannot be had.

        A key that is being computed again (its holder died) is waited for, until
        ``deadline`` at most (``time.monotonic()``, the loop's clock; None: as long as
        it takes): then TimeoutError.
        """
        loop = asyncio.get_running_loop()
        out: dict = {}
        todo = list(keys)
        while todo:
            data, missing = await self._gather_once(todo)
            out.update(data)
            waitable = [k for k in missing if self._will_be_in_memory(k)]
            if not waitable:
                return out, missing
            futures = []
            for k in waitable:
                f = loop.create_future()
                self._key_waiters.setdefault(k, []).append(f)
                futures.append(f)
            left = None if deadline is None else max(0.0, deadline - loop.time())
            _, pending = await asyncio.wait(futures, timeout=left)
            if pending:
                for k, f in zip(waitable, futures, strict=True):
                    waiters = self._key_waiters.get(k)
                    if waiters is not None and f in waiters:
                        waiters.remove(f)
                        if not waiters:
                            del self._key_waiters[k]
                raise TimeoutError(
                    f"The result of {waitable[0]!r} was lost with its worker and is being "
                    "computed again; it was not back in time."
                )
            todo = missing
        return out, []

    def _will_be_in_memory(self, key: Key) -> bool:
        ts = self.state.tasks.get(key)
        if ts is None or not ts.who_wants:
            return False
        return ts.state in PENDING_STATES or ts.state == "released"

    async def _gather_once(self, keys: list[Key]) -> tuple[dict, list[Key]]:
        by_worker: dict[str, list[Key]] = {}
        missing: list[Key] = []
        tasks = self.state.tasks
        for key in keys:
            ts = tasks.get(key)
            if ts is None or ts.state != "memory":
                missing.append(key)
                continue
            ws = min(ts.who_has, key=lambda w: len(w.processing))
            by_worker.setdefault(ws.address, []).append(key)
        out: dict = {}
        for address, wkeys in by_worker.items():
            try:
                data, _ = await self.data_source.get_data(address, wkeys)
            except UnserializableResults as exc:
                data = exc.data
                for key, (payload, text) in exc.errors.items():
                    # the worker also tells us on its stream; don't wait for that
                    self.handle(
                        ResultSerializationFailed(
                            key, address, payload, text, "gather", self.clock()
                        )
                    )
            except OSError as exc:
                # a worker that cannot answer is gone: its data will be computed again
                logger.warning("Could not gather %d keys from %s: %s", len(wkeys), address, exc)
                self.drop_unreachable_worker(address)
                data = {}
            out.update(data)
            missing.extend(k for k in wkeys if k not in data)
        return out, missing

    def scheduler_info(self) -> dict:
        return {
            "workers": {
                ws.address: {
                    "name": ws.name,
                    "nthreads": ws.nthreads,
                    "memory_limit": ws.memory_limit,
                    "processing": len(ws.processing),
                    # tasks cancelled or released while running, which still take a
                    # thread there until they end (no new task is counted on it)
                    "cancelled_running": ws.n_ending,
                    "paused": ws.paused,
                    "nbytes": ws.nbytes,
                    "keys": len(ws.has_what),
                    "memory": self.worker_info.get(ws.address, {}).get("memory", 0),
                    "pid": self.worker_info.get(ws.address, {}).get("pid"),
                    "last_seen": self.worker_info.get(ws.address, {}).get("last_seen"),
                    **{k: self.worker_info.get(ws.address, {}).get(k, 0) for k in _LOAD},
                }
                for ws in self.state.workers.values()
            },
            "total_nthreads": self.state.total_nthreads,
            "tasks": len(self.state.tasks),
        }
