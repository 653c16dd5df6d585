"""Starting and stopping: default clusters, attached clients, threads, scaling."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kernel_cluster.client.client import Client, get_client
from kernel_cluster.client.default import default_cluster
from kernel_cluster.client.futures import CancelledError, as_completed, wait
from kernel_cluster.engine.cluster import KernelCluster

from .helpers import (
    FileEvent,
    assert_no_new_threads,
    assert_nothing_left,
    blocked_until,
    check_engine_state,
    child_pids,
    held_keys,
    is_idle,
    on_loop,
    on_workers,
    running_now,
    settled,
    wait_for,
)


def inc(x):
    return x + 1


def worker_addresses(client: Client) -> list[str]:
    return list(client.scheduler_info()["workers"])


@pytest.fixture
def no_default_cluster() -> Iterator[None]:
    """No default cluster before the test, and none left running after it."""
    previous = default_cluster()
    assert previous is None or previous.status == "closed", "a default cluster is running"
    before = set(threading.enumerate())
    yield
    leftover = default_cluster()
    if leftover is not None and leftover.status != "closed":
        leftover.close()
        pytest.fail("the test left the default cluster running")
    assert_no_new_threads(before)


# -- the default cluster --------------------------------------------------------------


def test_client_without_a_cluster_starts_one_and_stops_it(no_default_cluster):
    before = set(threading.enumerate())
    client = Client()
    cluster = client.cluster
    assert isinstance(cluster, KernelCluster)
    assert cluster.status == "running"
    assert len(cluster.workers) >= 1
    assert client.submit(inc, 1).result() == 2
    assert get_client() is client
    assert set(threading.enumerate()) > before
    client.close()
    assert client.status == "closed"
    assert cluster.status == "closed"
    assert_no_new_threads(before)


def test_a_second_default_client_reuses_the_running_cluster(no_default_cluster):
    with Client() as first:
        with Client() as second:
            assert second.cluster is first.cluster
            assert second.submit(inc, 2).result() == 3
        # the client that did not start the cluster leaves it running
        assert first.cluster.status == "running"
        assert first.submit(inc, 3).result() == 4
    assert first.cluster.status == "closed"
    # the next default client starts a fresh cluster
    with Client() as third:
        assert third.cluster is not first.cluster
        assert third.submit(inc, 4).result() == 5


def test_client_on_a_cluster_leaves_it_running(cluster):
    with Client(cluster) as client:
        assert client.cluster is cluster
        assert client.submit(inc, 1).result() == 2
    assert client.status == "closed"
    assert cluster.status == "running"
    with Client(cluster) as again:
        assert again.submit(inc, 2).result() == 3


def test_client_rejects_a_closed_cluster_or_a_wrong_argument(processes):
    before = running_now()
    cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=processes)
    cluster.close()
    with pytest.raises(ValueError, match="not running"):
        Client(cluster)
    with pytest.raises(TypeError, match="KernelCluster"):
        Client("tcp://127.0.0.1:8786")
    assert_nothing_left(before)


def test_cluster_and_client_as_context_managers(processes):
    before = running_now()
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        assert client.gather(client.map(inc, range(100))) == list(range(1, 101))
    assert client.status == "closed"
    assert cluster.status == "closed"
    assert_nothing_left(before)


def test_close_is_idempotent_in_either_order(processes):
    before = running_now()
    cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=processes)
    client = Client(cluster)
    assert client.submit(inc, 1).result() == 2
    cluster.close()  # the cluster first: the client must still close cleanly
    client.close()
    client.close()
    cluster.close()
    assert_nothing_left(before)


def test_a_second_cluster_in_the_same_process(processes):
    before = running_now()
    with (
        KernelCluster(n_workers=1, threads_per_worker=2, processes=processes) as first,
        Client(first) as c1,
    ):
        assert c1.submit(inc, 1).result() == 2
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=processes) as second,
        Client(second) as c2,
    ):
        assert second.name != first.name
        assert c2.gather(c2.map(inc, range(1_000))) == list(range(1, 1_001))
    assert_nothing_left(before)


def test_two_clusters_side_by_side(processes):
    before = running_now()
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as a,
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as b,
        Client(a, set_as_default=False) as ca,
        Client(b, set_as_default=False) as cb,
    ):
        fa = ca.submit(inc, 1)
        fb = cb.submit(inc, fa.result())
        assert fb.result() == 3
        with pytest.raises(ValueError, match="another cluster"):
            cb.submit(inc, fa)
        del fa, fb
    assert_nothing_left(before)


# -- a closed client ----------------------------------------------------------------------


def test_a_closed_client_refuses_work_and_cancels_its_pending_futures(cluster, new_event):
    event = new_event()
    client = Client(cluster)
    done = client.submit(inc, 1)
    assert done.result() == 2
    pending = client.submit(blocked_until, event, 1)
    seq = as_completed([pending])
    client.close()
    with pytest.raises(CancelledError):
        pending.result(timeout=10)
    assert next(iter(seq)) is pending
    assert wait([pending], timeout=1).done == {pending}
    with pytest.raises(RuntimeError, match="closed"):
        client.submit(inc, 1)
    with pytest.raises(RuntimeError, match="closed"):
        client.get({"a": 1}, "a")
    with pytest.raises(ValueError, match="No client"):
        get_client()
    event.set()
    wait_for(lambda: is_idle(cluster), what="the closed client's tasks to be freed")
    del done, pending


# -- scaling ------------------------------------------------------------------------------


def test_scale_up_adds_workers_that_take_queued_work(processes, tmp_path):
    before = running_now()
    event, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")

    def blocker_task():
        started.set()
        assert event.wait(30)
        return "blocker"

    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        try:
            blocker = client.submit(blocker_task)
            assert started.wait(10)
            others = client.map(inc, range(20))
            # the only thread is busy: nothing else can finish until a worker is added
            with pytest.raises(TimeoutError):
                wait(others, timeout=0.1, return_when="FIRST_COMPLETED")
            cluster.scale(3)
            assert cluster.n_workers == 3
            assert len(worker_addresses(client)) == 3
            assert on_loop(cluster, lambda: cluster.scheduler.state.total_nthreads) == 3
            first = next(as_completed(others).iter(timeout=10))
            assert first.result() in range(1, 21)
            assert not blocker.done()
        finally:
            event.set()
        assert blocker.result(timeout=10) == "blocker"
        assert client.gather(others) == list(range(1, 21))
        check_engine_state(cluster)
    assert_nothing_left(before)


def worker_name(dask_worker) -> str:
    return dask_worker.name


def test_scale_down_keeps_results_and_stops_threads(processes):
    before = running_now()
    with (
        KernelCluster(n_workers=3, threads_per_worker=2, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        fs = client.map(inc, range(300))
        assert client.gather(fs) == list(range(1, 301))
        spread = on_loop(
            cluster,
            lambda: {ws.address for ws in cluster.scheduler.state.workers.values() if ws.has_what},
        )
        assert len(spread) > 1
        cluster.scale(1)
        assert cluster.n_workers == 1
        assert len(worker_addresses(client)) == 1
        assert on_loop(cluster, lambda: len(cluster.scheduler.state.workers)) == 1
        # results held by the stopped workers are computed again
        assert client.gather(fs) == list(range(1, 301))
        settled(cluster, lambda: held_keys(cluster), {f.key for f in fs}, "values held")
        assert client.gather(client.map(inc, range(300, 400))) == list(range(301, 401))
        check_engine_state(cluster)
        # the stopped workers' threads (or processes) have ended; the survivor's run
        (survivor,) = on_workers(cluster, worker_name).values()
        engine_threads = {cluster.loop_thread.thread.name, cluster.loop_thread.callbacks.name}
        new_threads = {
            t for t in set(threading.enumerate()) - before[0] if t.name not in engine_threads
        }
        if processes:
            assert len(child_pids() - before[1]) == 1
        else:
            names = sorted(t.name for t in new_threads)
            assert sum(name.startswith(f"{survivor}-task-") for name in names) == 2, names
            assert all(name.startswith(f"{survivor}-") for name in names), names
        cluster.scale(2)
        assert client.gather(client.map(inc, range(10))) == list(range(1, 11))
        del fs
    assert_nothing_left(before)


def test_scale_down_while_a_task_runs_on_the_stopped_worker(processes, tmp_path):
    event, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")

    def slow(x):
        started.set()
        assert event.wait(30)
        return x

    before = running_now()
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        last = stopped_first_by_scale(cluster)
        f = client.submit(slow, 5, workers=[last], allow_other_workers=True)
        stopper = threading.Thread(target=cluster.scale, args=(1,))
        try:
            assert started.wait(10)
            started.clear()
            # stopping a worker does not wait for its running task: the task is run
            # again on a worker that is left
            stopper.start()
            assert started.wait(10), "the task did not move to the remaining worker"
        finally:
            event.set()
            if stopper.ident is not None:
                stopper.join(30)
        assert not stopper.is_alive()
        assert f.result(timeout=10) == 5
        assert worker_addresses(client) != [last]
    assert_nothing_left(before)


def stopped_first_by_scale(cluster: KernelCluster) -> str:
    """The worker that ``scale(n - 1)`` stops: the last one the cluster lists."""
    return list(cluster.worker_pids() if cluster.processes else cluster.workers)[-1]


def test_scale_to_zero_queues_work_until_workers_return(processes):
    before = running_now()
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        cluster.scale(0)
        fs = client.map(inc, range(10))
        with pytest.raises(TimeoutError):
            wait(fs, timeout=0.1)
        cluster.scale(2)
        assert client.gather(fs) == list(range(1, 11))
        with pytest.raises(ValueError):
            cluster.scale(-1)
    assert_nothing_left(before)


def test_closing_the_cluster_under_a_client_ends_its_futures(processes, tmp_path):
    before = running_now()
    event = FileEvent(tmp_path / "release")
    cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=processes)
    client = Client(cluster)
    closer = threading.Thread(target=cluster.close)
    try:
        done = client.submit(inc, 1)
        assert done.result() == 2
        pending = client.submit(blocked_until, event, 1)
        dependent = client.submit(inc, pending)
        closer.start()
        # nobody will ever compute these: waiting on them must not hang
        for f in (pending, dependent, done):
            with pytest.raises(CancelledError):
                f.result(timeout=10)
    finally:
        event.set()
        if closer.ident is not None:
            closer.join(30)
    assert cluster.status == "closed"
    with pytest.raises(RuntimeError, match="closed"):
        client.submit(inc, 1)
    with pytest.raises(RuntimeError, match="closed"):
        client.get({"a": (inc, 1)}, "a")
    client.close()
    assert_nothing_left(before)
