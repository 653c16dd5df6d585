"""A closed worker leaves no task of its own pending on its event loop.

Its heartbeats, memory monitor and fetches from peers are asyncio tasks: a worker
that closed without ending them left them running on the engine loop (an embedded
worker scaled away kept heartbeating into a closed worker until its next beat; a
fetch from a peer that never answers stayed pending for ever), and the process
entry point cancelled two of them by reaching into the worker without waiting.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from kernel_cluster.engine.config import WorkerConfig
from kernel_cluster.engine.loop import LoopThread
from kernel_cluster.engine.worker import Worker
from kernel_cluster.engine.worker_process import serve
from tests.engine.helpers import wait_for

# the worker served in this test's process, put here by ``_grab`` (client.run)
GRABBED: list[Worker] = []


def _owner(task: asyncio.Task) -> object:
    """The object whose method ``task`` runs (None for a plain coroutine)."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    return frame.f_locals.get("self") if frame is not None else None


def _parts(worker: Worker) -> tuple[object, ...]:
    """The worker and the parts it owns, whose methods its tasks run."""
    return (worker, worker.memory, worker.transfers)


def _pending_of(worker: Worker) -> list[asyncio.Task]:
    parts = _parts(worker)
    return [t for t in asyncio.all_tasks(worker.loop) if not t.done() and _owner(t) in parts]


def inc(x: int) -> int:
    return x + 1


def _grab(dask_worker: Worker) -> str:
    GRABBED.append(dask_worker)
    return dask_worker.name


def test_an_embedded_worker_scaled_away_leaves_no_task_on_the_loop():
    # a long heartbeat interval: a heartbeat loop left behind is still asleep when we look
    with KernelCluster(n_workers=2, threads_per_worker=1, heartbeat_interval=30) as cluster:
        leaving = list(cluster.workers.values())[-1]
        assert cluster.loop_thread.run(_pending_of, leaving), "it runs tasks while it lives"
        cluster.scale(1)
        assert cluster.loop_thread.run(_pending_of, leaving) == []


def test_worker_close_from_another_thread_ends_its_tasks_on_the_loop():
    loop_thread = LoopThread("test-worker-close")
    try:
        worker = loop_thread.run(
            lambda: Worker(
                address="inproc://test-worker-close",
                loop=loop_thread.loop,
                peers=None,  # type: ignore[arg-type]
                config=WorkerConfig(nthreads=1, memory_limit=10**9, heartbeat_interval=30),
            )
        )
        loop_thread.run(worker.start_periodic)
        assert len(loop_thread.run(_pending_of, worker)) == 2  # heartbeats, memory monitor
        worker.close()
        assert loop_thread.run(_pending_of, worker) == []
    finally:
        loop_thread.stop()


def test_a_worker_process_leaves_no_task_pending_when_serve_returns(tmp_path):
    """``serve`` (a worker process's entry point) run on a loop of this process, so
    that what it leaves on its loop can be seen: its heartbeats, its memory monitor
    and a fetch from a peer that never answers (stopped with SIGSTOP)."""
    left: list[asyncio.Task] = []
    owners: list[object] = []  # read when serve returns: a task that ended has none
    codes: list[int] = []
    GRABBED.clear()
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        (peer,) = cluster.worker_pids()
        config = WorkerConfig(
            nthreads=1,
            memory_limit=10**10,
            name="served-here",
            heartbeat_interval=30,
            local_directory=str(tmp_path),
        )

        async def main() -> None:
            codes.append(await serve(cluster.scheduler_address, cluster.secret, config))
            me = asyncio.current_task()
            left.extend(t for t in asyncio.all_tasks() if t is not me and not t.done())
            owners.extend(_owner(t) for t in left)

        thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        thread.start()
        wait_for(lambda: len(client.scheduler_info()["workers"]) == 2, 30, "the worker to join")
        (here,) = set(client.scheduler_info()["workers"]) - {peer}
        client.run(_grab, workers=[here])
        (worker,) = GRABBED
        x = client.submit(inc, 1, workers=[peer])
        assert x.result(timeout=30) == 2
        os.kill(cluster.worker_pids()[peer], signal.SIGSTOP)
        try:
            y = client.submit(inc, x, workers=[here])

            def fetching() -> bool:
                ask = asyncio.run_coroutine_threadsafe(_fetching(worker), worker.loop)
                return ask.result(10)

            wait_for(fetching, 30, "a fetch from the stopped peer")
            # the scheduler's connection breaks: serve returns, as in a worker process
            worker.loop.call_soon_threadsafe(worker.scheduler.abort)  # type: ignore[union-attr]
            thread.join(30)
            assert not thread.is_alive(), "serve did not return"
        finally:
            os.kill(cluster.worker_pids()[peer], signal.SIGCONT)
        del y
    assert codes == [0]
    assert [t for t, owner in zip(left, owners, strict=True) if owner in _parts(worker)] == []
    assert left == []  # nor anything else serve started


async def _fetching(worker: Worker) -> bool:
    return any(t.get_coro().__name__ == "gather_dep" for t in asyncio.all_tasks() if not t.done())
