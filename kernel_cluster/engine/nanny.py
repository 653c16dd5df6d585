"""The nanny: a cluster's worker subprocesses, started, watched, replaced and ended.

KernelCluster (cluster.py) composes one in process mode. Every method that starts or
ends a process runs on the cluster's loop thread.

Besides starting and replacing processes, it watches two things the workers cannot
be trusted to tell: their memory (``watch_memory``: a process past its terminate
fraction is ended, and the task it ran blamed with the limit and the peak), and their
pulse (``vouch``: a worker whose heartbeats stopped while its process is alive and its
pulse thread beats is busy, not dead; engine/pulse.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psutil

from .comm import TOKEN_ENV
from .config import WorkerConfig
from .pulse import read_pulse
from .shared_memory import remove_segments_of
from .slots import read_running

if TYPE_CHECKING:
    from .scheduler import Scheduler
    from .tcp_workers import SchedulerServer

logger = logging.getLogger(__name__)

KILL_GRACE = 2.0  # seconds a dropped worker process has to end on SIGTERM before SIGKILL
RESTART_DELAY = 0.2  # seconds before a failed restart is tried again; doubles each time
RESTART_DELAY_MAX = 10.0

__all__ = ["Nanny"]

# A worker process runs one task per thread already: numeric libraries that start a
# thread per core for each call (OpenBLAS, MKL, OpenMP) would put cores x threads
# threads on the machine's cores. One each, as dask's nanny does (a numpy matmul graph
# ran 15x faster on 2 cores); a value set in the environment is kept.
ONE_THREAD_LIBRARIES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# glibc keeps what large buffers (values received, pickled, spilled) leave behind in its
# heaps, each thread's apart, and raises its mmap threshold as they are freed: a worker
# that moved 10 MiB arrays kept 16 MiB more than it held, enough under a small limit
# to stay paused for good. A fixed trim threshold hands freed memory back (as dask's
# nanny sets it too); a value set in the environment is kept.
MALLOC_SETTINGS = {"MALLOC_TRIM_THRESHOLD_": "65536"}


class _WorkerProcess:
    """The nanny's record of one worker subprocess."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, config: WorkerConfig):
        self.name = name
        self.proc = proc
        self.config = config
        self.address = ""
        self.registered = asyncio.Event()
        self.stopping = False
        self.monitor: asyncio.Task | None = None
        self.ending: asyncio.Task | None = None  # killing a process the scheduler dropped
        self.process: psutil.Process | None = None  # for its memory, once registered
        self.peak = 0  # the most memory seen, in bytes


class Nanny:
    """Starts ``kernel_cluster.engine.cli`` processes that join ``server``, restarts those
    that die while the cluster runs, and ends those the scheduler dropped."""

    def __init__(
        self,
        scheduler: Scheduler,
        secret: bytes,
        local_directory: str,
        config_of: Callable[[str], WorkerConfig],
        names: Iterator[int],
        status: Callable[[], str],
        start_timeout: float,
        cancelled_task_timeout: float | None = None,
    ) -> None:
        """``config_of(name)``: a worker's settings; ``names``: numbers for new worker
        names (never reused); ``status()``: the cluster's status;
        ``cancelled_task_timeout``: see ``watch_cancelled``."""
        self.scheduler = scheduler
        self.secret = secret
        self.local_directory = local_directory
        self.config_of = config_of
        self.names = names
        self.status = status
        self.start_timeout = start_timeout
        self.server: SchedulerServer | None = None  # set once it listens
        self.target = 0  # worker processes wanted: failed restarts are retried
        self._procs: dict[str, _WorkerProcess] = {}
        self._monitors: set[asyncio.Task] = set()  # also those retrying a restart
        self.cancelled_task_timeout = cancelled_task_timeout
        # (address, key) -> when a task freed while it ran was first seen running on
        self._cancelled_since: dict[tuple[str, Any], float] = {}
        self._memory_watch: asyncio.Task | None = None

    def start_watching(self) -> None:
        """Start ``watch_cancelled`` if a ``cancelled_task_timeout`` is set (on the loop)."""
        if self.cancelled_task_timeout is not None:
            task = asyncio.get_running_loop().create_task(self.watch_cancelled())
            self._monitors.add(task)
            task.add_done_callback(self._monitors.discard)

    async def watch_cancelled(self) -> None:
        """Restart a worker process on which a task freed while it ran (cancelled, or
        released) still runs ``cancelled_task_timeout`` seconds later: a thread cannot
        be interrupted, and the task may never end (a loop that ignores cancellation).
        Its other tasks run elsewhere, without blame; what it held is computed again."""
        timeout = self.cancelled_task_timeout
        assert timeout is not None
        while True:
            await asyncio.sleep(min(max(timeout / 4, 0.05), 1.0))
            self.check_cancelled(time.monotonic())

    def check_cancelled(self, now: float) -> None:
        timeout = self.cancelled_task_timeout
        assert timeout is not None
        seen = self._cancelled_since
        running = {
            (address, key)
            for address, ws in self.scheduler.state.workers.items()
            for key in ws.running_cancelled
        }
        for entry in list(seen):
            if entry not in running:
                del seen[entry]
        overdue: dict[str, Any] = {}
        for entry in running:
            since = seen.setdefault(entry, now)
            if now - since >= timeout:
                overdue.setdefault(entry[0], entry[1])
        for address, key in overdue.items():
            self.restart_worker(
                address,
                f"task {key!r} was cancelled {timeout:g} s ago and still runs "
                "(cancelled_task_timeout)",
            )

    def restart_worker(self, address: str, reason: str) -> None:
        """End the worker process at ``address`` and start another in its place. Its tasks
        are not blamed (the scheduler removes it as stopped on purpose)."""
        for wp in self._procs.values():
            if wp.address == address and not wp.stopping and wp.ending is None:
                logger.warning("Restarting worker %s (pid %d): %s", wp.name, wp.proc.pid, reason)
                self.scheduler.remove_worker(address, reason=reason, expected=True)
                wp.ending = asyncio.get_running_loop().create_task(self._end(wp))
                return

    @property
    def n_live(self) -> int:
        """Processes started and not being stopped."""
        return sum(1 for wp in self._procs.values() if not wp.stopping)

    def pids(self) -> dict[str, int]:
        """Process id of each worker subprocess, by address."""
        return {wp.address: wp.proc.pid for wp in self._procs.values() if wp.address}

    async def spawn_many(self, n: int) -> None:
        await asyncio.gather(*(self._spawn() for _ in range(n)))

    async def _spawn(self) -> _WorkerProcess:
        assert self.server is not None
        name = f"worker-{next(self.names)}"
        env = dict(os.environ)
        # the secret goes on the worker's stdin: an environment variable would stay
        # readable in /proc/<pid>/environ for the life of the process
        env.pop(TOKEN_ENV, None)
        for var in ONE_THREAD_LIBRARIES:  # unless the user chose otherwise
            env.setdefault(var, "1")
        for var, value in MALLOC_SETTINGS.items():
            env.setdefault(var, value)
        # Forked from the loop thread, which lives as long as the cluster: the worker's
        # death signal (PR_SET_PDEATHSIG, tied to the thread that forks) fires when the
        # kernel dies; the worker then removes its directory, and the last one the
        # cluster's (kernel_cluster/engine/cli.py).
        config = self.config_of(name).replace(
            remove_local_directory=True,
            cluster_directory=self.local_directory,
            owner_pid=os.getpid(),
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kernel_cluster.engine.cli",
            self.server.address,
            "--token-stdin",
            *config.to_argv(),
            env=env,
            stdin=subprocess.PIPE,
        )
        assert proc.stdin is not None
        proc.stdin.write(self.secret.hex().encode() + b"\n")
        proc.stdin.close()  # the worker reads one line, then stdin is at its end
        wp = _WorkerProcess(name, proc, config)
        self._procs[name] = wp
        wp.monitor = asyncio.get_running_loop().create_task(self._monitor(wp))
        self._monitors.add(wp.monitor)
        wp.monitor.add_done_callback(self._monitors.discard)
        exited = asyncio.ensure_future(proc.wait())
        registered = asyncio.ensure_future(wp.registered.wait())
        await asyncio.wait(
            {exited, registered},
            timeout=self.start_timeout,
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

    def on_register(self, address: str, reg: Any) -> None:
        """``reg``: the worker's RegisterWorker message (engine/wire.py)."""
        wp = self._procs.get(reg.name)
        if wp is not None:
            wp.address = address
            with contextlib.suppress(psutil.Error):
                wp.process = psutil.Process(wp.proc.pid)
            wp.registered.set()
            if wp.config.memory_limit and self._memory_watch is None:
                self._memory_watch = asyncio.get_running_loop().create_task(self.watch_memory())
                self._monitors.add(self._memory_watch)
                self._memory_watch.add_done_callback(self._monitors.discard)

    # -- signs of life, and memory -------------------------------------------------------

    def vouch(self, address: str, within: float) -> bool:
        """Whether the worker process at ``address`` is alive: running, with its pulse
        (a thread of its own, engine/pulse.py) seen within ``within`` seconds. Its
        event loop may be busy; the process is not gone, nor stuck for good."""
        wp = self._at(address)
        if wp is None or wp.stopping or wp.ending is not None or wp.proc.returncode is not None:
            return False
        pulse = read_pulse(os.path.join(self.local_directory, wp.name))
        return pulse is not None and time.monotonic() - pulse[0] <= within

    def _at(self, address: str) -> _WorkerProcess | None:
        for wp in self._procs.values():
            if wp.address == address:
                return wp
        return None

    async def watch_memory(self) -> None:
        """End a worker process whose memory passed its terminate fraction, as a nanny
        of distributed's does: a task can allocate far past the pause threshold (which
        only stops new tasks), and the machine's OOM killer would choose its victim
        among every process of the user. The task running there is blamed (it fails
        after ``allowed_failures`` such deaths, naming the limit and the peak)."""
        while self.status() in ("running", "starting"):
            interval = 1.0
            for wp in list(self._procs.values()):
                config = wp.config
                if not config.memory_limit or wp.process is None:
                    continue
                interval = min(interval, config.memory_monitor_interval)
                if wp.stopping or wp.ending is not None or wp.proc.returncode is not None:
                    continue
                try:
                    rss = wp.process.memory_info().rss
                except psutil.Error:
                    continue
                wp.peak = max(wp.peak, rss)
                fraction = config.memory_terminate_fraction
                if fraction and rss > fraction * config.memory_limit:
                    self._end_for_memory(wp, rss)
            await asyncio.sleep(interval)

    def _end_for_memory(self, wp: _WorkerProcess, rss: int) -> None:
        config = wp.config
        cause = (
            f"its memory ({_mib(rss)}, peak {_mib(wp.peak)}) passed "
            f"{config.memory_terminate_fraction:.0%} of its memory_limit "
            f"({_mib(config.memory_limit)}; memory_terminate_fraction), and its nanny "
            "ended it. Give the workers more memory (memory_limit, fewer workers or "
            "threads per worker), or make the task use less (smaller pieces of data)."
        )
        logger.warning(
            "Worker %s (pid %d) uses %s, over %.0f%% of its memory limit (%s): ending it",
            wp.name,
            wp.proc.pid,
            _mib(rss),
            100 * config.memory_terminate_fraction,
            _mib(config.memory_limit),
        )
        # blamed now, while its slots still show what it runs; the stream that breaks
        # when it dies then finds it removed already
        if wp.address:
            self.scheduler.remove_worker(
                wp.address,
                reason=f"memory {_mib(rss)} over the limit",
                running=self.running_on(wp.address),
                cause=cause,
            )
        with contextlib.suppress(ProcessLookupError):
            wp.proc.kill()  # over its limit: now, not after a grace
        wp.ending = asyncio.get_running_loop().create_task(wp.proc.wait())

    def on_lost(self, address: str) -> None:
        """The scheduler lost ``address``'s stream (no heartbeat, unreachable, broken):
        a process still running there is hung or cut off, and would hold its memory
        and threads for ever. End it; ``_monitor`` then replaces it."""
        for wp in self._procs.values():
            if wp.address == address and not wp.stopping and wp.proc.returncode is None:
                if wp.ending is None and self.status() == "running":
                    if _exited(wp.proc.pid):  # died first (its stream broke): not ours to end
                        return
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

    def running_on(self, address: str) -> list[bytes] | None:
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
                running=None if wp.stopping else self.running_on(wp.address),
            )
        self._procs.pop(wp.name, None)
        # a process that crashed could not remove its directory (spill files, slots, now
        # read): its name is not used again, so nothing else will
        shutil.rmtree(os.path.join(self.local_directory, wp.name), ignore_errors=True)
        remove_segments_of(wp.proc.pid)  # made for readers that had not claimed them
        if wp.stopping or self.status() not in ("running", "starting"):
            return
        if not wp.registered.is_set():
            return  # a start that failed: ``_spawn`` raises, its caller retries
        logger.warning("Worker %s died (exit code %s); starting a new one", wp.name, code)
        await self._replace()

    def _short(self) -> bool:
        return self.status() in ("running", "starting") and self.n_live < self.target

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

    async def scale(self, n: int) -> None:
        self.target = n
        live = [wp for wp in self._procs.values() if not wp.stopping]
        if len(live) < n:
            await asyncio.gather(*(self._spawn() for _ in range(n - len(live))))
        elif len(live) > n:
            await asyncio.gather(*(self._stop_process(wp) for wp in live[n:]))

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

    async def stop_all(self) -> None:
        """Stop every process, and the restarts waiting to be tried again."""
        await asyncio.gather(
            *(self._stop_process(wp) for wp in list(self._procs.values())),
            return_exceptions=True,
        )
        for task in list(self._monitors):
            task.cancel()
        await asyncio.gather(*self._monitors, return_exceptions=True)

    def kill_all(self) -> None:
        """SIGKILL whatever is left (the loop could not stop them: be blunt)."""
        for wp in list(self._procs.values()):
            with contextlib.suppress(ProcessLookupError):
                wp.proc.kill()


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _exited(pid: int) -> bool:
    """Whether the process has exited, though asyncio has not reaped it yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
