"""What the parts of ``Client`` share: its state, and its link to the scheduler.

``Client`` is made of parts, one job each: submission (submission.py), results
(results.py) and the views (views.py), over this base. The client runs in the
user's thread (the kernel). It never touches engine state directly: it queues core
events for the scheduler, numbered and flushed once per loop iteration, and receives
per-key reports back on the loop thread, into its futures (futures.py).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from ..core.keys import Key
from ..core.scheduler_messages import ClientReleasedKeys, SchedulerEvent
from ..core.task_status import task_status
from ..diagnostics.sources.engine_source import EngineSource
from ..engine.cluster import KernelCluster
from ..engine.execute import unpack_exception
from ..engine.loop import check_process
from .futures import Future, FutureState
from .graph_packing import send_main_by_value
from .registry import FutureRegistry


class ClientBase:
    """A client's state and its event queue to the scheduler: what submission, results
    and views build on. Futures call the ``FutureOwner`` methods (futures.py)."""

    # dask.compute(x, scheduler=client) takes an object named like a Client with a
    # ``get`` as a scheduler, if it is not asynchronous (an AsyncClient is)
    asynchronous = False

    # the registry's own methods, bound once: a future calls them for each key
    _inc_ref: Callable[[Key], None]
    _dec_ref: Callable[[Key], None]
    _release_keys: Callable[[list[Key]], None]
    _on_done: Callable[[FutureState, Callable[[], None]], None]
    _wait_for: Callable[..., None]  # FutureRegistry.wait_for
    _wait_all: Callable[..., None]  # FutureRegistry.wait_all

    def __init__(self, client_id: str, cluster: KernelCluster, code_frames: int) -> None:
        if isinstance(code_frames, bool) or not isinstance(code_frames, int) or code_frames < 0:
            raise ValueError(
                "code_frames must be a whole number >= 0 (frames of your code each span "
                f"remembers; 0: none), got {code_frames!r}."
            )
        self.id = client_id
        self.cluster = cluster
        self.code_frames = code_frames  # how many frames of the user's code a span keeps
        self.status = "running"
        self._loop = cluster.loop_thread
        self._scheduler = cluster.scheduler
        self._lock = threading.RLock()
        # the futures by key; Future objects call its methods through ours (FutureOwner)
        # the user's done-callbacks run on the cluster's callback thread, off the loop
        self._futures = futures = FutureRegistry(
            self._lock, self._schedule_flush, unpack_exception, cluster.loop_thread.callbacks.submit
        )
        self._inc_ref = futures.inc_ref
        self._dec_ref = futures.dec_ref
        self._release_keys = futures.release_keys
        self._on_done = futures.on_done
        self._wait_for = futures.wait_for
        futures.describe = self._describe_task
        self._wait_all = futures.wait_all
        self._outbox: list[tuple[int, SchedulerEvent]] = []
        self._flush_pending = False
        self._seq = itertools.count(1)
        # workers in other processes get tasks as bytes, pickled here so that a
        # function or argument that cannot travel fails at submit, naming the task
        self._pickle_tasks = cluster.processes
        if cluster.processes:
            send_main_by_value()
        # the read-only DiagnosticsSource every view of this client's cluster reads
        self._source = EngineSource(cluster)

    # -- sending events ---------------------------------------------------------------

    def _enqueue(self, event: SchedulerEvent) -> int:
        """Queue an event for the scheduler (caller holds the lock); returns its number."""
        futures = self._futures
        if futures.releases:
            self._outbox.append((next(self._seq), ClientReleasedKeys(self.id, futures.releases)))
            futures.releases = []
        seq = next(self._seq)
        self._outbox.append((seq, event))
        self._schedule_flush()
        return seq

    def _schedule_flush(self) -> None:
        if not self._flush_pending and self.status == "running":
            self._flush_pending = True
            try:
                self._loop.call_soon(self._flush)
            except RuntimeError:  # the cluster closed under us: nothing left to tell it
                pass

    def _flush(self) -> None:
        with self._lock:
            self._flush_pending = False
            futures = self._futures
            if futures.releases:
                self._outbox.append(
                    (next(self._seq), ClientReleasedKeys(self.id, futures.releases))
                )
                futures.releases = []
            batch = self._outbox
            self._outbox = []
        if batch:
            self._scheduler.handle_client_events(self.id, batch)

    def _future(self, key: Key, seq: int) -> Future:
        """A future for ``key`` sharing the state of any other future for it (lock held)."""
        return self._futures.future(key, seq, self)

    def _holds(self, key: Key) -> bool:
        """Whether a future of this client holds ``key`` (its value is or will be on
        the cluster): a graph may read it without defining it."""
        with self._lock:
            return self._futures.refcount.get(key, 0) > 0

    def _describe_task(self, key: Key) -> str:
        """What the task of ``key`` is doing, read on the engine loop within 2 s (for a
        timeout's message: it must not fail nor wait long itself)."""
        try:
            return self._loop.run(task_status, self._scheduler.state.tasks, key, timeout=2.0)
        except Exception:  # a closed or stalled engine: the timeout says what it can
            return "the engine did not say what the task is doing (it did not answer in 2 s)"

    async def _describe_task_async(self, key: Key) -> str:
        """``_describe_task`` awaited in another event loop, without blocking it."""
        try:
            answer = self._loop.submit(task_status, self._scheduler.state.tasks, key)
            return await asyncio.wait_for(asyncio.wrap_future(answer), 2.0)
        except Exception:
            return "the engine did not say what the task is doing (it did not answer in 2 s)"

    def _check_running(self) -> None:
        check_process(self._futures.pid, self.id)
        if self.status != "running":
            raise RuntimeError(f"{self.id} is closed; create a new Client().")
        if self.cluster.status != "running":
            raise RuntimeError(
                f"{self.cluster.name} is closed; {self.id} cannot run anything on it. "
                "Create a new KernelCluster and Client."
            )

    # -- provided by results.Results: with the above, what a future asks of its client
    # (futures.FutureOwner), and what submission asks of results

    @abstractmethod
    def gather(self, futures: Any, errors: str = "raise", timeout: float | None = None) -> Any:
        """Values for a future, or a (nested) list / tuple / dict of futures."""
        raise NotImplementedError

    @abstractmethod
    async def _gather_keys_async(self, keys: list[Key]) -> dict[Key, Any]:
        """``_gather_keys`` for an event loop, without blocking it (results.Results)."""
        raise NotImplementedError

    @abstractmethod
    def _gather_keys(self, keys: list[Key], timeout: float | None = None) -> dict[Key, Any]:
        """The values of ``keys``, fetched from the workers (results.Results)."""
        raise NotImplementedError

    @abstractmethod
    def cancel(self, futures: Future | Iterable[Future]) -> None:
        """Stop these tasks if they have not finished (results.Results)."""
        raise NotImplementedError
