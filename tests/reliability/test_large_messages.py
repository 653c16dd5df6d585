"""Values and errors around the message size limit, with worker processes (issue 17).

The limit is lowered to a few MiB with KERNEL_CLUSTER_MAX_MESSAGE_SIZE (worker
processes inherit it), so the paths a 1 GiB default would only reach with huge
values run in a second. One test sends a real value above 1 GiB.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Iterator

import cloudpickle
import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from kernel_cluster.engine.comm.frames import MAX_MESSAGE_SIZE_ENV

MiB = 1 << 20
LIMIT = 4 * MiB


def make_bytes(n: int, seed: int = 0) -> bytes:
    """Incompressible bytes, so the wire carries all of them."""
    import random

    return random.Random(seed).randbytes(n)


def raise_huge(n: int) -> None:
    raise ValueError("x" * n)


def small(x: int) -> int:
    return x + 1


def total_size(*values: bytes) -> int:
    return sum(len(v) for v in values)


def worker_pids(client: Client) -> set[int]:
    return {w["pid"] for w in client.scheduler_info()["workers"].values()}


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """Two worker processes and a client, all with a 4 MiB message limit (and values
    over the socket: shared memory carries large ones outside any message)."""
    monkeypatch.setenv(MAX_MESSAGE_SIZE_ENV, str(LIMIT))
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = KernelCluster(
        n_workers=2, threads_per_worker=2, processes=True, memory_limit=0, shared_memory_limit=0
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_result_over_the_limit_fails_that_task_only(limited: Client) -> None:
    client = limited
    pids = worker_pids(client)
    big = client.submit(make_bytes, 6 * MiB, pure=False)
    ok = client.submit(small, 1)
    with pytest.raises(Exception, match=r"(?s)6291\d\d\d bytes.*limit.*4194304") as info:
        big.result(timeout=20)
    assert MAX_MESSAGE_SIZE_ENV in str(info.value)  # says how to raise it
    assert ok.result(timeout=10) == 2
    # nothing restarted or recomputed
    assert worker_pids(client) == pids
    assert client.submit(small, 2).result(timeout=10) == 3


def test_a_value_over_the_limit_moves_through_shared_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what travels through /dev/shm is no message: the limit is the socket's
    monkeypatch.setenv(MAX_MESSAGE_SIZE_ENV, str(LIMIT))
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with (
            KernelCluster(
                n_workers=2, threads_per_worker=1, processes=True, memory_limit=0
            ) as cluster,
            Client(cluster) as client,
        ):
            a, b = sorted(client.scheduler_info()["workers"])
            big = client.submit(make_bytes, 6 * MiB, workers=[a], pure=False)
            assert client.submit(len, big, workers=[b]).result(timeout=60) == 6 * MiB
            assert big.result(timeout=60) == make_bytes(6 * MiB)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_gather_of_results_adding_up_past_the_limit(limited: Client) -> None:
    client = limited
    workers = list(client.scheduler_info()["workers"])
    futures = [client.submit(make_bytes, int(1.5 * MiB), i, workers=workers[:1]) for i in range(8)]
    values = client.gather(futures)  # 12 MiB from one worker
    assert [hashlib.sha1(v).digest() for v in values] == [
        hashlib.sha1(make_bytes(int(1.5 * MiB), i)).digest() for i in range(8)
    ]


def test_values_just_under_the_limit_go_one_per_reply(limited: Client) -> None:
    client = limited
    workers = list(client.scheduler_info()["workers"])
    n = LIMIT - 128 * 1024
    futures = [client.submit(make_bytes, n, i, workers=workers[:1]) for i in range(3)]
    assert [len(v) for v in client.gather(futures)] == [n] * 3


def test_dependencies_adding_up_past_the_limit_between_workers(limited: Client) -> None:
    client = limited
    a, b = list(client.scheduler_info()["workers"])
    parts = [client.submit(make_bytes, int(1.5 * MiB), i, workers=[a]) for i in range(6)]
    total = client.submit(total_size, *parts, workers=[b])
    assert total.result(timeout=20) == 6 * int(1.5 * MiB)


def test_dependency_over_the_limit_fails_the_dependent(limited: Client) -> None:
    client = limited
    a, b = list(client.scheduler_info()["workers"])
    big = client.submit(make_bytes, 6 * MiB, workers=[a])
    dependent = client.submit(total_size, big, workers=[b])
    with pytest.raises(Exception, match=r"(?s)bytes.*limit"):
        dependent.result(timeout=20)


def test_error_over_the_limit_fails_the_task(limited: Client) -> None:
    client = limited
    pids = worker_pids(client)
    future = client.submit(raise_huge, 6 * MiB)
    with pytest.raises(Exception, match=r"(?s)ValueError.*bytes.*limit") as info:
        future.result(timeout=20)
    assert len(str(info.value)) < 100_000  # the start of the error, not all of it
    assert client.submit(small, 1).result(timeout=10) == 2
    assert worker_pids(client) == pids


def make_array(n: int):  # type: ignore[no-untyped-def]
    import numpy as np

    return np.random.default_rng(0).integers(0, 1 << 62, n // 8, dtype=np.int64)


def array_digest(a) -> str:  # type: ignore[no-untyped-def]
    return hashlib.sha1(memoryview(a).cast("B")).hexdigest()


def _rss_peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_frame_above_the_prealloc_size_arrives_whole_and_writable() -> None:
    """Frames over 64 MiB are received into a memory map: contiguous, writable."""
    import asyncio
    import mmap

    import numpy as np

    from kernel_cluster.engine.comm import connect, listen, new_secret
    from kernel_cluster.engine.comm.frames import DEFAULT_MAX_PREALLOC

    sent = np.random.default_rng(1).integers(0, 1 << 62, (DEFAULT_MAX_PREALLOC + MiB) // 8)

    async def main() -> object:
        secret = new_secret()
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        async def handler(comm) -> None:  # type: ignore[no-untyped-def]
            got.set_result(await comm.read())

        listener = await listen("tcp://", handler, secret=secret)
        comm = await connect(listener.address, secret=secret)
        await comm.write({"x": sent})
        try:
            return (await asyncio.wait_for(got, 20))["x"]
        finally:
            comm.abort()
            await listener.stop()

    received = asyncio.run(main())
    assert np.array_equal(received, sent)
    assert received.flags.writeable
    base = received
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert isinstance(base, mmap.mmap)


@pytest.mark.slow
@pytest.mark.timeout(600)  # seconds on an idle machine; 1.2 GiB copied, minutes on a busy one
def test_value_above_one_gib_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1.2 GiB array computed in a worker process reaches the kernel whole."""
    monkeypatch.delenv(MAX_MESSAGE_SIZE_ENV, raising=False)
    n = int(1.2 * (1 << 30)) // 8 * 8
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit=0)
    client = Client(cluster)
    try:
        pids = worker_pids(client)
        future = client.submit(make_array, n)
        digest = client.submit(array_digest, future).result(timeout=240)
        t0 = time.perf_counter()
        value = future.result(timeout=240)
        seconds = time.perf_counter() - t0
        assert value.nbytes == n
        assert array_digest(value) == digest
        assert worker_pids(client) == pids
        print(f"\n1.2 GiB gathered in {seconds:.2f} s; kernel peak RSS {_rss_peak_mib():.0f} MiB")
        del value
    finally:
        client.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_task_too_large_to_send_fails(limited: Client) -> None:
    """A task whose arguments are over the limit fails instead of never starting."""
    client = limited
    pids = worker_pids(client)
    future = client.submit(len, make_bytes(6 * MiB))
    with pytest.raises(Exception, match=r"(?s)Task 'len-.*6291\d\d\d bytes.*limit"):
        future.result(timeout=20)
    assert client.submit(small, 1).result(timeout=10) == 2
    assert worker_pids(client) == pids


def test_a_requester_with_a_lower_limit_gets_replies_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker with a higher limit than the kernel keeps its replies under the kernel's."""
    monkeypatch.delenv(MAX_MESSAGE_SIZE_ENV, raising=False)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = KernelCluster(
        n_workers=1, threads_per_worker=2, processes=True, memory_limit=0, shared_memory_limit=0
    )
    client = Client(cluster)
    try:
        pids = worker_pids(client)
        # from here on, the kernel's new comms accept 4 MiB; the worker's, 64 GiB
        monkeypatch.setenv(MAX_MESSAGE_SIZE_ENV, str(LIMIT))
        parts = [client.submit(make_bytes, int(1.5 * MiB), i) for i in range(4)]
        big = client.submit(make_bytes, 6 * MiB)
        assert [len(v) for v in client.gather(parts)] == [int(1.5 * MiB)] * 4
        with pytest.raises(Exception, match=r"(?s)6291\d\d\d bytes.*limit.*4194304"):
            big.result(timeout=20)
        assert worker_pids(client) == pids
    finally:
        client.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_worker_with_a_higher_limit_keeps_its_stream_under_the_schedulers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Limits are exchanged at registration: the stream obeys the lower one."""
    monkeypatch.setenv(MAX_MESSAGE_SIZE_ENV, str(LIMIT))
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = KernelCluster(n_workers=0, processes=True, memory_limit=0)  # 4 MiB scheduler
    client = Client(cluster)
    try:
        monkeypatch.delenv(MAX_MESSAGE_SIZE_ENV)
        cluster.scale(1)  # a worker with the default limit, 64 GiB
        pids = worker_pids(client)
        future = client.submit(raise_huge, 6 * MiB)
        with pytest.raises(Exception, match=r"(?s)ValueError.*bytes.*limit.*4194304"):
            future.result(timeout=20)
        assert client.submit(small, 1).result(timeout=10) == 2
        assert worker_pids(client) == pids
    finally:
        client.close()
        cluster.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
