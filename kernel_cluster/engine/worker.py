"""The worker shell: turns WorkerState instructions into thread-pool work and fetches.

It speaks to the scheduler only through a channel of plain dict messages, so the
same class serves embedded workers (a LocalChannel on the kernel's engine loop)
and subprocess workers (a TCP stream).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

import cloudpickle
import psutil

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
from .comm import SerializationError, check_serializable
from .execute import pack_exception, run_task
from .pool import TaskThreadPool
from .remote import UnserializableResults

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
        clock: Callable[[], float] = time.time,
        in_process: bool = True,
    ):
        self.address = address
        self.name = name or address
        self.nthreads = nthreads
        self.memory_limit = memory_limit
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
            elif op == "heartbeat-reply":
                self._learn_clock_offset(msg)
            else:
                logger.warning("Worker %s ignored an unknown message %r", self.address, op)
        self.handle(*events)

    def now(self) -> float:
        """The scheduler's clock, as well as this worker can tell."""
        return self.clock() + self.clock_offset

    def _learn_clock_offset(self, msg: dict) -> None:
        if self.in_process:
            return  # same clock
        received = self.clock()
        rtt = received - msg["sent"]
        self._offset_samples.append((rtt, msg["time"] - (msg["sent"] + received) / 2))
        # the fastest round trip brackets the scheduler's reading most tightly
        self.clock_offset = min(self._offset_samples)[1]

    def heartbeat(self) -> None:
        if self.scheduler is None or self._closed:
            return
        self.scheduler.send(
            [
                {
                    "op": "heartbeat",
                    "sent": self.clock(),
                    "memory": self._process.memory_info().rss,
                    "executing": len(self.state.executing),
                    "ready": len(self.state.ready),
                    "metrics": {},
                }
            ]
        )

    async def heartbeat_loop(self, interval: float) -> None:
        while not self._closed:
            self.heartbeat()
            await asyncio.sleep(interval)

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
                        "startstops": self._scheduler_times(inst.startstops),
                        "thread": inst.thread,
                        "stimulus_id": inst.stimulus_id,
                    }
                )
            elif t is SendTaskErred:
                if self.in_process:
                    exc, tb = inst.exception, inst.traceback
                else:
                    exc, tb = pack_exception(inst.exception, inst.traceback)
                msgs.append(
                    {
                        "op": "task-erred",
                        "key": inst.key,
                        "exception": exc,
                        "traceback": tb,
                        "text": inst.exception_text,
                        "startstops": self._scheduler_times(inst.startstops),
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

    def _scheduler_times(self, startstops: list[tuple]) -> list[tuple]:
        off = self.clock_offset
        if not off:
            return startstops
        return [
            (action, start + off, stop + off, *rest) for action, start, stop, *rest in startstops
        ]

    def _execute(self, key: Key) -> None:
        ts = self.state.tasks[key]
        if ts.dependencies:
            data = self.data
            inputs = {d.key: data[d.key] for d in ts.dependencies}
        else:
            inputs = _NO_DATA
        self.pool.submit(self._run, key, ts.spec, inputs)

    def _run(self, key: Key, spec: Any, inputs: dict) -> Any:
        """On a task thread: skip a task cancelled while it waited in the pool's queue."""
        ts = self.state.tasks.get(key)
        if ts is None or ts.cancelled or self.state.paused:
            return ExecuteSkipped(key)
        return run_task(key, spec, inputs)

    async def _gather_dep(self, inst: GatherDep) -> None:
        start = self.now()
        try:
            data, nbytes = await self.peers.get_data(inst.worker, inst.keys)
        except UnserializableResults as exc:  # those keys fail on the scheduler
            data, nbytes = exc.data, exc.nbytes
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
        stop = self.now()
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

    async def handle_request(self, msg: dict) -> dict:
        """A peer's (or the kernel's) request on a request/reply connection."""
        op = msg.get("op")
        if op == "get-data":
            start = self.now()
            data, nbytes = self.get_data(list(msg["keys"]), msg.get("who", ""))
            if data:
                total = sum(nbytes.values())
                self.transfer_outgoing_log.append(
                    {
                        "peer": msg.get("who", ""),
                        "keys": list(data),
                        "total": total,
                        "compressed": total,
                        "start": start,
                        "stop": self.now(),
                    }
                )
            return {"status": "OK", "data": data, "nbytes": nbytes}
        if op == "run":
            try:
                fn = cloudpickle.loads(msg["function"])
                result = await self.run_function(fn)
            except Exception as exc:
                packed, tb = pack_exception(exc, exc.__traceback__)
                return {"status": "error", "exception": packed, "traceback": tb}
            return {"status": "OK", "result": cloudpickle.dumps(result)}
        return {
            "status": "error",
            "exception": pack_exception(ValueError(f"unknown op {op!r}"), None)[0],
        }

    def drop_unserializable(self, reply: dict) -> dict:
        """A get-data reply whose values would not pickle: send the rest, report the bad.

        The scheduler marks each bad key erred, so the task fails rather than hangs.
        """
        errors = {}
        for key, value in list(reply["data"].items()):
            try:
                check_serializable(value, f"the result of task {key!r}")
            except SerializationError as exc:
                payload, _ = pack_exception(exc, None)
                errors[key] = (payload, str(exc))
                del reply["data"][key]
                reply["nbytes"].pop(key, None)
                if self.scheduler is not None:
                    self.scheduler.send(
                        [
                            {
                                "op": "result-unserializable",
                                "key": key,
                                "exception": payload,
                                "text": str(exc),
                            }
                        ]
                    )
        reply["errors"] = errors
        return reply

    async def run_function(self, fn: Callable[..., Any]) -> Any:
        """``client.run``: call ``fn(dask_worker=self)`` (or ``fn()``) on this worker's loop."""
        import inspect

        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        result = fn(dask_worker=self) if "dask_worker" in params else fn()
        if inspect.isawaitable(result):
            result = await result
        return result

    def stop_accepting(self) -> None:
        """No more messages or results are handled; running tasks finish on their own."""
        self._closed = True

    def close(self) -> None:
        self._closed = True
        self.pool.stop()
