"""Issue 26.3: values whose (de)serialisation is slow, or fails where they arrive.

Before the fix a worker pickled the values it sent on its event loop: a result whose
pickling took longer than the death timeout stopped its heartbeats, the worker was
removed and killed, the value computed again on another worker, and the same again,
for ever. A value that could not be unpickled where it arrived failed the whole fetch,
which was tried again and again.

Now values are pickled and unpickled one by one on a thread (heartbeats go on), a
value that takes longer than ``serialize_timeout`` fails its own task with an error
that says so, and a value that cannot be unpickled where it arrives fails its task
once, with the unpickling error, and its dependents with it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

from kernel_cluster import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import on_loop, pickled_by_value, wait_for

STALL = 5.0  # seconds: over three death timeouts


@pytest.fixture(autouse=True)
def _by_value() -> Iterator[None]:
    with pickled_by_value(sys.modules[__name__]):
        yield


def quick_cluster(**settings) -> KernelCluster:
    return KernelCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        heartbeat_interval=0.1,
        death_timeout=1.5,
        **settings,
    )


class SlowToPickle:
    """Takes ``seconds`` to pickle (in the worker that made it); loads as its text."""

    def __init__(self, seconds: float, text: str = "value") -> None:
        self.seconds = seconds
        self.text = text

    def __reduce__(self):
        time.sleep(self.seconds)
        return (str, (self.text,))


class LoadsOnlyWhereMade:
    """Unpickles in the process that made it, and raises in any other."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __reduce__(self):
        return (_load_in, (self.pid,))


def _load_in(pid: int) -> str:
    if os.getpid() != pid:
        raise ImportError(f"this value only loads in process {pid}")
    return "loaded"


def length(x) -> int:
    return len(x)


def made_where(x) -> int:
    return os.getpid()


def sends_of(key, dask_worker=None) -> int:
    return sum(key in entry["keys"] for entry in dask_worker.transfer_outgoing_log)


def inc(x: int) -> int:
    return x + 1


def scheduler_workers(cluster: KernelCluster) -> set[str]:
    return on_loop(cluster, lambda: set(cluster.scheduler.state.workers))


def test_a_result_slow_to_pickle_arrives_and_its_worker_stays() -> None:
    with quick_cluster() as cluster, Client(cluster) as client:
        pids = cluster.worker_pids()
        future = client.submit(SlowToPickle, STALL)
        assert future.result(timeout=60) == "value"
        assert cluster.worker_pids() == pids
        assert scheduler_workers(cluster) == set(pids)


def test_a_dependency_slow_to_pickle_reaches_the_other_worker() -> None:
    with quick_cluster() as cluster, Client(cluster) as client:
        pids = cluster.worker_pids()
        a, b = sorted(pids)
        value = client.submit(SlowToPickle, STALL, "abc", workers=[a])
        n = client.submit(length, value, workers=[b])
        assert n.result(timeout=60) == 3
        assert cluster.worker_pids() == pids


def test_a_value_slower_than_the_limit_fails_its_own_task() -> None:
    with quick_cluster(serialize_timeout=1.0) as cluster, Client(cluster) as client:
        pids = cluster.worker_pids()
        slow = client.submit(SlowToPickle, 30)
        fine = client.submit(inc, 1)
        with pytest.raises(
            Exception, match=r"(?s)SlowToPickle.*more than 1(\.0)? s.*serialize_timeout"
        ):
            slow.result(timeout=30)
        assert fine.result(timeout=10) == 2
        # a dependent of such a value fails with it, from the other worker too
        a, b = sorted(pids)
        slow_dep = client.submit(SlowToPickle, 30, workers=[a], pure=False)
        n = client.submit(length, slow_dep, workers=[b])
        with pytest.raises(Exception, match="serialize_timeout"):
            n.result(timeout=30)
        assert client.submit(inc, 2).result(timeout=10) == 3
        assert cluster.worker_pids() == pids


def test_a_value_that_does_not_load_where_it_arrives_fails_its_dependent_once() -> None:
    with quick_cluster() as cluster, Client(cluster) as client:
        pids = cluster.worker_pids()
        a, b = sorted(pids)
        value = client.submit(LoadsOnlyWhereMade, workers=[a])
        assert client.submit(made_where, value, workers=[a]).result(timeout=10) == pids[a]
        dependent = client.submit(length, value, workers=[b])
        with pytest.raises(Exception, match=r"(?s)only loads in process.*") as info:
            dependent.result(timeout=30)
        assert "Cannot deserialize the result of task" in str(info.value)
        # fetched once: the holder sent it once, and nobody asks again
        assert client.run(sends_of, value.key, workers=[a]) == {a: 1}
        # the kernel cannot load it either: one clear error, and the workers stay
        with pytest.raises(Exception, match="only loads in process"):
            value.result(timeout=30)
        assert cluster.worker_pids() == pids
        wait_for(lambda: scheduler_workers(cluster) == set(pids), 10, "the same workers")
