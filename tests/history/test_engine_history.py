"""The run history on a real cluster: what a run stores, and a comparison that finds
the function made slower, embedded and with worker processes, and on an attached
Dask cluster."""

from __future__ import annotations

import sqlite3
import sys
import time
import uuid

import cloudpickle
import pytest

import kernel_cluster
from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.history import recorder as recorders
from tests.engine.helpers import assert_nothing_left, running_now, wait_for

TASKS = 6
SLOW = 0.06  # seconds of sleep, or of CPU, added to each parse task


def load(i: int) -> list[int]:
    return list(range(1000 + i))


def parse(xs: list[int], how: str = "") -> int:
    if how == "sleep":
        time.sleep(SLOW)
    elif how == "cpu":
        end = time.thread_time() + SLOW
        while time.thread_time() < end:
            pass
    return sum(xs)


def combine(parts: list[int]) -> int:
    return sum(parts)


def workload(client, tag: str, how: str = "") -> str:
    with span(tag) as span_id:
        loaded = client.map(load, range(TASKS), pure=False)
        parsed = client.map(parse, loaded, how=how, pure=False)
        assert client.submit(combine, parsed, pure=False).result() > 0
    return span_id


@pytest.fixture(params=[False, True], ids=["embedded", "processes"])
def cluster(request, history_file):
    """One worker thread: the slower parse shows as its own activity, not as the
    GIL contention of a neighbour."""
    before = running_now()
    module = sys.modules[__name__]
    if request.param:
        cloudpickle.register_pickle_by_value(module)
    c = KernelCluster(n_workers=1, threads_per_worker=1, processes=request.param)
    try:
        yield c
    finally:
        c.close()
        if request.param:
            cloudpickle.unregister_pickle_by_value(module)
    assert_nothing_left(before)


@pytest.mark.parametrize(("how", "activity"), [("sleep", "thread-noncpu"), ("cpu", "thread-cpu")])
def test_compare_ranks_the_slower_function_and_its_activity_first(cluster, how, activity):
    tag = f"wl-{uuid.uuid4().hex[:6]}"
    with Client(cluster, set_as_default=False) as client:
        baseline = workload(client, tag)
        slower = workload(client, tag, how)
        # the baseline from the history (the latest stored other than b), b live
        table = client.compare(f"{tag}@-1", tag)
        assert table.attrs["a"]["id"] == baseline and table.attrs["a"]["where"] == "history"
        assert table.attrs["b"]["id"] == slower and table.attrs["b"]["where"] == "live"
        assert table.iloc[0].function == "parse", table.head()
        # On a busy machine a task burning CPU is also taken off the CPU by the OS, and
        # that time is thread-noncpu: it can outgrow thread-cpu. So the CPU case is
        # ranked among what the task did itself (everything but thread-noncpu).
        own = table if how == "sleep" else table[table.activity != "thread-noncpu"]
        top = own.iloc[0]
        assert (top.function, top.activity) == ("parse", activity), table.head()
        assert top.delta > TASKS * SLOW * 0.8
        assert top.a_tasks == top.b_tasks == TASKS
        verdict = table.attrs["verdict"]
        assert verdict.startswith("wall +") and f"`parse` {activity} +" in verdict
        assert verdict.index("`parse`") == verdict.index(": ") + 2  # named first
        # the same two, both by id, both stored once the cluster has written them
        # without a client (this one is not the default): both from the history
        both = kernel_cluster.compare(baseline, slower)
        assert both.attrs["a"]["where"] == both.attrs["b"]["where"] == "history"
        assert both.iloc[0].function == "parse"


def test_every_finished_span_is_stored_with_its_context(cluster, history_file):
    tag = f"ctx-{uuid.uuid4().hex[:6]}"
    with Client(cluster, set_as_default=False) as client:
        with span(tag) as outer, span("inner") as inner:
            client.gather(client.map(parse, [[1, 2]] * 3, pure=False))
        assert client.submit(combine, [1], pure=False).result() == 1  # a default span
        recorder = recorders.recorder_of(cluster)
        assert recorder is not None and recorder.flush()
    runs = kernel_cluster.history()
    mine = runs[runs.id == outer].iloc[0]
    assert mine["name"] == tag and mine.tasks == 3 and mine.wall > 0
    assert mine.cluster == cluster.name and mine.workers == 1 and mine.threads == 1
    assert mine.kind == ("processes" if cluster.processes else "embedded")
    assert "default" in set(runs.name)
    stored = kernel_cluster.history.load(f"{tag} / inner")
    assert stored.id == inner and stored.root == outer and stored.parent == outer
    # memory, or forgotten once the gathered futures went: 3 tasks either way
    assert sum(stored.prefixes["parse"]["states"].values()) == 3
    assert stored.context["versions"]["kernel-cluster"] == kernel_cluster.__version__
    frame = stored.fine_metrics(unit=None)
    assert frame[(frame.activity == "tasks")].value.sum() == 3
    conn = sqlite3.connect(history_file)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_the_last_spans_are_written_when_the_cluster_closes(history_file):
    before = running_now()
    cluster = KernelCluster(n_workers=1, threads_per_worker=2)
    client = Client(cluster, set_as_default=False)
    recorder = recorders.recorder_of(cluster)
    assert recorder is not None
    with span("last") as last:
        client.gather(client.map(parse, [[1]] * 4, pure=False))
    cluster.close()  # at once: the recorder has not looked yet
    client.close()
    assert recorder.closed and recorders.recorder_of(cluster) is None
    assert kernel_cluster.history.load("last").id == last
    assert_nothing_left(before)  # the recorder's thread is gone with the cluster


def test_history_false_records_nothing(history_file):
    cluster = KernelCluster(n_workers=1, threads_per_worker=1, history=False)
    try:
        with Client(cluster, set_as_default=False) as client:
            assert recorders.recorder_of(cluster) is None
            with span("unrecorded"):
                client.submit(parse, [1], pure=False).result()
    finally:
        cluster.close()
    assert not history_file.exists()
    with pytest.raises(TypeError, match="history='no'"):
        KernelCluster(n_workers=0, history="no")  # type: ignore[arg-type]


def test_kernel_cluster_history_off_starts_no_recorder(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNEL_CLUSTER_HISTORY", "off")
    before = running_now()
    cluster = KernelCluster(n_workers=1, threads_per_worker=1)
    try:
        with Client(cluster, set_as_default=False) as client:
            assert recorders.recorder_of(cluster) is None
            assert client.submit(parse, [1], pure=False).result() == 1
            with pytest.raises(ValueError, match="history is off"):
                kernel_cluster.history()
    finally:
        cluster.close()
    assert_nothing_left(before)


@pytest.mark.parametrize(("how", "activity"), [("sleep", "thread-noncpu"), ("cpu", "thread-cpu")])
def test_an_attached_dask_cluster_is_recorded_and_compared(history_file, how, activity):
    pytest.importorskip("distributed")
    from distributed import Client as DaskClient
    from distributed import LocalCluster

    from kernel_cluster.diagnostics.attach import _default_source, set_default_source

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    previous = _default_source
    tag = f"dask-{uuid.uuid4().hex[:6]}"
    try:
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
            ) as lc,
            DaskClient(lc) as dask_client,
        ):
            source = kernel_cluster.attach(dask_client)
            recorder = recorders.recorder_of(source)
            assert recorder is not None
            baseline = workload(dask_client, tag)
            # Dask files tasks under the span of their function's earlier tasks while
            # those are held: let the scheduler forget the first run's tasks first
            wait_for(lambda: dask_client.run_on_scheduler(_held) == 0)
            slower = workload(dask_client, tag, how)
            table = kernel_cluster.compare(baseline, slower, client=dask_client)
            assert table.iloc[0].function == "parse", table.head()
            # as on the engine: the CPU case ranked among what the task did itself
            own = table if how == "sleep" else table[table.activity != "thread-noncpu"]
            top = own.iloc[0]
            assert (top.function, top.activity) == ("parse", activity), table.head()
            assert table.attrs["a"]["where"] == table.attrs["b"]["where"] == "live"
            # the Dask runs are stored too, and compare from the history alone
            wait_for(lambda: recorder.flush() and len(kernel_cluster.history(name=tag)) == 2)
            stored = kernel_cluster.compare(f"{tag}@-2", f"{tag}@-1")
            assert stored.attrs["a"]["id"] == baseline and stored.attrs["b"]["id"] == slower
            assert stored.iloc[0].function == "parse"
            runs = kernel_cluster.history(name=tag)
            assert set(runs.kind) == {"dask"} and runs.tasks.tolist() == [2 * TASKS + 1] * 2
    finally:
        set_default_source(previous)
        cloudpickle.unregister_pickle_by_value(module)


def _held(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)
