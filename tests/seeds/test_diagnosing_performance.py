"""diagnosing-performance.txt: the document's examples, run as written
(``from kernel_cluster import ...`` for ``distributed``'s), and what it says they give.
"""

from __future__ import annotations

import asyncio
import time

import dask
import numpy as np
import pandas as pd
import pytest

from kernel_cluster import (
    Client,
    KernelCluster,
    MemorySampler,
    SchedulerPlugin,
    get_task_stream,
    performance_report,
)
from kernel_cluster.diagnostics.queries.memory_sampler import MEASURES
from kernel_cluster.diagnostics.snapshots import MemorySnapshot
from tests.seeds import recording_backend

TRANSFER_FIELDS = {
    "who", "peer", "start", "stop", "middle", "duration", "bandwidth", "keys", "n_keys",
    "total", "compressed",
}  # fmt: skip


def crunch(n: int) -> int:
    total = 0
    for i in range(n):  # pure Python, so the statistical profiler sees this frame
        total += i % 7
    return total


def two_workers(client: Client) -> tuple[str, str]:
    a, b = sorted(client.scheduler_info()["workers"])
    return a, b


# -- task start and stop times --------------------------------------------------------


def test_each_task_records_start_and_stop_times_of_its_actions(client):
    """ "For each task that passes through a worker we record start and stop times for
    ... dependency gathering from peers ... execution": compute, and a transfer (with
    the worker it came from) for a task whose input lived elsewhere. Times are the
    scheduler's ("All times are intended to be from the scheduler's perspective")."""
    a, b = two_workers(client)
    t0 = time.time()
    with get_task_stream(client) as ts:
        x = client.submit(np.arange, 100_000, workers=[a], pure=False)
        y = client.submit(np.sum, x, workers=[b])
        assert y.result() == np.arange(100_000).sum()
    t1 = time.time()
    by_key = {r["key"]: r for r in ts.data}
    assert set(by_key) == {x.key, y.key}
    for r in ts.data:
        assert r["status"] == "OK" and r["worker"] in (a, b)
        compute = [ss for ss in r["startstops"] if ss["action"] == "compute"]
        assert len(compute) == 1
        # the scheduler's clock, which is this process's: a worker process corrects
        # its own by the offset it estimates (within a second here)
        assert t0 - 1 <= compute[0]["start"] <= compute[0]["stop"] <= t1 + 1
    (transfer,) = [ss for ss in by_key[y.key]["startstops"] if ss["action"] == "transfer"]
    assert transfer["source"] == a and transfer["start"] <= transfer["stop"]


def test_client_get_task_stream_returns_the_records_of_a_window(client, tmp_path):
    """``client.get_task_stream(start=, stop=, count=, plot=)`` as distributed's: the
    records, here of the last ``count`` tasks, with ``plot="save"`` our task-stream
    view written to ``filename`` too; the module-level ``get_task_stream()`` is the
    context manager."""
    futures = client.map(crunch, [1000 + i for i in range(5)])
    client.gather(futures)
    keys = {f.key for f in futures}
    records = client.get_task_stream(start="60s", count=5)
    assert isinstance(records, list) and {r["key"] for r in records} == keys
    assert all(
        {"key", "status", "worker", "thread", "nbytes", "startstops"} <= set(r) for r in records
    )
    assert client.get_task_stream(start=time.time() + 60) == []
    page = tmp_path / "task-stream.html"
    records2, figure = client.get_task_stream(count=5, plot="save", filename=str(page))
    assert records2 == records
    assert page.read_text().count(next(iter(keys))) >= 1 and figure.path == page
    assert "<iframe" in figure._repr_html_()
    with pytest.raises(ValueError, match="plot='save' needs a filename"):
        client.get_task_stream(plot="save", filename="")
    with get_task_stream(client, plot=True) as ts:
        client.submit(crunch, 7).result()
    assert [r["key"] for r in ts.data] == [client.submit(crunch, 7).key]
    assert ts.figure is not None and len(ts.figure.records) == 1


def test_the_old_context_manager_form_still_works_with_a_warning(client):
    with pytest.warns(DeprecationWarning, match="get_task_stream"), client.get_task_stream() as ts:
        client.submit(crunch, 11).result()
    assert len(ts.data) == 1


class StartStops(SchedulerPlugin):
    """ "create a Scheduler plugin. All of this information will be available": each
    task's start and stop times, per action, as it finishes."""

    def __init__(self) -> None:
        self.seen: dict = {}

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory" and "startstops" in kwargs:
            self.seen[key] = (kwargs["worker"], kwargs["startstops"])


def test_a_scheduler_plugin_sees_every_tasks_start_and_stop_times(client):
    a, b = two_workers(client)
    plugin = StartStops()
    name = client.register_plugin(plugin)
    try:
        x = client.submit(np.arange, 50_000, workers=[a], pure=False)
        y = client.submit(np.sum, x, workers=[b])
        assert y.result() == np.arange(50_000).sum()
    finally:
        client.unregister_plugin(name)
    assert set(plugin.seen) >= {x.key, y.key}
    worker, startstops = plugin.seen[y.key]
    assert worker == b
    actions = {ss["action"] for ss in startstops}
    assert {"compute", "transfer"} <= actions, startstops
    for ss in startstops:
        assert ss["start"] <= ss["stop"]


# -- statistical profiling --------------------------------------------------------------


def test_client_profile_gives_the_raw_data_and_writes_a_page(client, tmp_path):
    """ "Users can also query this data directly using the Client.profile function ...
    They can also pass a filename to save the plot as an HTML file"."""
    client.gather(client.map(crunch, [3_000_000, 3_000_001]))
    tree = client.profile(prefix="crunch")
    assert tree["count"] > 0 and tree["children"]
    # the task's own frame is in the tree, under the threads' common stack
    stack = [tree]
    names = set()
    while stack:
        node = stack.pop()
        names.add(
            node["description"]["name"]
            if isinstance(node["description"], dict)
            else str(node["description"])
        )
        stack.extend(node["children"].values())
    assert any("crunch" in n for n in names), sorted(names)[:20]
    page = tmp_path / "profile.html"
    client.profile(filename=str(page))
    assert page.stat().st_size > 1000


def test_profile_interval_and_cycle_come_from_dask_config():
    """ "The 10ms and 1s parameters can be controlled by the profile-interval and
    profile-cycle-interval entries in the config" (``distributed.worker.profile.interval``
    and ``.cycle`` today); ``KernelCluster`` keywords take precedence."""
    with dask.config.set(
        {"distributed.worker.profile.interval": "20ms", "distributed.worker.profile.cycle": "2s"}
    ):
        with KernelCluster(n_workers=1) as cluster, Client(cluster) as client:
            assert (
                client.diagnostics.profile_interval(),
                client.diagnostics.profile_cycle_interval(),
            ) == (0.02, 2.0)
            settings = client.run(lambda dask_worker: dask_worker.config.profile_interval)
            assert list(settings.values()) == [0.02]
        with KernelCluster(n_workers=1, profile_interval=0.05) as cluster:
            assert (
                cluster.worker_config.profile_interval,
                cluster.worker_config.profile_cycle_interval,
            ) == (0.05, 2.0)
    with KernelCluster(n_workers=1) as cluster:  # distributed's defaults are not settings
        assert (
            cluster.worker_config.profile_interval,
            cluster.worker_config.profile_cycle_interval,
        ) == (0.01, 1.0)


def test_worker_saturation_comes_from_dask_config():
    with dask.config.set({"distributed.scheduler.worker-saturation": 2.5}):
        with KernelCluster(n_workers=1) as cluster:
            assert cluster.scheduler.state.worker_saturation == 2.5
        with KernelCluster(n_workers=1, worker_saturation=1.2) as cluster:
            assert cluster.scheduler.state.worker_saturation == 1.2
    with KernelCluster(n_workers=1) as cluster:
        assert cluster.scheduler.state.worker_saturation == 1.5


# -- transfer logs ------------------------------------------------------------------------


def test_transfer_logs_as_the_document_reads_them(client):
    """``client.run(lambda dask_worker: dask_worker.transfer_outgoing_log)`` (and
    incoming): total and compressed bytes, start/stop times, keys moved, the peer,
    with Dask's field names."""
    a, b = two_workers(client)
    x = client.submit(np.arange, 100_000, workers=[a], pure=False)
    y = client.submit(np.sum, x, workers=[b])
    assert y.result() > 0
    outgoing = client.run(lambda dask_worker: list(dask_worker.transfer_outgoing_log))
    incoming = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log))
    (sent,) = [e for e in outgoing[a] if x.key in e["keys"] and e["who"] == b]
    (got,) = [e for e in incoming[b] if x.key in e["keys"]]
    for entry, peer in ((sent, b), (got, a)):
        assert set(entry) == TRANSFER_FIELDS
        assert entry["who"] == entry["peer"] == peer
        assert entry["keys"] == {x.key: entry["total"]}  # key -> bytes, as Dask's
        assert entry["total"] >= 800_000 and entry["compressed"] > 0 and entry["n_keys"] == 1
        assert entry["start"] <= entry["middle"] <= entry["stop"]
        assert entry["middle"] == pytest.approx((entry["start"] + entry["stop"]) / 2)
        assert entry["duration"] == max(0.001, entry["stop"] - entry["start"])
        assert entry["bandwidth"] == pytest.approx(entry["total"] / entry["duration"])


# -- performance reports ----------------------------------------------------------------


def test_performance_report(client, tmp_path, monkeypatch):
    """``with performance_report(filename="dask-report.html"): ...`` as written."""
    monkeypatch.chdir(tmp_path)
    with performance_report(filename="dask-report.html"):
        futures = client.map(crunch, [200_000 + i for i in range(4)])
        client.gather(futures)
    html = (tmp_path / "dask-report.html").read_text()
    assert "<html" in html and futures[0].key in html


# -- memory over time --------------------------------------------------------------------


def hold(n: int) -> np.ndarray:
    return np.ones(n)


def test_memory_sampler_as_written(client):
    """``ms = MemorySampler(); with ms.sample("collection 1"): ...`` twice: a series per
    label, side by side in one table (``align=True``: from each one's start)."""
    ms = MemorySampler()
    with ms.sample("collection 1", interval=0.05):
        first = client.map(hold, [1_000_000] * 4)
        client.gather(first)
    with ms.sample("collection 2", interval=0.05):
        second = client.map(hold, [2_000_000] * 4)
        client.gather(second)
    del first, second
    assert set(ms.samples) == {"collection 1", "collection 2"}
    assert all(len(s) >= 2 for s in ms.samples.values())
    frame = ms.to_pandas()
    assert list(frame.columns) == ["collection 1", "collection 2"]
    assert isinstance(frame.index, pd.DatetimeIndex)
    aligned = ms.to_pandas(align=True)
    assert isinstance(aligned.index, pd.TimedeltaIndex) and aligned.index[0] == pd.Timedelta(0)


def test_to_pandas_forward_fills_between_a_series_samples():
    """Dask's ``to_pandas``: where series interleave, a series' value carries forward
    between its samples (no NaN in the middle), never past its last sample."""
    ms = MemorySampler()
    ms.samples["a"] = [(100.0, 1), (100.4, 3), (101.0, 5)]
    ms.samples["b"] = [(200.0, 10), (200.2, 20)]
    aligned = ms.to_pandas(align=True)
    assert aligned.index.total_seconds().tolist() == [0.0, 0.2, 0.4, 1.0]
    assert aligned["a"].tolist() == [1, 1, 3, 5]  # at 0.2 s: a's value of 0 s
    assert aligned["b"].iloc[:2].tolist() == [10, 20]
    assert aligned["b"].iloc[2:].isna().all()  # b ended at 0.2 s: nothing after
    assert not aligned["a"].isna().any()
    absolute = ms.to_pandas()
    assert absolute["a"].dropna().tolist() == [1, 3, 5]  # far apart: no overlap to fill


def test_plot_resamples_to_a_second_in_gib_and_passes_kwargs_to_pandas(monkeypatch):
    """Dask's ``plot(align=..., **kwargs)``: one point a second (the nearest sample),
    in GiB, labelled as Dask's; ``kind=`` and the rest go to ``DataFrame.plot``."""
    pd.set_option("plotting.backend", "tests.seeds.recording_backend")
    monkeypatch.setattr(recording_backend, "CALLS", [])
    try:
        draw_and_check()
    finally:
        pd.reset_option("plotting.backend")


def draw_and_check() -> None:
    ms = MemorySampler(live=False)
    ms.samples["run"] = [(1000.0 + t / 10, 2**30 * (1 + t // 10)) for t in range(35)]
    assert ms.plot(kind="area", title="memory") == "drawn"
    ((data, kind, kwargs),) = recording_backend.CALLS
    assert kind == "area" and kwargs["title"] == "memory"
    assert kwargs["ylabel"] == "Cluster memory (GiB)" and kwargs["xlabel"] == "time"
    assert data["run"].tolist() == [1.0, 2.0, 3.0, 4.0]  # 3.4 s of samples: 4 seconds
    recording_backend.CALLS.clear()
    ms.samples["short"] = [(5000.0, 2**29), (5000.5, 2**30)]
    ms.samples.pop("run")
    ms.plot()  # within one second: to the millisecond
    ((data, _, _),) = recording_backend.CALLS
    assert len(data) == 501 and data["short"].iloc[0] == 0.5 and data["short"].iloc[-1] == 1.0


def test_every_measure_dask_accepts():
    """``measure=``: each of distributed's MemoryState measures, the same meaning."""
    assert set(MEASURES) == {
        "process", "managed", "managed_total", "unmanaged", "unmanaged_old",
        "unmanaged_recent", "optimistic", "spilled",
    }  # fmt: skip
    m = MemorySnapshot(
        process_bytes=1000,
        managed_bytes=300,
        unmanaged_bytes=700,
        spilled_bytes=50,
        unmanaged_old_bytes=500,
    )
    got = {name: m.measure(name) for name in MEASURES}
    assert got == {
        "process": 1000,
        "managed": 300,
        "managed_total": 350,
        "unmanaged": 700,
        "unmanaged_old": 500,
        "unmanaged_recent": 200,
        "optimistic": 800,
        "spilled": 50,
    }
    with pytest.raises(ValueError, match="measure='rss'"):
        MemorySampler().sample(measure="rss")


def test_sample_every_measure_on_the_cluster(client):
    """``sample(label=None, client=, measure=, interval=)``: a label is made when none
    is given; each measure samples."""
    ms = MemorySampler()
    for measure in MEASURES:
        with ms.sample(client=client, measure=measure, interval=0.05):
            client.gather(client.map(hold, [100_000] * 2, pure=False))
    assert len(ms.samples) == len(MEASURES)
    for series in ms.samples.values():
        assert series and all(nbytes >= 0 for _, nbytes in series)
    process = MemorySampler()
    with process.sample("p", client=client):
        pass
    assert process.samples["p"][-1][1] > 0


def test_memory_sampler_with_an_asynchronous_client():
    """The document's other form: ``client = await Client(asynchronous=True)``,
    ``async with ms.sample("run 1"):`` (the default client: the latest one)."""

    async def main() -> dict:
        client = await Client(asynchronous=True, n_workers=1)
        try:
            ms = MemorySampler()
            async with ms.sample("run 1", interval=0.05):
                await client.gather(client.map(hold, [500_000] * 3))
            async with ms.sample("run 2", interval=0.05):
                await client.gather(client.map(hold, [600_000] * 3))
            return ms.samples
        finally:
            await client.close()

    samples = asyncio.run(main())
    assert set(samples) == {"run 1", "run 2"}
    assert all(len(s) >= 2 and s[-1][1] > 0 for s in samples.values())
