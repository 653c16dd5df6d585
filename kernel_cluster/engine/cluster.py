"""KernelCluster: a scheduler and its workers started from the kernel, and stopped by it."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, TypedDict, Unpack

from ..core.keys import Key
from .channels import Dispatcher, LocalChannel
from .comm import TOKEN_ENV, new_secret, write_secret_file
from .config import PER_WORKER, WorkerConfig, parse_bytes, parse_memory_limit
from .leftovers import PREFIX, sweep_stale_directories, write_owner_file
from .loop import LoopThread
from .remote import ConnectionPool, RemoteData, SchedulerServer
from .scheduler import Scheduler
from .slots import read_running
from .worker import Worker

logger = logging.getLogger(__name__)

_cluster_ids = itertools.count(1)
KILL_GRACE = 2.0  # seconds a dropped worker process has to end on SIGTERM before SIGKILL
RESTART_DELAY = 0.2  # seconds before a failed restart is tried again; doubles each time
RESTART_DELAY_MAX = 10.0
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
    profile: bool
    profile_interval: float
    profile_cycle_interval: float
    transfer_log_length: int
    local_directory: str | None


class LocalDirectory:
    """Embedded workers read each other's data directly: same process, no copies.

    Addresses of other processes are handed to ``remote`` (a RemoteData).
    """

    def __init__(self, remote: RemoteData | None = None) -> None:
        self.workers: dict[str, Worker] = {}
        self.remote = remote

    async def get_data(
        self, peer: str, keys: list[Key], stats: dict | None = None, who: str = "scheduler"
    ) -> tuple[dict, dict]:
        """``who`` reads ``keys`` from ``peer`` (logged by ``peer`` as sent to ``who``)."""
        worker = self.workers.get(peer)
        if worker is not None:
            return worker.send_data(keys, who)
        if self.remote is not None and not peer.startswith("inproc://"):
            return await self.remote.get_data(peer, keys, stats)
        raise OSError(f"Worker {peer} is gone")

    async def run(self, peer: str, fn: Any) -> Any:
        worker = self.workers.get(peer)
        if worker is not None:
            return await worker.run_function(fn)
        if self.remote is None:
            raise OSError(f"Worker {peer} is gone")
        import cloudpickle

        from .execute import unpack_exception
        from .wire import RequestFailed, Run, RunResult

        reply = await self.remote.pool.rpc(peer, Run(cloudpickle.dumps(fn)))
        if type(reply) is RequestFailed:
            exc, tb = unpack_exception(reply.exception, reply.traceback)
            raise exc.with_traceback(tb)
        if type(reply) is not RunResult:
            raise OSError(f"Worker {peer} answered run with {reply!r}")
        return cloudpickle.loads(reply.result)


class _WorkerProcess:
    """The nanny's record of one worker subprocess."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process):
        self.name = name
        self.proc = proc
        self.address = ""
        self.registered = asyncio.Event()
        self.stopping = False
        self.monitor: asyncio.Task | None = None
        self.ending: asyncio.Task | None = None  # killing a process the scheduler dropped


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
        worker_saturation: float = 1.5,
        queue_seconds: float = 0.05,
        allowed_failures: int = 3,
        death_timeout: float = 10.0,
        worker_start_timeout: float = 60.0,
        task_stream_length: int = 100_000,
        worker_config: WorkerConfig | None = None,
        **settings: Unpack[WorkerSettings],
    ):
        """``settings`` are the workers' (``heartbeat_interval``, ``fine_metrics``, the
        memory fractions, ``profile``, ... : see WorkerConfig), checked here, before
        anything starts. ``worker_config`` gives them all at once; keywords then change
        some of them, as do ``threads_per_worker`` and ``memory_limit`` unless left at
        None and "auto". With ``local_directory``, the cluster's directory (workers'
        spill files, the token) is made in it rather than in the system's temporary
        directory.
        """
        if not isinstance(n_workers, int) or n_workers < 0:
            raise ValueError(f"n_workers must be a whole number >= 0, got {n_workers!r}.")
        self.worker_config = _worker_config(
            n_workers, threads_per_worker, memory_limit, worker_config, settings
        )
        self.id = next(_cluster_ids)
        self.name = f"KernelCluster-{self.id}"
        self.processes = processes
        self.worker_start_timeout = worker_start_timeout
        self.status = "starting"
        self._lock = threading.Lock()
        self._worker_counter = itertools.count()
        self._procs: dict[str, _WorkerProcess] = {}
        self._monitors: set[asyncio.Task] = set()  # also those retrying a restart
        self.secret = new_secret()
        root = self.worker_config.local_directory
        if root is not None:
            os.makedirs(root, exist_ok=True)
        sweep_stale_directories(root)  # left by kernels that were killed
        self.local_directory = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
        write_owner_file(self.local_directory)
        self._target = n_workers  # worker processes wanted: failed restarts are retried
        # the secret on disk (mode 0600) lets `kernel-cluster-worker --token-file` join
        self.token_file = os.path.join(self.local_directory, "token")
        write_secret_file(self.token_file, self.secret)
        self.pool = ConnectionPool(self.secret)
        self.directory = LocalDirectory(RemoteData(self.pool))
        self.dispatcher = Dispatcher()
        self.loop_thread = LoopThread(f"{self.name}-loop")
        self.scheduler: Scheduler = self.loop_thread.run(
            lambda: Scheduler(
                data_source=self.directory,
                worker_saturation=worker_saturation,
                queue_seconds=queue_seconds,
                allowed_failures=allowed_failures,
                task_stream_length=task_stream_length,
            )
        )
        self.server: SchedulerServer | None = None
        self.workers: dict[str, Worker] = self.directory.workers
        _live_clusters.add(self)
        try:
            if processes:
                self.server = SchedulerServer(
                    self.scheduler,
                    self.secret,
                    death_timeout=death_timeout,
                    on_register=self._on_register,
                    on_lost=self._on_lost,
                )
                self.scheduler.running_source = self._running_on
                self.loop_thread.run(self.server.start)
                self.loop_thread.run(self._spawn_many, n_workers)
            else:
                for _ in range(n_workers):
                    self.loop_thread.run(self._start_worker)
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

    # -- worker subprocesses (the nanny) ---------------------------------------------

    async def _spawn_many(self, n: int) -> None:
        await asyncio.gather(*(self._spawn() for _ in range(n)))

    async def _spawn(self) -> _WorkerProcess:
        assert self.server is not None
        name = f"worker-{next(self._worker_counter)}"
        env = dict(os.environ)
        env[TOKEN_ENV] = self.secret.hex()
        # Forked from the loop thread, which lives as long as the cluster: the worker's
        # death signal (PR_SET_PDEATHSIG, tied to the thread that forks) fires when the
        # kernel dies; the worker then removes its directory, and the last one the
        # cluster's (kernel_cluster/worker_cli.py).
        config = self._config_of(name).replace(
            remove_local_directory=True,
            cluster_directory=self.local_directory,
            owner_pid=os.getpid(),
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kernel_cluster.worker_cli",
            self.server.address,
            *config.to_argv(),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        wp = _WorkerProcess(name, proc)
        self._procs[name] = wp
        wp.monitor = asyncio.get_running_loop().create_task(self._monitor(wp))
        self._monitors.add(wp.monitor)
        wp.monitor.add_done_callback(self._monitors.discard)
        exited = asyncio.ensure_future(proc.wait())
        registered = asyncio.ensure_future(wp.registered.wait())
        await asyncio.wait(
            {exited, registered},
            timeout=self.worker_start_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        exited.cancel()
        registered.cancel()
        if not wp.registered.is_set():
            wp.stopping = True
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise RuntimeError(
                f"Worker process {name} did not start (exit code {proc.returncode}); "
                "its error output is in the kernel's log."
            )
        return wp

    def _on_register(self, address: str, reg: Any) -> None:
        """``reg``: the worker's RegisterWorker message (engine/wire.py)."""
        wp = self._procs.get(reg.name)
        if wp is not None:
            wp.address = address
            wp.registered.set()

    def _on_lost(self, address: str) -> None:
        """The scheduler lost ``address``'s stream (no heartbeat, unreachable, broken):
        a process still running there is hung or cut off, and would hold its memory
        and threads for ever. End it; ``_monitor`` then replaces it."""
        for wp in self._procs.values():
            if wp.address == address and not wp.stopping and wp.proc.returncode is None:
                if wp.ending is None and self.status == "running":
                    logger.warning(
                        "Worker %s (pid %d) was dropped by the scheduler; ending its process",
                        wp.name,
                        wp.proc.pid,
                    )
                    wp.ending = asyncio.get_running_loop().create_task(self._end(wp))
                return

    async def _end(self, wp: _WorkerProcess) -> None:
        """SIGTERM (the worker cleans up its directory), then SIGKILL after a grace: a
        task holding the GIL keeps the SIGTERM handler from ever running."""
        with contextlib.suppress(ProcessLookupError):
            wp.proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(wp.proc.wait()), KILL_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                wp.proc.kill()

    def _running_on(self, address: str) -> list[bytes] | None:
        """What the task threads of the worker process at ``address`` were running."""
        for wp in self._procs.values():
            if wp.address == address:
                return read_running(os.path.join(self.local_directory, wp.name))
        return None

    async def _monitor(self, wp: _WorkerProcess) -> None:
        code = await wp.proc.wait()
        if wp.address:
            self.scheduler.remove_worker(
                wp.address,
                reason=f"process exited ({code})",
                expected=wp.stopping,
                running=None if wp.stopping else self._running_on(wp.address),
            )
        self._procs.pop(wp.name, None)
        # a process that crashed could not remove its directory (spill files, slots, now
        # read): its name is not used again, so nothing else will
        shutil.rmtree(os.path.join(self.local_directory, wp.name), ignore_errors=True)
        if wp.stopping or self.status not in ("running", "starting"):
            return
        if not wp.registered.is_set():
            return  # a start that failed: ``_spawn`` raises, its caller retries
        logger.warning("Worker %s died (exit code %s); starting a new one", wp.name, code)
        await self._replace()

    def _short(self) -> bool:
        return self.status in ("running", "starting") and self.n_workers < self._target

    async def _replace(self) -> None:
        """Start a worker in place of one that died; a start that fails (a spawn error,
        a flood of connections) is tried again, less and less often, for as long as
        the cluster runs and is short of workers."""
        delay = RESTART_DELAY
        attempt = 0
        while self._short():
            attempt += 1
            try:
                wp = await self._spawn()
            except Exception as exc:
                if not self._short():
                    return  # closed or scaled down meanwhile: no worker wanted
                logger.warning(
                    "Could not restart a worker (attempt %d): %s; trying again in %.1f s",
                    attempt,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESTART_DELAY_MAX)
                continue
            if attempt > 1:
                logger.warning("Restarted worker %s after %d attempts", wp.name, attempt)
            return

    async def _stop_process(self, wp: _WorkerProcess, timeout: float = 5.0) -> None:
        wp.stopping = True
        if wp.address:
            self.scheduler.remove_worker(wp.address, reason="stopped", expected=True)
        if wp.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                wp.proc.terminate()
            try:
                await asyncio.wait_for(wp.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    wp.proc.kill()
                await wp.proc.wait()
        if wp.ending is not None:
            await asyncio.gather(wp.ending, return_exceptions=True)
        if wp.monitor is not None:
            await asyncio.gather(wp.monitor, return_exceptions=True)

    def worker_pids(self) -> dict[str, int]:
        """Process id of each worker subprocess, by address."""
        return {wp.address: wp.proc.pid for wp in self._procs.values() if wp.address}

    def _start_worker(self) -> Worker:
        i = next(self._worker_counter)
        address = f"inproc://{self.name}/worker-{i}"
        worker = Worker(
            address=address,
            loop=self.loop_thread.loop,
            peers=self.directory,
            config=self._config_of(f"worker-{i}"),
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
            pid=os.getpid(),
        )
        worker.start_periodic()
        return worker

    def _stop_worker(self, address: str) -> Worker | None:
        worker = self.directory.workers.pop(address, None)
        if worker is None:
            return None
        self.scheduler.remove_worker(address, reason="stopped", expected=True)
        worker.stop_accepting()
        return worker

    @property
    def n_workers(self) -> int:
        if self.processes:
            return sum(1 for wp in self._procs.values() if not wp.stopping)
        return len(self.workers)

    def scale(self, n: int) -> None:
        """Start or stop workers until there are ``n``."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"Cannot scale to {n!r} workers; give a whole number >= 0.")
        stopped = self.loop_thread.run(self._scale, n, timeout=self.worker_start_timeout + 30)
        for worker in stopped:
            worker.close()

    async def _scale(self, n: int) -> list[Worker]:
        if self.processes:
            self._target = n
            live = [wp for wp in self._procs.values() if not wp.stopping]
            if len(live) < n:
                await asyncio.gather(*(self._spawn() for _ in range(n - len(live))))
            elif len(live) > n:
                await asyncio.gather(*(self._stop_process(wp) for wp in live[n:]))
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
        for wp in list(self._procs.values()):  # the loop could not stop them: be blunt
            with contextlib.suppress(ProcessLookupError):
                wp.proc.kill()
        self.loop_thread.stop()
        shutil.rmtree(self.local_directory, ignore_errors=True)
        self.status = "closed"
        _live_clusters.discard(self)

    async def _close_on_loop(self) -> None:
        # clients still attached would otherwise wait for ever on futures nobody computes
        self.scheduler.cancel_everything()
        stopped = []
        for address in list(self.directory.workers):
            worker = self.directory.workers.pop(address)
            self.scheduler.remove_worker(address, reason="cluster closed", expected=True)
            worker.stop_accepting()
            stopped.append(worker)
        await asyncio.gather(*(w.stop_tasks() for w in stopped), return_exceptions=True)
        await asyncio.gather(
            *(self._stop_process(wp) for wp in list(self._procs.values())),
            return_exceptions=True,
        )
        for task in list(self._monitors):  # restarts waiting to be tried again
            task.cancel()
        await asyncio.gather(*self._monitors, return_exceptions=True)
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
    settings: dict[str, Any],
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
        if threads_per_worker is None:
            threads_per_worker = os.cpu_count() or 1
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


@atexit.register
def _close_all() -> None:
    for cluster in list(_live_clusters):
        try:
            cluster.close()
        except Exception:  # interpreter shutdown: best effort
            pass
