"""Issue 32.5: closing from a done-callback or from inside a task is refused, saying
where to close from, and leaves everything working; closing from there is then done.

Before: the default cluster stayed "closing" with its engine threads alive (from a
done-callback), or the task's own future failed with an error that only said it "was
cancelled" (from inside an embedded task).
"""

from __future__ import annotations

import threading

import pytest

from kernel_cluster import get_client
from kernel_cluster.client import default
from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import assert_nothing_left, running_now


def inc(x: int) -> int:
    return x + 1


def closes_its_client(x: int) -> int:
    get_client().close()
    return x


def closes_its_cluster(x: int) -> int:
    get_client().cluster.close()
    return x


def _close_in_callback(client, target) -> BaseException | None:
    seen: list[BaseException | None] = []
    called = threading.Event()

    def cb(fut) -> None:
        try:
            target.close()
            seen.append(None)
        except BaseException as exc:  # handed to the test
            seen.append(exc)
        called.set()

    client.submit(inc, 1, pure=False).add_done_callback(cb)
    assert called.wait(10), "the done-callback never ran"
    return seen[0]


@pytest.mark.parametrize("what", ["client", "cluster"])
def test_closing_from_a_done_callback_is_refused_and_then_done_from_the_kernel(what):
    before = running_now()
    client = Client()  # the default cluster
    cluster = client.cluster
    try:
        error = _close_in_callback(client, client if what == "client" else cluster)
        assert isinstance(error, RuntimeError), error
        assert "cannot be called from a future's done-callback" in str(error)
        assert "Close from the code that made" in str(error)
        assert client.status == "running" and cluster.status == "running"
        assert client.submit(inc, 41, pure=False).result(timeout=10) == 42
    finally:
        client.close()
    assert cluster.status == "closed" and default.default_cluster() is None
    assert_nothing_left(before)


@pytest.mark.parametrize("task", [closes_its_client, closes_its_cluster])
def test_closing_from_inside_a_task_is_refused_and_then_done_from_the_kernel(task):
    before = running_now()
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster:
        client = Client(cluster)
        f = client.submit(task, 1, pure=False)
        with pytest.raises(RuntimeError, match=r"cannot be called inside a task of KernelCluster"):
            f.result(timeout=10)
        assert client.status == "running" and cluster.status == "running"
        assert client.submit(inc, 41, pure=False).result(timeout=10) == 42
        client.close()
    assert cluster.status == "closed"
    assert_nothing_left(before)


def test_closing_a_process_cluster_from_a_done_callback_is_refused(tmp_path):
    before = running_now()
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        error = _close_in_callback(client, cluster)
        assert isinstance(error, RuntimeError) and "from a future's done-callback" in str(error)
        assert client.submit(inc, 1, pure=False).result(timeout=20) == 2
    assert cluster.status == "closed"
    assert_nothing_left(before)
