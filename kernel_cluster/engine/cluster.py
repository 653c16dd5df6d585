"""KernelCluster: a scheduler and its workers started from the kernel, and stopped by it."""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

import psutil

from .comm import new_secret, write_secret_file
from .config import (
    PER_WORKER,
    WorkerConfig,
    check_cluster_settings,
    check_process_memory,
    make_local_directory,
    parse_bytes,
    parse_memory_limit,
)
from .dask_config import PROFILE_CYCLE, PROFILE_INTERVAL, WORKER_SATURATION, dask_setting
from .leftovers import PREFIX, sweep_stale_directories, write_owner_file
from .local_channels import Dispatcher, LocalChannel
from .loop import LoopThread
from .nanny import Nanny
from .offload import Offloader
from .peers import InProcessPeers
from .scheduler import Scheduler
from .shared_memory import SharedMemory, sweep_stale_segments
from .tcp_workers import ConnectionPool, RemoteData, SchedulerServer
from .worker import Worker

logger = logging.getLogger(__name__)

_cluster_ids = itertools.count(1)
_live_clusters: weakref.WeakSet[KernelCluster] = weakref.WeakSet()

__all__ = ["KernelCluster", "WorkerConfig", "WorkerSettings", "parse_bytes", "parse_memory_limit"]


class WorkerSettings(TypedDict, total=False):
    """The worker settings ``KernelCluster`` takes as keywords (see WorkerConfig)."""

    heartbeat_interval: float
    fine_metrics: bool
    memory_target_fraction: float
    memory_spill_fraction: float
    memory_pause_fraction: float
    memory_monitor_interval: float
    memory_stuck_seconds: float
    memory_terminate_fraction: float
    serialize_timeout: float
    loop_stuck_seconds: float
    profile: bool
    profile_interval: float
    profile_cycle_interval: float
    transfer_log_length: int
    shared_memory_limit: int | None
    local_directory: str | None


class KernelCluster:
    """A scheduler and ``n_workers`` workers, embedded in this process.

    One event-loop thread drives the scheduler and every worker's control;
    each worker runs tasks on its own pool of ``threads_per_worker`` threads (by
    default the machine's cores divided among the workers, at least one each).
    """

    def __init__(
        self,
        n_workers: int = 1,
        threads_per_worker: int | None = None,
        processes: bool = False,
        memory_limit: int | float | str | None = "auto",
        *,
        worker_saturation: float | None = None,
        queue_seconds: float = 0.05,
        allowed_failures: int = 3,
        death_timeout: float = 10.0,
        worker_start_timeout: float = 60.0,
        cancelled_task_timeout: float | None = None,
        no_workers_timeout: float | None = 30.0,
        task_stream_length: int = 100_000,
        history: bool = True,
        worker_config: WorkerConfig | None = None,
        **settings: Unpack[WorkerSettings],
    ):
        """``settings`` are the workers' (``heartbeat_interval``, ``fine_metrics``, the
        memory fractions, ``profile``, ... : see WorkerConfig), checked here, before
        anything starts. ``worker_config`` gives them all at once; keywords then change
        some of them, as do ``threads_per_worker`` and ``memory_limit`` unless left at
        None and "auto". With ``local_directory``, the cluster's directory (workers'
        spill files, the token) is made in it rather than in the system's temporary
        directory. ``worker_saturation``, ``profile_interval`` and
        ``profile_cycle_interval`` left out take dask.config's
        ``distributed.scheduler.worker-saturation`` and
        ``distributed.worker.profile.interval`` / ``.cycle`` where the user set them
        (``engine/dask_config.py`` has the precedence).
        ``history=False``: this cluster's finished spans are not recorded in
        the run history (``kernel_cluster.history``; a Client starts the recording, the
        engine only keeps the setting).

        The scheduler's: ``worker_saturation`` (default 1.5; tasks without inputs sent
        to a worker per thread before the rest wait on the scheduler; inf: all at once),
        ``queue_seconds``, ``allowed_failures`` (worker deaths a task may be running at
        before it fails with KilledWorker), ``task_stream_length``; worker processes':
        ``death_timeout`` (seconds without a heartbeat before a worker is removed),
        ``worker_start_timeout``, and ``cancelled_task_timeout`` (None, the default: a
        task cancelled while it runs goes on to its end, taking its thread, which gets
        no new work meanwhile; a number of seconds: a worker process where such a task
        still runs that long after is restarted). ``no_workers_timeout`` (30 s): how
        long a task restricted to workers that are not there (``workers=[...]``, a
        worker that died) waits in the state ``no-worker`` for one of them to join
        before it fails with NoValidWorkerError (None: for ever). A bad value fails
        here with a ValueError naming the setting, before anything starts.
        """
        if worker_config is None:  # dask.config's profiling settings, unless keywords say
            for name, key in (
                ("profile_interval", PROFILE_INTERVAL),
                ("profile_cycle_interval", PROFILE_CYCLE),
            ):
                if name not in settings:
                    value = dask_setting(key)
                    if value is not None:
                        settings[name] = value  # type: ignore[literal-required]
        if worker_saturation is None:
            worker_saturation = dask_setting(WORKER_SATURATION) or 1.5
        checked = check_cluster_settings(
            n_workers=n_workers,
            processes=processes,
            worker_saturation=worker_saturation,
            queue_seconds=queue_seconds,
            allowed_failures=allowed_failures,
            death_timeout=death_timeout,
            worker_start_timeout=worker_start_timeout,
            task_stream_length=task_stream_length,
            cancelled_task_timeout=cancelled_task_timeout,
            no_workers_timeout=no_workers_timeout,
        )
        self.worker_config = _worker_config(
            n_workers, threads_per_worker, memory_limit, worker_config, settings
        )
        if processes:
            check_process_memory(memory_limit, self.worker_config.memory_limit)
        root = self.worker_config.local_directory
        if root is not None:
            make_local_directory(root)
        worker_saturation = checked["worker_saturation"]
        queue_seconds = checked["queue_seconds"]
        death_timeout = checked["death_timeout"]
        worker_start_timeout = checked["worker_start_timeout"]
        cancelled_task_timeout = checked["cancelled_task_timeout"]
        if not isinstance(history, bool):
            raise TypeError(
                f"history={history!r}: give True (record this cluster's runs, the default) "
                "or False; the history's file is set with KERNEL_CLUSTER_HISTORY or "
                "kernel_cluster.history.configure(path=...)."
            )
        self.history = history
        self._close_hooks: list[Callable[[], None]] = []
        self.id = next(_cluster_ids)
        self.name = f"KernelCluster-{self.id}"
        self.processes = processes
        self.worker_start_timeout = worker_start_timeout
        self.status = "starting"
        self._lock = threading.Lock()
        self._worker_counter = itertools.count()
        self.secret = new_secret()
        sweep_stale_directories(root)  # left by kernels that were killed
        sweep_stale_segments()  # their workers' shared memory not claimed
        self.local_directory = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
        write_owner_file(self.local_directory)
        # the secret on disk (mode 0600) lets `kernel-cluster-worker --token-file` join
        self.token_file = os.path.join(self.local_directory, "token")
        write_secret_file(self.token_file, self.secret)
        self.pool = ConnectionPool(self.secret)
        # values from worker processes are unpickled on a thread of this, not on the loop
        self.unpickling = Offloader(f"{self.name}-unpickle", self.worker_config.serialize_timeout)
        if processes:
            self.unpickling.start()
        # a reader of shared memory only: the kernel's gather takes large values there
        self.peers = InProcessPeers(
            RemoteData(self.pool, offloader=self.unpickling, shared=SharedMemory(0))
        )
        self.dispatcher = Dispatcher()
        self.loop_thread = LoopThread(f"{self.name}-loop")
        self.scheduler: Scheduler = self.loop_thread.run(
            lambda: Scheduler(
                data_source=self.peers,
                worker_saturation=worker_saturation,
                queue_seconds=queue_seconds,
                allowed_failures=allowed_failures,
                task_stream_length=task_stream_length,
                no_workers_timeout=checked["no_workers_timeout"],
            )
        )
        self.server: SchedulerServer | None = None
        self.nanny: Nanny | None = None  # process mode
        self._kernel_memory_watch: asyncio.Task | None = None  # embedded, with a limit
        self._kernel_memory_warned = False
        self.workers: dict[str, Worker] = self.peers.workers
        _live_clusters.add(self)
        try:
            if processes:
                self.nanny = nanny = Nanny(
                    self.scheduler,
                    self.secret,
                    self.local_directory,
                    self._config_of,
                    self._worker_counter,
                    lambda: self.status,
                    worker_start_timeout,
                    cancelled_task_timeout,
                )
                nanny.target = n_workers
                self.server = nanny.server = SchedulerServer(
                    self.scheduler,
                    self.secret,
                    death_timeout=death_timeout,
                    on_register=nanny.on_register,
                    on_lost=nanny.on_lost,
                    vouch=nanny.vouch,
                )
                self.scheduler.running_source = nanny.running_on
                self.loop_thread.run(self.server.start)
                self.loop_thread.run(nanny.spawn_many, n_workers)
                self.loop_thread.run(nanny.start_watching)
            else:
                for _ in range(n_workers):
                    self.loop_thread.run(self._start_worker)
                if self.memory_limit:
                    self.loop_thread.run(self._start_kernel_memory_watch)
        except BaseException:
            self.close()
            raise
        self.status = "running"

    @property
    def loop(self):
        return self.loop_thread.loop

    # the workers' settings, as attributes of the cluster before WorkerConfig
    @property
    def threads_per_worker(self) -> int:
        return self.worker_config.nthreads

    @property
    def memory_limit(self) -> int:
        return self.worker_config.memory_limit

    @property
    def heartbeat_interval(self) -> float:
        return self.worker_config.heartbeat_interval

    @property
    def fine_metrics(self) -> bool:
        return self.worker_config.fine_metrics

    @property
    def memory_fractions(self) -> tuple[float, float, float]:
        c = self.worker_config
        return (c.memory_target_fraction, c.memory_spill_fraction, c.memory_pause_fraction)

    @property
    def profile(self) -> bool:
        return self.worker_config.profile

    @property
    def profile_interval(self) -> float:
        return self.worker_config.profile_interval

    @property
    def profile_cycle_interval(self) -> float:
        return self.worker_config.profile_cycle_interval

    def _config_of(self, name: str) -> WorkerConfig:
        """The settings of the worker ``name``: its own directory in the cluster's."""
        return self.worker_config.replace(
            name=name, local_directory=os.path.join(self.local_directory, name)
        )

    @property
    def scheduler_address(self) -> str:
        """Where worker processes connect (process mode only)."""
        return self.server.address if self.server is not None else ""

    def worker_pids(self) -> dict[str, int]:
        """Process id of each worker subprocess, by address."""
        return self.nanny.pids() if self.nanny is not None else {}

    def _start_worker(self) -> Worker:
        i = next(self._worker_counter)
        address = f"inproc://{self.name}/worker-{i}"
        worker = Worker(
            address=address,
            loop=self.loop_thread.loop,
            peers=self.peers,
            config=self._config_of(f"worker-{i}"),
            clock=time.time,
        )
        scheduler = self.scheduler
        worker.connect(
            LocalChannel(
                self.dispatcher, lambda msgs: scheduler.handle_worker_messages(address, msgs)
            )
        )
        self.peers.workers[address] = worker
        scheduler.add_worker(
            address,
            LocalChannel(self.dispatcher, worker.handle_scheduler_messages),
            nthreads=worker.nthreads,
            memory_limit=worker.memory_limit,
            name=worker.name,
            pid=os.getpid(),
        )
        worker.start_periodic()
        return worker

    # -- embedded workers' memory ----------------------------------------------------

    def _start_kernel_memory_watch(self) -> None:
        self._kernel_memory_watch = self.loop.create_task(self._watch_kernel_memory())

    async def _watch_kernel_memory(self) -> None:
        interval = max(self.worker_config.memory_monitor_interval, 0.5)
        while not self._kernel_memory_warned:
            self.check_kernel_memory()
            await asyncio.sleep(interval)

    def check_kernel_memory(self) -> None:
        """Embedded workers: warn once when this process's memory passes what their
        limits add up to. They spill and pause by the size of the results they hold,
        but they share the kernel's process: nothing can stop a task from allocating
        more, nor restart the kernel for it (worker processes are restarted)."""
        if self._kernel_memory_warned or self.processes or not self.memory_limit:
            return
        n = max(len(self.workers), 1)
        rss = psutil.Process().memory_info().rss
        if rss <= n * self.memory_limit:
            return
        self._kernel_memory_warned = True
        logger.warning(
            "%s: the kernel's memory (%d MiB) passed its embedded workers' memory_limit "
            "(%d x %d MiB). kernel-cluster cannot hold embedded workers to a limit: they "
            "share the kernel's process, and only spill and pause by the size of the "
            "results they hold. Use KernelCluster(processes=True) for a limit that is "
            "enforced (a worker process over it is restarted). Warned once.",
            self.name,
            rss >> 20,
            n,
            self.memory_limit >> 20,
        )

    def _stop_worker(self, address: str) -> Worker | None:
        worker = self.peers.workers.pop(address, None)
        if worker is None:
            return None
        self.scheduler.remove_worker(address, reason="stopped", expected=True)
        worker.stop_accepting()
        return worker

    @property
    def n_workers(self) -> int:
        if self.nanny is not None:
            return self.nanny.n_live
        return len(self.workers)

    def scale(self, n: int) -> None:
        """Start or stop workers until there are ``n``."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"Cannot scale to {n!r} workers; give a whole number >= 0.")
        stopped = self.loop_thread.run(self._scale, n, timeout=self.worker_start_timeout + 30)
        for worker in stopped:
            worker.close()

    async def _scale(self, n: int) -> list[Worker]:
        if self.nanny is not None:
            await self.nanny.scale(n)
            return []
        stopped = []
        while len(self.workers) < n:
            self._start_worker()
        while len(self.workers) > n:
            w = self._stop_worker(next(reversed(self.workers)))
            if w is not None:
                stopped.append(w)
        await asyncio.gather(*(w.stop_tasks() for w in stopped))
        return stopped

    def restart(self) -> None:
        """Cancel every task and replace every worker with a fresh one."""
        n = self.n_workers
        self.loop_thread.run(self.scheduler.cancel_everything)
        self.scale(0)
        self.scale(n)

    @property
    def in_this_process(self) -> bool:
        """False in a child forked from the process that made the cluster, where its
        threads do not run (and its workers and files are the parent's)."""
        return self.loop_thread.pid == os.getpid()

    def refuse_own_threads(self, what: str) -> None:
        """RuntimeError if called on this cluster's event loop or callback thread (a
        scheduler plugin, a future's done-callback) or inside one of its tasks: ``what``
        (closing) waits for that loop, or stops the very thread it runs on, and would
        stop half-way."""
        if self.loop_thread.in_loop_thread() or self.loop_thread.callbacks.in_thread():
            raise RuntimeError(
                f"{what} cannot be called from a future's done-callback or a scheduler "
                f"plugin of {self.name}: it stops the threads they run on. Close from "
                "the code that made the client or cluster (after wait(...), or in a finally "
                "block), or have the callback set a threading.Event that this code waits on."
            )
        me = threading.get_ident()
        if any(me in worker.pool.idents for worker in list(self.workers.values())):
            raise RuntimeError(
                f"{what} cannot be called inside a task of {self.name}: closing stops the "
                "threads its tasks run on, this one among them. Return from the task and close "
                "from the code that made the client or cluster."
            )

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` when the cluster closes, first, while its loop still runs
        (the run history writes its last spans then). A hook that fails is logged."""
        self._close_hooks.append(hook)

    def close(self) -> None:
        if not self.in_this_process:
            # a forked child's copy: the workers, directory and threads are its parent's
            _live_clusters.discard(self)
            return
        if self.status == "running":
            self.refuse_own_threads(f"{self.name}.close()")
        with self._lock:
            if self.status == "closed":
                return
            self.status = "closing"
            hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:
                logger.exception("%s: a close hook failed", self.name)
        workers = list(self.peers.workers.values())
        if self.loop_thread.thread.is_alive():
            try:
                self.loop_thread.run(self._close_on_loop, timeout=30)
            except TimeoutError:
                logger.warning("%s: workers did not stop within 30 s", self.name)
        for worker in workers:
            worker.close()  # joins its task threads, off the loop
        if self.nanny is not None:
            self.nanny.kill_all()  # those the loop could not stop
        self.loop_thread.stop()
        self.unpickling.close()
        shutil.rmtree(self.local_directory, ignore_errors=True)
        self.status = "closed"
        _live_clusters.discard(self)

    async def _close_on_loop(self) -> None:
        if self._kernel_memory_watch is not None:
            self._kernel_memory_watch.cancel()
        # clients still attached would otherwise wait for ever on futures nobody computes
        self.scheduler.cancel_everything()
        stopped = []
        for address in list(self.peers.workers):
            worker = self.peers.workers.pop(address)
            self.scheduler.remove_worker(address, reason="cluster closed", expected=True)
            worker.stop_accepting()
            stopped.append(worker)
        await asyncio.gather(*(w.stop_tasks() for w in stopped), return_exceptions=True)
        if self.nanny is not None:
            await self.nanny.stop_all()
        if self.server is not None:
            await self.server.stop()
        await self.pool.close()
        self.scheduler.close()

    def __enter__(self) -> KernelCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "processes" if self.processes else "embedded"
        return (
            f"<{self.name} {self.status}: {self.n_workers} {kind} workers x "
            f"{self.threads_per_worker} threads>"
        )


def _worker_config(
    n_workers: int,
    threads_per_worker: int | None,
    memory_limit: int | float | str | None,
    base: WorkerConfig | None,
    settings: WorkerSettings,
) -> WorkerConfig:
    """The workers' config from KernelCluster's arguments (ValueError naming a bad one)."""
    if base is not None and not isinstance(base, WorkerConfig):
        raise TypeError(f"worker_config must be a WorkerConfig, got {type(base).__name__}.")
    for name in settings:
        if name in WorkerSettings.__annotations__:
            continue
        if name in ("nthreads", "memory_limit"):
            hint = "give threads_per_worker and memory_limit instead"
        elif name in PER_WORKER:
            hint = "the cluster sets it for each worker it starts"
        else:
            hint = f"the worker settings are: {', '.join(WorkerSettings.__annotations__)}"
        raise TypeError(f"KernelCluster() got an unexpected keyword argument {name!r}; {hint}.")
    changes: dict[str, Any] = dict(settings)
    if threads_per_worker is not None or base is None:
        if threads_per_worker is None:  # the cores shared out, none oversubscribed
            threads_per_worker = max(1, available_cores() // max(1, n_workers))
        if (
            isinstance(threads_per_worker, bool)
            or not isinstance(threads_per_worker, int)
            or threads_per_worker < 1
        ):
            raise ValueError(
                f"threads_per_worker must be a whole number >= 1, got {threads_per_worker!r}."
            )
        changes["nthreads"] = threads_per_worker
    if not (base is not None and memory_limit == "auto"):
        changes["memory_limit"] = parse_memory_limit(memory_limit, n_workers)
    # per-worker settings of a given config are the cluster's to set
    changes.update({name: WorkerConfig.__dataclass_fields__[name].default for name in PER_WORKER})
    return (base or WorkerConfig()).replace(**changes)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@atexit.register
def _close_all() -> None:
    for cluster in list(_live_clusters):
        try:
            cluster.close()
        except Exception:  # interpreter shutdown: best effort
            pass
