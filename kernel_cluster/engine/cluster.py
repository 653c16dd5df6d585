"""KernelCluster: a scheduler and its workers started from the kernel, and stopped by it."""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from typing import Any

import psutil

from ..core.keys import Key
from .channels import Dispatcher, LocalChannel
from .loop import LoopThread
from .scheduler import Scheduler
from .worker import Worker

logger = logging.getLogger(__name__)

_cluster_ids = itertools.count(1)
_live_clusters: weakref.WeakSet[KernelCluster] = weakref.WeakSet()


class LocalDirectory:
    """Embedded workers read each other's data directly: same process, no copies."""

    def __init__(self) -> None:
        self.workers: dict[str, Worker] = {}

    async def get_data(self, peer: str, keys: list[Key]) -> tuple[dict, dict]:
        worker = self.workers.get(peer)
        if worker is None:
            raise OSError(f"Worker {peer} is gone")
        return worker.get_data(keys, "")


def parse_memory_limit(memory_limit: int | float | str | None, n_workers: int) -> int:
    """Bytes per worker; ``"auto"`` shares the machine's memory between the workers."""
    total = psutil.virtual_memory().total
    if memory_limit is None or memory_limit == 0:
        return 0
    if memory_limit == "auto":
        return total // max(n_workers, 1)
    if isinstance(memory_limit, str):
        return parse_bytes(memory_limit)
    if isinstance(memory_limit, float) and 0 < memory_limit <= 1:
        return int(total * memory_limit)
    if isinstance(memory_limit, int | float) and memory_limit > 0:
        return int(memory_limit)
    raise ValueError(
        f"memory_limit={memory_limit!r} is not understood: use 'auto', a byte count, a string "
        "such as '2 GiB', or a fraction of the machine's memory between 0 and 1."
    )


_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    s = text.strip().lower().replace(" ", "")
    number = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(number) :] or "b"
    if unit not in _UNITS or not number:
        raise ValueError(f"Cannot read {text!r} as a size; write e.g. '512 MiB' or '2GB'.")
    return int(float(number) * _UNITS[unit])


class KernelCluster:
    """A scheduler and ``n_workers`` workers, embedded in this process.

    One event-loop thread drives the scheduler and every worker's control;
    each worker runs tasks on its own pool of ``threads_per_worker`` threads.
    """

    def __init__(
        self,
        n_workers: int = 1,
        threads_per_worker: int | None = None,
        processes: bool = False,
        memory_limit: int | float | str | None = "auto",
        *,
        worker_saturation: float = 2.0,
        allowed_failures: int = 3,
    ):
        if processes:
            raise NotImplementedError(
                "Subprocess workers are not available yet; use processes=False (embedded)."
            )
        if not isinstance(n_workers, int) or n_workers < 0:
            raise ValueError(f"n_workers must be a whole number >= 0, got {n_workers!r}.")
        if threads_per_worker is None:
            threads_per_worker = os.cpu_count() or 1
        if not isinstance(threads_per_worker, int) or threads_per_worker < 1:
            raise ValueError(
                f"threads_per_worker must be a whole number >= 1, got {threads_per_worker!r}."
            )
        self.id = next(_cluster_ids)
        self.name = f"KernelCluster-{self.id}"
        self.threads_per_worker = threads_per_worker
        self.memory_limit = parse_memory_limit(memory_limit, n_workers)
        self.processes = processes
        self.status = "starting"
        self._lock = threading.Lock()
        self._worker_counter = itertools.count()
        self.directory = LocalDirectory()
        self.dispatcher = Dispatcher()
        self.loop_thread = LoopThread(f"{self.name}-loop")
        self.scheduler: Scheduler = self.loop_thread.run(
            lambda: Scheduler(
                data_source=self.directory,
                worker_saturation=worker_saturation,
                allowed_failures=allowed_failures,
            )
        )
        self.workers: dict[str, Worker] = self.directory.workers
        try:
            for _ in range(n_workers):
                self.loop_thread.run(self._start_worker)
        except BaseException:
            self.close()
            raise
        self.status = "running"
        _live_clusters.add(self)

    @property
    def loop(self):
        return self.loop_thread.loop

    def _start_worker(self) -> Worker:
        i = next(self._worker_counter)
        address = f"inproc://{self.name}/worker-{i}"
        loop = self.loop_thread.loop
        worker = Worker(
            address=address,
            nthreads=self.threads_per_worker,
            loop=loop,
            peers=self.directory,
            memory_limit=self.memory_limit,
            name=f"worker-{i}",
            clock=time.time,
        )
        scheduler = self.scheduler
        worker.connect(
            LocalChannel(
                self.dispatcher, lambda msgs: scheduler.handle_worker_messages(address, msgs)
            )
        )
        self.directory.workers[address] = worker
        scheduler.add_worker(
            address,
            LocalChannel(self.dispatcher, worker.handle_scheduler_messages),
            nthreads=worker.nthreads,
            memory_limit=worker.memory_limit,
            name=worker.name,
        )
        return worker

    def _stop_worker(self, address: str) -> None:
        worker = self.directory.workers.pop(address, None)
        if worker is None:
            return
        self.scheduler.remove_worker(address, reason="stopped")
        worker.close()

    def scale(self, n: int) -> None:
        """Start or stop embedded workers until there are ``n``."""
        if n < 0:
            raise ValueError(f"Cannot scale to {n} workers.")

        def adjust() -> None:
            while len(self.workers) < n:
                self._start_worker()
            while len(self.workers) > n:
                self._stop_worker(next(reversed(self.workers)))

        self.loop_thread.run(adjust)

    def close(self) -> None:
        with self._lock:
            if self.status == "closed":
                return
            self.status = "closing"
        workers = list(self.directory.workers.values())
        if self.loop_thread.thread.is_alive():
            try:
                self.loop_thread.run(self._close_on_loop, timeout=30)
            except TimeoutError:
                logger.warning("%s: workers did not stop within 30 s", self.name)
        for worker in workers:
            worker.close()  # joins its task threads, off the loop
        self.loop_thread.stop()
        self.status = "closed"
        _live_clusters.discard(self)

    def _close_on_loop(self) -> None:
        for address in list(self.directory.workers):
            worker = self.directory.workers.pop(address)
            self.scheduler.remove_worker(address, reason="cluster closed")
            worker.stop_accepting()

    def __enter__(self) -> KernelCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<{self.name} {self.status}: {len(self.workers)} workers x "
            f"{self.threads_per_worker} threads>"
        )


@atexit.register
def _close_all() -> None:
    for cluster in list(_live_clusters):
        try:
            cluster.close()
        except Exception:  # interpreter shutdown: best effort
            pass
