"""The worker shell: turns WorkerState instructions into thread-pool work and fetches.

It speaks to the scheduler only through a channel of plain dict messages, so the
same class serves embedded workers (a LocalChannel on the kernel's engine loop)
and subprocess workers (a TCP stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

from ..core.keys import Key
from ..core.worker_messages import (
    ComputeRequested,
    Execute,
    ExecuteSkipped,
    FreeKeysRequested,
    GatherDep,
    GatherDepFailed,
    GatherDepSucceeded,
    SendDependencyUnavailable,
    SendReplicasAdded,
    SendTaskErred,
    SendTaskFinished,
)
from ..core.worker_state import WorkerState
from .execute import run_task
from .pool import TaskThreadPool

logger = logging.getLogger(__name__)

_NO_DATA: dict = {}


class Channel(Protocol):
    def send(self, msgs: list[dict]) -> None: ...


class PeerData(Protocol):
    """How a worker reads keys held by another worker."""

    async def get_data(self, peer: str, keys: list[Key]) -> tuple[dict, dict]: ...


class Worker:
    def __init__(
        self,
        *,
        address: str,
        nthreads: int,
        loop: asyncio.AbstractEventLoop,
        peers: PeerData,
        memory_limit: int = 0,
        name: str = "",
        data: MutableMapping | None = None,
        clock: Callable[[], float],
    ):
        self.address = address
        self.name = name or address
        self.nthreads = nthreads
        self.memory_limit = memory_limit
        self.loop = loop
        self.peers = peers
        self.clock = clock
        self.state = WorkerState(address=address, nthreads=nthreads, data=data)
        self.data = self.state.data
        self.scheduler: Channel | None = None
        self.pool = TaskThreadPool(nthreads, self.name, self._wake_from_thread)
        self.transfer_incoming_log: list[dict] = []
        self.transfer_outgoing_log: list[dict] = []
        self._closed = False

    def connect(self, scheduler: Channel) -> None:
        self.scheduler = scheduler

    # -- inbound ----------------------------------------------------------------------

    def handle_scheduler_messages(self, msgs: list[dict]) -> None:
        events = []
        for msg in msgs:
            op = msg["op"]
            if op == "compute-task":
                events.append(
                    ComputeRequested(
                        msg["key"],
                        msg["spec"],
                        msg["who_has"],
                        msg["nbytes"],
                        msg["priority"],
                        msg["prefix"],
                        msg["span_id"],
                        msg["stimulus_id"],
                    )
                )
            elif op == "free-keys":
                events.append(FreeKeysRequested(msg["keys"], msg["stimulus_id"]))
            else:
                logger.warning("Worker %s ignored an unknown message %r", self.address, op)
        self.handle(*events)

    def _wake_from_thread(self) -> None:
        if not self._closed:
            self.loop.call_soon_threadsafe(self._on_tasks_done)

    def _on_tasks_done(self) -> None:
        if not self._closed:
            self.handle(*self.pool.drain())

    # -- the door into the state machine ----------------------------------------------

    def handle(self, *events: Any) -> None:
        if self._closed or not events:
            return
        instructions = self.state.handle_stimulus(*events)
        if not instructions:
            return
        msgs: list[dict] = []
        for inst in instructions:
            t = type(inst)
            if t is Execute:
                self._execute(inst.key)
            elif t is SendTaskFinished:
                msgs.append(
                    {
                        "op": "task-finished",
                        "key": inst.key,
                        "nbytes": inst.nbytes,
                        "type": inst.type_name,
                        "startstops": inst.startstops,
                        "thread": inst.thread,
                        "stimulus_id": inst.stimulus_id,
                    }
                )
            elif t is SendTaskErred:
                msgs.append(
                    {
                        "op": "task-erred",
                        "key": inst.key,
                        "exception": inst.exception,
                        "traceback": inst.traceback,
                        "text": inst.exception_text,
                        "startstops": inst.startstops,
                        "thread": inst.thread,
                        "stimulus_id": inst.stimulus_id,
                    }
                )
            elif t is GatherDep:
                self.loop.create_task(self._gather_dep(inst))
            elif t is SendReplicasAdded:
                msgs.append(
                    {"op": "add-keys", "keys": inst.keys, "nbytes": inst.nbytes, "stimulus_id": ""}
                )
            elif t is SendDependencyUnavailable:
                msgs.append(
                    {
                        "op": "missing-data",
                        "key": inst.key,
                        "dependency": inst.dependency,
                        "stimulus_id": inst.stimulus_id,
                    }
                )
        if msgs and self.scheduler is not None:
            self.scheduler.send(msgs)

    def _execute(self, key: Key) -> None:
        ts = self.state.tasks[key]
        if ts.dependencies:
            data = self.data
            inputs = {d.key: data[d.key] for d in ts.dependencies}
        else:
            inputs = _NO_DATA
        self.pool.submit(self._run, key, ts.spec.expr, inputs)

    def _run(self, key: Key, expr: Any, inputs: dict) -> Any:
        """On a task thread: skip a task cancelled while it waited in the pool's queue."""
        ts = self.state.tasks.get(key)
        if ts is None or ts.cancelled or self.state.paused:
            return ExecuteSkipped(key)
        return run_task(key, expr, inputs)

    async def _gather_dep(self, inst: GatherDep) -> None:
        start = self.clock()
        try:
            data, nbytes = await self.peers.get_data(inst.worker, inst.keys)
        except Exception as exc:
            logger.warning(
                "Worker %s could not fetch %d keys from %s: %s",
                self.address,
                len(inst.keys),
                inst.worker,
                exc,
            )
            self.handle(GatherDepFailed(inst.worker, inst.keys, inst.stimulus_id))
            return
        stop = self.clock()
        if data:
            self.transfer_incoming_log.append(
                {
                    "peer": inst.worker,
                    "keys": list(data),
                    "total": sum(nbytes.values()),
                    "compressed": sum(nbytes.values()),
                    "start": start,
                    "stop": stop,
                }
            )
        self.handle(GatherDepSucceeded(inst.worker, data, nbytes, start, stop, inst.stimulus_id))

    # -- serving peers ----------------------------------------------------------------

    def get_data(self, keys: list[Key], who: str) -> tuple[dict, dict]:
        """The values this worker holds among ``keys`` and their sizes."""
        data = self.data
        tasks = self.state.tasks
        out = {}
        nbytes = {}
        for key in keys:
            if key in data:
                out[key] = data[key]
                ts = tasks.get(key)
                nbytes[key] = ts.nbytes if ts is not None else 0
        return out, nbytes

    def stop_accepting(self) -> None:
        """No more messages or results are handled; running tasks finish on their own."""
        self._closed = True

    def close(self) -> None:
        self._closed = True
        self.pool.stop()
