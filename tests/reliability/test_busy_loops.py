"""Issues 26 and 32: a loop that is busy or stalled must not cost healthy workers.

Before the fixes, a stall of the kernel's engine loop (a 15 s done-callback, a result
slow to unpickle in the kernel, the kernel stopped with SIGSTOP) made the scheduler
find every worker silent once it ran again, and it removed and killed them all. A
worker process whose own loop was busy (``client.run`` of a function that sleeps)
missed its heartbeats and was killed too, with the run failing as ``CommClosedError``.

Now done-callbacks run on a thread of their own, results are unpickled off the loop,
the scheduler does not count its own stall against the workers, and the nanny vouches
for a worker process that is alive (a thread of its own beats while its loop is busy);
``client.run`` is bounded by a timeout that names the function. Only a worker that is
really gone or stuck (its pulse stops, or its loop stays blocked past
``loop_stuck_seconds``) is replaced.

Every cluster here has a short ``death_timeout`` (1.5 s) and stalls of a few times
that, so that each test runs in seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_cluster import Client, wait
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import FileEvent, on_loop, pickled_by_value, wait_for

ROOT = Path(__file__).resolve().parents[2]
STALL = 5.0  # seconds: over three death timeouts


@pytest.fixture(autouse=True)
def _by_value() -> Iterator[None]:
    with pickled_by_value(sys.modules[__name__]):
        yield


@pytest.fixture
def quick() -> Iterator[tuple[KernelCluster, Client]]:
    """Two worker processes that are declared dead after 1.5 s of silence."""
    with (
        KernelCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            heartbeat_interval=0.1,
            death_timeout=1.5,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def scheduler_workers(cluster: KernelCluster) -> set[str]:
    return on_loop(cluster, lambda: set(cluster.scheduler.state.workers))


def watchdog_turns(cluster: KernelCluster) -> int:
    assert cluster.server is not None
    return on_loop(cluster, lambda: cluster.server.watchdog_turns)


def assert_workers_kept(cluster: KernelCluster, pids: dict[str, int]) -> None:
    """The watchdog has looked twice more, and every worker is still the one it was."""
    turns = watchdog_turns(cluster)
    wait_for(lambda: watchdog_turns(cluster) >= turns + 2, 20, "two more watchdog turns")
    assert cluster.worker_pids() == pids
    assert scheduler_workers(cluster) == set(pids)


def inc(x: int) -> int:
    return x + 1


# -- 32.6: a stalled loop in the kernel --------------------------------------------------


def test_a_slow_done_callback_kills_no_worker(quick) -> None:
    cluster, client = quick
    pids = cluster.worker_pids()
    ended = []

    def slow_callback(future) -> None:
        time.sleep(STALL)
        ended.append(future.key)

    future = client.submit(inc, 1)
    future.add_done_callback(slow_callback)
    assert future.result(timeout=10) == 2
    # the engine goes on while the callback sleeps: more work finishes meanwhile
    assert client.submit(inc, 2).result(timeout=STALL / 2) == 3
    wait_for(lambda: ended, 20, "the callback to end")
    assert_workers_kept(cluster, pids)


class SlowToLoad:
    """Unpickles in ``seconds`` (in the kernel: the worker made it and never loads it),
    setting ``started`` first."""

    def __init__(self, seconds: float, started: FileEvent) -> None:
        self.seconds = seconds
        self.started = started

    def __reduce__(self):
        return (_load_slowly, (self.seconds, self.started))


def _load_slowly(seconds: float, started: FileEvent) -> str:
    started.set()
    time.sleep(seconds)
    return "loaded"


def test_a_result_slow_to_unpickle_in_the_kernel_stalls_nothing(quick, tmp_path) -> None:
    cluster, client = quick
    pids = cluster.worker_pids()
    started = FileEvent(tmp_path / "started")
    slow = client.submit(SlowToLoad, STALL, started)
    results: list = []
    reader = threading.Thread(target=lambda: results.append(slow.result(timeout=60)))
    reader.start()
    try:
        assert started.wait(30), "the value never started loading"
        # the engine goes on while the value loads (off its loop): another task is
        # placed, run and reported. Its value is unpickled in the kernel after the slow
        # one (one unpickling thread), so it is fetched without the STALL / 2 bound,
        # which result(timeout=) now holds to for the fetch too (issue 32.2)
        other = client.submit(inc, 2)
        done, _ = wait([other], timeout=STALL / 2)
        assert done, "the engine stalled while a value loaded"
        assert other.result(timeout=60) == 3
    finally:
        reader.join(60)
    assert results == ["loaded"]
    assert_workers_kept(cluster, pids)


def test_the_scheduler_does_not_count_its_own_stall_against_the_workers(quick) -> None:
    """Without the nanny's word for them (a worker it did not start has none), workers
    are judged by their heartbeats alone: those sent while the scheduler's loop was
    stalled wait unread in its sockets, and the stall is not their silence."""
    cluster, client = quick
    pids = cluster.worker_pids()
    assert cluster.server is not None
    server = cluster.server
    on_loop(cluster, lambda: setattr(server, "vouch", None))
    on_loop(cluster, time.sleep, STALL)  # the stall under test, on the scheduler's loop
    assert_workers_kept(cluster, pids)
    assert client.submit(inc, 1).result(timeout=30) == 2


KERNEL_STOPPED = textwrap.dedent(
    """
    import json, os, sys, time
    from kernel_cluster import Client
    from kernel_cluster.engine.cluster import KernelCluster

    out = sys.argv[1]
    with KernelCluster(
        n_workers=2, threads_per_worker=1, processes=True,
        heartbeat_interval=0.1, death_timeout=1.5,
    ) as cluster, Client(cluster) as client:
        pids = cluster.worker_pids()
        with open(out + ".tmp", "w") as f:
            json.dump({"kernel": os.getpid()}, f)
        os.rename(out + ".tmp", out)
        # the test stops this process now, and lets it go on after a while
        while not os.path.exists(out + ".resumed"):
            time.sleep(0.01)
        server = cluster.server
        turns = cluster.loop_thread.run(lambda: server.watchdog_turns)
        while cluster.loop_thread.run(lambda: server.watchdog_turns) < turns + 2:
            time.sleep(0.01)
        result = client.submit(sum, [1, 2]).result(timeout=30)
        after = cluster.worker_pids()
        with open(out + ".done.tmp", "w") as f:
            json.dump({"same": after == pids, "result": result}, f)
        os.rename(out + ".done.tmp", out + ".done")
    """
)


def test_a_kernel_stopped_for_a_while_kills_no_worker(tmp_path: Path) -> None:
    import json

    out = tmp_path / "kernel.json"
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL_STOPPED)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, str(script), str(out)], env=env, cwd=tmp_path)
    try:
        wait_for(lambda: out.exists() or child.poll() is not None, 60, "the kernel to start")
        assert out.exists(), f"the kernel exited ({child.returncode})"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(STALL)  # the stall under test, not a wait for something
        os.kill(child.pid, signal.SIGCONT)
        (tmp_path / "kernel.json.resumed").touch()
        done = tmp_path / "kernel.json.done"
        wait_for(lambda: done.exists() or child.poll() is not None, 60, "the kernel to check")
        assert done.exists(), f"the kernel exited ({child.returncode})"
        assert json.loads(done.read_text()) == {"same": True, "result": 3}
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait(10)


# -- 32.7 and 26.4: a worker whose own loop is busy ---------------------------------------


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_client_run_that_blocks_the_worker_loop_keeps_the_workers(quick) -> None:
    cluster, client = quick
    pids = cluster.worker_pids()
    beside = client.map(nap, [0.5, 0.5], pure=False)
    # runs on each worker's event loop, as in Dask: no heartbeat for STALL seconds
    assert client.run(nap, STALL, timeout=60) == pids
    assert sorted(client.gather(beside)) == sorted(pids.values())
    assert_workers_kept(cluster, pids)


def test_client_run_past_its_timeout_names_the_function_and_keeps_the_worker(quick) -> None:
    cluster, client = quick
    pids = cluster.worker_pids()
    address = sorted(pids)[0]
    with pytest.raises(TimeoutError, match=r"nap.*did not return within 1(\.0)? s"):
        client.run(nap, STALL, workers=[address], timeout=1)
    # the worker is busy until the function returns, then carries on as before
    assert client.submit(nap, 0, workers=[address]).result(timeout=30) == pids[address]
    assert_workers_kept(cluster, pids)


def test_client_run_past_its_timeout_embedded() -> None:
    with (
        KernelCluster(n_workers=1, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        with pytest.raises(TimeoutError, match=r"nap.*did not return within 0\.5 s"):
            client.run(nap, 2, timeout=0.5)
        assert client.submit(inc, 1).result(timeout=30) == 2


def test_client_run_timeout_is_checked(quick) -> None:
    _, client = quick
    for bad in (0, -1, float("nan"), "5"):
        with pytest.raises(ValueError, match="timeout"):
            client.run(inc, 1, timeout=bad)


def test_a_worker_whose_loop_stays_blocked_is_replaced() -> None:
    with (
        KernelCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            heartbeat_interval=0.1,
            death_timeout=1.5,
            loop_stuck_seconds=3.0,
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = cluster.worker_pids()
        stuck = sorted(pids)[0]
        with pytest.raises(TimeoutError, match="nap"):
            client.run(nap, 3600, workers=[stuck], timeout=0.5)
        wait_for(
            lambda: stuck not in cluster.worker_pids() and len(cluster.worker_pids()) == 2,
            30,
            "the stuck worker to be replaced",
        )
        assert client.submit(inc, 1).result(timeout=30) == 2


def ones(nbytes: int):  # type: ignore[no-untyped-def]
    import numpy as np

    return np.ones(nbytes // 8)


def total(a) -> float:  # type: ignore[no-untyped-def]
    return float(a[:10].sum()) + a.size


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_large_transfer_beside_cpu_hogs_keeps_the_receiver() -> None:
    """1.5 GB from one worker process to another with four CPU hogs on the machine.

    Before: the receiver decompressed the value in one lz4 block, which holds the GIL
    while it copies (10 s and more on a busy machine): no heartbeat, no pulse, and it
    was killed (2 runs in 3), the value computed again, and so on. Now it arrives in
    chunks, and the receiver stays, with the default timeouts.
    """
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        with (
            KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
            Client(cluster) as client,
        ):
            pids = cluster.worker_pids()
            sender, receiver = sorted(pids)
            value = client.submit(ones, 1536 << 20, workers=[sender])
            result = client.submit(total, value, workers=[receiver])
            assert result.result(timeout=800) == 10 + (1536 << 20) // 8
            assert cluster.worker_pids() == pids
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
