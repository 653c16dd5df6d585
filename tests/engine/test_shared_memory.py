"""Large values through /dev/shm: intact, on the mapping, and never left behind.

The module alone first (a sender and a reader in this process), then real worker
processes: values between them and to the kernel's gather, segments gone after
release, close and SIGKILL of either end, and the socket when shared memory is short.
"""

from __future__ import annotations

import gc
import hashlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from kernel_cluster import Client, KernelCluster
from kernel_cluster.engine.shared_memory import (
    DIRECTORY,
    PREFIX,
    SharedMemory,
    SharedValue,
    sweep_stale_segments,
)
from kernel_cluster.engine.tcp_workers import ConnectionPool
from kernel_cluster.engine.wire import GetData
from tests.engine.helpers import wait_for

pytestmark = pytest.mark.skipif(
    not SharedMemory().identity, reason="no usable /dev/shm on this machine"
)

MB = 1 << 20


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def arrays() -> dict[str, np.ndarray]:
    """Arrays whose dtype, strides and flags must cross as they are."""
    rng = np.random.default_rng(0)
    return {
        "float64": rng.random(300_000),
        "fortran int32": np.asfortranarray(rng.integers(0, 9, (1000, 600), dtype="i4")),
        "read-only complex": _read_only(rng.random(200_000) + 1j),
        "zeros (compressible)": np.zeros(2_000_000),
        "read-only zeros": _read_only(np.zeros(2_000_000)),
        "structured": np.zeros(100_000, dtype=[("a", "i8"), ("b", "f4"), ("c", "S5")]),
        "datetime64": np.arange(300_000).astype("datetime64[s]"),
        "bool 3-d": rng.random((100, 100, 120)) > 0.5,
    }


def describe(x: np.ndarray) -> tuple:
    return (x.dtype, x.shape, x.strides, x.flags.writeable, x.flags.f_contiguous)


def on_shared_mapping(x: np.ndarray) -> bool:
    """Whether ``x``'s memory lies in a mapping of a segment (in this process)."""
    address = x.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            if DIRECTORY + "/" + PREFIX in line:
                low, high = (int(v, 16) for v in line.split()[0].split("-"))
                if low <= address < high:
                    return True
    return False


def mapped_segments(pid: int | str = "self") -> set[str]:
    """The segments mapped in process ``pid``: their paths, "(deleted)" (claimed)."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if DIRECTORY + "/" + PREFIX in line}


def mapping_of(x: np.ndarray) -> str:
    """The segment ``x`` lies on, in this process."""
    address = x.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            if DIRECTORY + "/" + PREFIX in line:
                low, high = (int(v, 16) for v in line.split()[0].split("-"))
                if low <= address < high:
                    return line.split(None, 5)[5].strip()
    raise AssertionError("not on a segment")


def segment_files(pid: int) -> list[str]:
    return [n for n in os.listdir(DIRECTORY) if n.startswith(f"{PREFIX}{pid}-")]


# -- the module alone ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(arrays()))
def test_an_array_crosses_intact_onto_the_mapping(name):
    sender, reader = SharedMemory(), SharedMemory(0)
    a = arrays()[name]
    shared = sender.export(a, reader.identity, a.nbytes)
    assert isinstance(shared, SharedValue) and shared.segment
    out = reader.claim(shared).value()
    assert describe(out) == describe(a)
    np.testing.assert_array_equal(out, a)
    # no copy: the array reads the segment (numpy pickles datetimes in the pickle's
    # bytes, which go in the segment too, and are copied out of it)
    assert on_shared_mapping(out) == (a.dtype.kind != "M")
    sender.close()


def test_other_values_cross_intact():
    sender, reader = SharedMemory(), SharedMemory(0)
    df = pd.DataFrame({"x": np.arange(200_000), "y": np.random.default_rng(1).random(200_000)})
    values = [
        df,
        b"\x01" * (3 * MB),  # in the pickle itself: copied out once
        bytearray(b"\x02" * (2 * MB)),
        [np.ones(200_000), {"k": np.arange(200_000)}, "text"],
        list(range(300_000)),  # no buffer: the pickle goes in the segment
    ]
    for value in values:
        shared = sender.export(value, reader.identity, 10 * MB)
        assert shared is not None and shared.segment
        out = reader.claim(shared).value()
        assert type(out) is type(value)
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(out, value)
        elif isinstance(value, list) and isinstance(value[0], np.ndarray):
            np.testing.assert_array_equal(out[0], value[0])
            np.testing.assert_array_equal(out[1]["k"], value[1]["k"])
            assert out[2] == "text"
        else:
            assert out == value
    sender.close()


def test_a_claimed_segment_loses_its_name_and_goes_with_its_last_holder():
    sender, reader = SharedMemory(), SharedMemory(0)
    a = np.random.default_rng(2).random(MB)
    shared = sender.export(a, reader.identity, a.nbytes)
    path = os.path.join(DIRECTORY, shared.segment)
    assert os.path.exists(path) and sender.held >= a.nbytes
    out = reader.claim(shared).value()
    assert not os.path.exists(path)  # unlinked as it was mapped
    mapping = mapping_of(out)
    assert mapping == path + " (deleted)"
    view = out[::2]  # a view holds the mapping too
    del out
    gc.collect()
    assert reader.claimed >= a.nbytes and mapping in mapped_segments()
    del view
    gc.collect()
    assert reader.claimed == 0 and mapping not in mapped_segments()
    sender.release("the reader's connection")  # nothing was sent on it: nothing to do
    sender.close()
    assert sender.held == 0


def test_release_and_close_remove_what_was_not_claimed():
    sender = SharedMemory()
    a = np.ones(MB)
    first = sender.export(a, sender.identity, a.nbytes)
    second = sender.export(a, sender.identity, a.nbytes)
    sender.sent("conn", [first])
    sender.release("conn")
    assert not os.path.exists(os.path.join(DIRECTORY, first.segment))
    assert os.path.exists(os.path.join(DIRECTORY, second.segment))
    sender.close()
    assert not os.path.exists(os.path.join(DIRECTORY, second.segment))
    assert sender.held == 0 and sender.export(a, sender.identity, a.nbytes) is None


def test_small_values_other_readers_and_a_limit_take_the_socket():
    sender = SharedMemory(limit=4 * MB)
    a = np.ones(2 * MB // 8)
    assert sender.export(np.ones(100), sender.identity, 800) is None  # small
    assert sender.export(a, "another machine", a.nbytes) is None
    kept = sender.export(a, sender.identity, a.nbytes)
    assert kept is not None and kept.segment
    assert sender.export(np.ones(3 * MB // 8), sender.identity, 3 * MB) is None  # 2 + 3 > 4
    assert sender.fallbacks == {"limit": 1}
    assert SharedMemory(limit=0).export(a, sender.identity, a.nbytes) is None
    sender.close()


def test_the_sweep_removes_segments_of_dead_processes_only(tmp_path):
    # a real process makes a segment and dies without removing it
    script = textwrap.dedent(
        f"""
        import os, numpy as np
        from kernel_cluster.engine.shared_memory import SharedMemory
        s = SharedMemory(directory={str(tmp_path)!r})
        v = s.export(np.ones(1 << 18), s.identity, 1 << 21)
        print(v.segment, flush=True)
        os._exit(0)
        """
    )
    dead = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    mine = SharedMemory(directory=str(tmp_path))
    live = mine.export(np.ones(1 << 18), mine.identity, 1 << 21)
    assert sorted(os.listdir(tmp_path)) == sorted([dead, live.segment])
    assert sweep_stale_segments(str(tmp_path)) == [dead]
    assert os.listdir(tmp_path) == [live.segment]
    mine.close()


# -- worker processes ------------------------------------------------------------------


def make(name: str) -> np.ndarray:
    return arrays()[name]


def checksum(x: np.ndarray) -> str:
    return hashlib.sha1(x.tobytes()).hexdigest()


def received(x: np.ndarray) -> tuple:
    return (*describe(x), checksum(x), on_shared_mapping(x))


@pytest.fixture(scope="module")
def pcluster():
    with KernelCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit=0
    ) as cluster:
        yield cluster


@pytest.fixture
def pclient(pcluster):
    with Client(pcluster) as client:
        yield client


def totals(client: Client, worker: str) -> dict:
    return client.run(lambda dask_worker: dict(dask_worker.digests_total), workers=[worker])[worker]


def test_arrays_cross_between_worker_processes_intact_through_shared_memory(pclient):
    a, b = sorted(pclient.scheduler_info()["workers"])
    for name, expected in arrays().items():
        x = pclient.submit(make, name, workers=[a], pure=False)
        got = pclient.submit(received, x, workers=[b], pure=False).result()
        on_mapping = expected.dtype.kind != "M"
        assert got == (*describe(expected), checksum(expected), on_mapping), name
    # the path each side took, in its fine metrics
    assert totals(pclient, b)[("gather-dep", "shared-memory", "bytes")] >= 8 * MB
    assert totals(pclient, a)[("get-data", "shared-memory", "bytes")] >= 8 * MB


def test_gather_to_the_kernel_maps_the_value(pclient):
    a, _ = sorted(pclient.scheduler_info()["workers"])
    for name in ("fortran int32", "read-only zeros"):
        out = pclient.submit(make, name, workers=[a], pure=False).result()
        assert describe(out) == describe(arrays()[name])
        np.testing.assert_array_equal(out, arrays()[name])
        assert on_shared_mapping(out)


def test_segments_go_once_released_and_with_the_cluster():
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        pids = {w: info["pid"] for w, info in client.scheduler_info()["workers"].items()}
        xs = [client.submit(make, "float64", workers=[a], pure=False) for _ in range(4)]
        ys = [client.submit(received, x, workers=[b], pure=False) for x in xs]
        assert all(y.result()[-1] for y in ys)  # held on b, on mappings
        assert len(mapped_segments(pids[b])) == 4
        kept = xs[0].result()  # the kernel holds one
        mapping = mapping_of(kept)
        del xs, ys
        wait_for(lambda: not mapped_segments(pids[b]), what="b's mappings gone")
        assert all(not segment_files(pid) for pid in pids.values())
        assert mapping in mapped_segments()  # the kernel's value is the kernel's
        del kept
        gc.collect()
        assert mapping not in mapped_segments()
    assert all(not segment_files(pid) for pid in pids.values())


async def _ask_without_claiming(pool: ConnectionPool, worker: str, key: str) -> str:
    reply = await pool.rpc(worker, GetData([key], who="test", shm=SharedMemory().identity))
    return reply.data[key].segment


def test_a_sender_killed_before_the_reader_claimed_leaves_no_segment():
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        ((a, info),) = client.scheduler_info()["workers"].items()
        x = client.submit(make, "float64", workers=[a], pure=False)
        client.submit(len, x, workers=[a]).result()
        pool = ConnectionPool(cluster.secret)
        try:
            segment = cluster.loop_thread.run(_ask_without_claiming, pool, a, x.key)
            path = os.path.join(DIRECTORY, segment)
            assert os.path.exists(path)  # the connection is open: it may be claimed yet
            os.kill(info["pid"], signal.SIGKILL)
            wait_for(lambda: not os.path.exists(path), what="the nanny removing it")
        finally:
            cluster.loop_thread.run(pool.close)


_READER = """
import asyncio, os, sys
from kernel_cluster.engine.shared_memory import SharedMemory
from kernel_cluster.engine.tcp_workers import ConnectionPool
from kernel_cluster.engine.wire import GetData

async def main():
    pool = ConnectionPool(bytes.fromhex(os.environ["SECRET"]))
    key = sys.argv[2]
    reply = await pool.rpc(sys.argv[1], GetData([key], who="reader", shm=SharedMemory().identity))
    print(reply.data[key].segment, flush=True)
    await asyncio.sleep(600)  # holds the connection, claims nothing, until killed

asyncio.run(main())
"""


def test_a_reader_killed_before_it_claimed_leaves_no_segment():
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        ((a, _),) = client.scheduler_info()["workers"].items()
        x = client.submit(make, "float64", workers=[a], pure=False)
        client.submit(len, x, workers=[a]).result()
        env = {**os.environ, "SECRET": cluster.secret.hex()}
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, a, x.key], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            path = os.path.join(DIRECTORY, reader.stdout.readline().strip())
            assert os.path.exists(path)
            reader.send_signal(signal.SIGKILL)
            reader.wait(30)
            wait_for(lambda: not os.path.exists(path), what="the sender removing it")
        finally:
            reader.kill()
            reader.wait(30)
        # and the value is still there for a reader that claims it
        np.testing.assert_array_equal(x.result(), arrays()["float64"])


def test_short_shared_memory_falls_back_to_the_socket_losing_nothing():
    # a limit under the value's size: what a /dev/shm too small for it does
    with (
        KernelCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=0,
            shared_memory_limit=MB,
        ) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        for name, expected in arrays().items():
            x = client.submit(make, name, workers=[a], pure=False)
            dtype, shape, strides, _, f_contiguous, digest, mapped = client.submit(
                received, x, workers=[b], pure=False
            ).result()
            # (the socket's read-only flags are its own: lz4 gives read-only arrays)
            want = describe(expected)
            assert (dtype, shape, strides, f_contiguous) == (*want[:3], want[4])
            assert digest == checksum(expected) and not mapped
            np.testing.assert_array_equal(x.result(), expected)  # the kernel's gather too
        sent = [totals(client, a), totals(client, b)]  # b may serve the kernel's gathers
        fallbacks = sum(t.get(("get-data", "shared-memory-fallback", "count"), 0) for t in sent)
        assert fallbacks >= 2 * len(arrays())
        assert all(("get-data", "shared-memory", "bytes") not in t for t in sent)
        assert totals(client, b)[("gather-dep", "network", "bytes")] >= 8 * MB
        assert ("gather-dep", "shared-memory", "bytes") not in totals(client, b)
