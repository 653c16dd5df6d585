"""Task stream, scheduler plugins and the memory sampler, on real clusters."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from operator import add

import numpy as np
import pandas as pd
import pytest

from kernel_cluster import Client, KernelCluster, MemorySampler, SchedulerPlugin, get_task_stream
from kernel_cluster.client.futures import wait
from kernel_cluster.engine.task_stream_plugin import TaskStreamPlugin


def inc(x):
    return x + 1


def slow(x):
    time.sleep(0.2)
    return x


def fails(x):
    raise ValueError(x)


@pytest.fixture
def dclient():
    with (
        KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        yield client


def test_ten_maps_and_a_sum_give_exactly_eleven_records(dclient):
    dclient.submit(inc, -1).result()  # before the block: not recorded
    with get_task_stream(dclient) as ts:
        total = dclient.submit(sum, dclient.map(inc, range(10))).result()
    assert total == 55
    assert len(ts.data) == 11
    assert sorted(r["prefix"] for r in ts.data) == ["inc"] * 10 + ["sum"]
    for r in ts.data:
        assert r["status"] == "OK" and r["worker"].startswith("inproc://")
        (compute,) = [ss for ss in r["startstops"] if ss["action"] == "compute"]
        assert compute["start"] <= compute["stop"] <= time.time()
    table = ts.to_pandas()
    assert list(table.prefix).count("inc") == 10


def test_erred_tasks_are_recorded_as_erred(dclient):
    with get_task_stream(dclient) as ts:
        f = dclient.submit(fails, 1)
        g = dclient.submit(inc, f)  # never runs: not in the stream
        with pytest.raises(ValueError):
            g.result()
    assert [(r["prefix"], r["status"]) for r in ts.data] == [("fails", "error")]


def test_two_threads_have_distinct_ids_and_overlap(dclient):
    with get_task_stream(dclient) as ts:
        dclient.gather(dclient.map(slow, [1, 2]))
    a, b = ts.data
    assert a["thread"] != b["thread"]
    ca = next(ss for ss in a["startstops"] if ss["action"] == "compute")
    cb = next(ss for ss in b["startstops"] if ss["action"] == "compute")
    assert max(ca["start"], cb["start"]) < min(ca["stop"], cb["stop"])  # ran side by side


def test_history_is_bounded_and_read_by_time_or_count():
    with (
        KernelCluster(
            n_workers=1, threads_per_worker=1, memory_limit=0, task_stream_length=5
        ) as cluster,
        Client(cluster) as client,
    ):
        client.gather(client.map(inc, range(8)))
        records = client.task_stream()
        assert len(records) == 5
        assert [r["index"] for r in records] == [3, 4, 5, 6, 7]  # only ever grows
        assert len(client.task_stream(count=2)) == 2
        assert client.task_stream(start="1h") == records
        assert client.task_stream(start=time.time() + 60) == []
        with pytest.raises(ValueError, match="duration"):
            client.task_stream(start="ten seconds")


def test_history_is_free_for_the_garbage_collector():
    """Records hold only tuples of strings and numbers, so the cyclic GC stops tracking
    them: a full history costs nothing in the collections made while more tasks run.
    Readers still get dicts with lists."""
    plugin = TaskStreamPlugin()
    t = time.time()
    startstops = [("transfer", t, t + 1.0, "tcp://127.0.0.1:2"), ("compute", t + 1.0, t + 2.0)]
    plugin.transition(
        ("x", 1), "processing", "memory", worker="w", prefix="x", thread=7, startstops=startstops
    )
    for _ in range(3):  # a pass may leave a tuple tracked while a tuple it holds still is
        gc.collect()
    assert not gc.is_tracked(plugin.buffer[0])
    (record,) = plugin.since(0)
    assert record["startstops"] == [
        {"action": "transfer", "start": t, "stop": t + 1.0, "source": "tcp://127.0.0.1:2"},
        {"action": "compute", "start": t + 1.0, "stop": t + 2.0},
    ]
    assert (record["key"], record["worker"], record["thread"], record["status"]) == (
        ("x", 1),
        "w",
        7,
        "OK",
    )


def test_transfers_and_disk_are_in_the_stream():
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        x = client.submit(np.arange, 100_000, workers=[a])
        x.result()
        with get_task_stream(client) as ts:
            assert client.submit(np.sum, x, workers=[b]).result() == np.arange(100_000).sum()
        (record,) = ts.data
        transfer = next(ss for ss in record["startstops"] if ss["action"] == "transfer")
        assert transfer["source"] == a and transfer["start"] <= transfer["stop"]
    with KernelCluster(n_workers=1, threads_per_worker=1, memory_limit="20 MB") as cluster, \
            Client(cluster) as client:  # fmt: skip
        with get_task_stream(client) as ts:
            arrays = client.map(np.ones, [1_000_000] * 6, pure=False)
            wait(arrays)  # all made (most spilled) before they are read back
            client.gather(client.map(np.sum, arrays))
        actions = {ss["action"] for r in ts.data for ss in r["startstops"]}
        assert {"compute", "disk-write", "disk-read"} <= actions


class Recorder(SchedulerPlugin):
    def __init__(self):
        self.calls = []

    def start(self, scheduler):
        self.calls.append(("start",))

    def update_graph(self, scheduler, *, client, keys, **kw):
        self.calls.append(("update_graph", tuple(keys)))

    def transition(self, key, start, finish, *args, **kw):
        self.calls.append(("transition", key, start, finish, kw.get("worker")))

    def add_worker(self, scheduler, worker):
        self.calls.append(("add_worker", worker))

    def remove_worker(self, scheduler, worker):
        self.calls.append(("remove_worker", worker))

    def close(self):
        self.calls.append(("close",))


def test_plugin_hooks_see_graphs_transitions_and_workers():
    plugin = Recorder()
    with KernelCluster(n_workers=1, threads_per_worker=1) as cluster:
        with Client(cluster) as client:
            name = client.register_plugin(plugin)
            assert client.submit(inc, 1, key="one").result() == 2
            cluster.scale(2)
            cluster.scale(1)
            client.unregister_plugin(name)
            client.submit(inc, 2).result()
        cluster.loop_thread.run(lambda: cluster.scheduler.register_plugin(plugin))
    kinds = [c[0] for c in plugin.calls]
    assert kinds[0] == "start"
    assert ("update_graph", ("one",)) in plugin.calls
    finished = [c for c in plugin.calls if c[0] == "transition" and c[3] == "memory"]
    assert finished[0][1] == "one" and finished[0][4].startswith("inproc://")
    assert "add_worker" in kinds and "remove_worker" in kinds
    assert kinds[-1] == "close"
    # nothing after unregistering, until registered again
    after = plugin.calls.index(("remove_worker", finished[0][4].rsplit("-", 1)[0] + "-1"))
    assert all(c[0] != "transition" for c in plugin.calls[after + 1 :])


class Broken(SchedulerPlugin):
    def transition(self, key, start, finish, *args, **kw):
        raise RuntimeError("plugin bug")


def test_a_raising_plugin_is_logged_and_disabled(dclient, caplog):
    with caplog.at_level(logging.ERROR, logger="kernel_cluster.engine.plugins"):
        dclient.register_plugin(Broken(), name="broken")
        assert dclient.submit(inc, 1).result() == 2
        assert dclient.gather(dclient.map(inc, range(5))) == [1, 2, 3, 4, 5]
    assert "broken" in caplog.text and "disabled" in caplog.text
    assert "broken" not in dclient.cluster.scheduler.plugins.plugins


def test_memory_sampler_managed_rises_to_the_data_held(dclient):
    ms = MemorySampler()
    with ms.sample("empty", measure="managed", interval=0.05):
        pass
    assert len(ms.samples["empty"]) >= 1
    with ms.sample("held", measure="managed", interval=0.05):
        arrays = dclient.map(np.ones, [1_000_000] * 4, pure=False)  # 32 MB
        dclient.gather(arrays)
        time.sleep(0.2)  # let the sampler see the data held for a moment
    values = [v for _, v in ms.samples["held"]]
    assert values[0] == 0
    assert max(values) == pytest.approx(32_000_000, rel=0.05)
    frame = ms.to_pandas()
    assert isinstance(frame.index, pd.DatetimeIndex) and set(frame) == {"empty", "held"}
    aligned = ms.to_pandas(align=True)
    assert isinstance(aligned.index, pd.TimedeltaIndex)
    assert aligned.index[0] == pd.Timedelta(0)
    # the short series has no values after its own end
    assert aligned["empty"].dropna().index.max() <= aligned["held"].dropna().index.max()
    with pytest.raises(ValueError, match="measure"):
        ms.sample(measure="swap")


def test_memory_sampler_async_and_process_measure(dclient):
    ms = MemorySampler()

    async def run():
        async with ms.sample("async", interval=0.05):
            await asyncio.sleep(0.15)

    asyncio.run(run())
    assert len(ms.samples["async"]) >= 2
    assert all(v > 10_000_000 for _, v in ms.samples["async"])  # a whole process


def test_sampler_uses_the_latest_client_by_default(dclient):
    ms = MemorySampler()
    with ms.sample(measure="process", interval=0.05):
        threading.Event().wait(0.06)
    (label,) = ms.samples
    assert label.startswith("sample-") and ms.samples[label]


def test_dict_graph_and_stream_agree(dclient):
    with get_task_stream(dclient) as ts:
        assert dclient.get({"a": (add, 1, 2), "b": (add, "a", 3)}, "b") == 6
    assert sorted(r["key"] for r in ts.data) == ["a", "b"]
