"""Issue 32.1: a task that submits work and waits for it does not deadlock.

Before, ``client.map(parent, [3] * 8)``, where ``parent`` gathers the results of tasks
it submits, left every thread waiting on children that had no thread to run on: all
eight stayed pending for good (embedded). A task thread that blocks on the cluster's
futures now gives its slot back while it waits (``secede``) and takes one again after
(``rejoin``); both exist by those names, with ``worker_client()``, as in Dask.
"""

from __future__ import annotations

import threading
import time

import pytest

from kernel_cluster import get_client, rejoin, secede, wait, worker_client
from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import FileEvent, on_loop, wait_for


def inc(x: int) -> int:
    return x + 1


def parent(n: int) -> int:
    c = get_client()
    return sum(c.gather(c.map(inc, range(n))))


def grandparent(n: int) -> int:
    c = get_client()
    return c.submit(parent, n, pure=False).result() + 1


@pytest.fixture
def embedded():
    with (
        KernelCluster(n_workers=1, threads_per_worker=2) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def test_tasks_that_gather_their_own_tasks_finish(embedded):
    """The issue's case, with two threads for eight parents."""
    _, client = embedded
    fs = client.map(parent, [3] * 8, pure=False)  # eight tasks (pure: one key, one task)
    _, not_done = wait(fs, timeout=30)
    assert not not_done, "tasks waiting on the tasks they submitted deadlocked"
    assert client.gather(fs) == [6] * 8


def test_waits_nested_three_deep_on_one_thread():
    with (
        KernelCluster(n_workers=1, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        fs = client.map(grandparent, [2, 3, 4], pure=False)
        _, not_done = wait(fs, timeout=30)
        assert not not_done
        assert client.gather(fs) == [4, 7, 11]


def test_worker_client_and_secede_rejoin_by_hand(embedded):
    _, client = embedded

    def with_worker_client(n: int) -> int:
        with worker_client() as c:
            return sum(c.gather(c.map(inc, range(n))))

    def by_hand(n: int) -> int:
        c = get_client()
        futures = c.map(inc, range(n))
        secede()
        try:
            values = c.gather(futures)
        finally:
            rejoin()
        return sum(values)

    fs = client.map(with_worker_client, [2] * 6, pure=False)
    fs += client.map(by_hand, [3] * 6, pure=False)
    _, not_done = wait(fs, timeout=30)
    assert not not_done
    assert client.gather(fs) == [3] * 6 + [6] * 6


def test_secede_and_rejoin_outside_a_task_say_where_they_belong():
    with pytest.raises(ValueError, match=r"secede\(\) and rejoin\(\) are for a task"):
        secede()
    with pytest.raises(ValueError, match=r"inside a function you submit"):
        rejoin()


def test_no_more_tasks_run_at_once_than_there_are_threads(embedded, tmp_path):
    """A task that waits gives its slot to another thread: the pool gains a thread,
    and still runs no more tasks at once than it has slots."""
    cluster, client = embedded
    release = FileEvent(tmp_path / "release")
    lock = threading.Lock()
    now = [0]
    most = [0]

    def child(i: int) -> int:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.005)  # overlapping runs, so too many at once would show
        with lock:
            now[0] -= 1
        return i

    def waits(n: int) -> int:
        c = get_client()
        fs = c.map(child, range(n), pure=False)
        assert release.wait(30)
        return sum(c.gather(fs))

    w = client.submit(waits, 40, pure=False)
    address = next(iter(cluster.workers))
    release.set()
    assert w.result(timeout=30) == sum(range(40))
    assert most[0] <= 2, f"{most[0]} tasks ran at once on two threads"
    pool = cluster.workers[address].pool
    assert len(pool.threads) <= 2 + 1  # the two threads, and one for the seceded task


def test_the_scheduler_counts_a_waiting_task_as_long_running(embedded, tmp_path):
    cluster, client = embedded
    release = FileEvent(tmp_path / "release")

    def blocked() -> int:
        assert release.wait(30)
        return 1

    def waits() -> int:
        return get_client().submit(blocked, pure=False).result()

    address = next(iter(cluster.workers))
    try:
        w = client.submit(waits, pure=False)

        def long_running() -> set:
            return {ts.key for ts in cluster.scheduler.state.workers[address].long_running}

        wait_for(lambda: on_loop(cluster, long_running) == {w.key}, what="long-running")
    finally:
        release.set()
    assert w.result(timeout=30) == 1
    assert not on_loop(cluster, long_running)


def test_secede_frees_the_thread_of_a_worker_process_too(processes, tmp_path):
    """With worker processes a task has no client, but secede() still lets another task
    use its thread while it waits for something else."""
    release = FileEvent(tmp_path / "release")

    def waits_seceded() -> int:
        from kernel_cluster import rejoin, secede

        secede()
        assert release.wait(30)
        rejoin()
        return 1

    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        try:
            w = client.submit(waits_seceded, pure=False)
            assert client.submit(inc, 1).result(timeout=20) == 2  # on the one thread
        finally:
            release.set()
        assert w.result(timeout=20) == 1
