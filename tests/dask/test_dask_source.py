"""The views on a Dask distributed cluster: every one of them takes a distributed.Client.

Two real clusters: a ``LocalCluster`` with two worker processes (module-scoped), and
one started from the command line (``dask scheduler`` and two ``dask worker``
processes on 127.0.0.1, in ``test_cli.py``). Here: the widgets (their messages
decoded as the browser would), progress, the memory sampler, performance_report,
``attach`` and ``span``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator

import cloudpickle
import pytest

pytest.importorskip("distributed")
pytest.importorskip("anywidget")

from distributed import Client as DaskClient
from distributed import LocalCluster

import kernel_cluster
from kernel_cluster import MemorySampler, performance_report, span
from kernel_cluster.diagnostics import attach as source_module
from kernel_cluster.diagnostics.attach import source_of, watch_default_source
from kernel_cluster.diagnostics.source import DiagnosticsSource
from kernel_cluster.diagnostics.sources import dask_plugin
from kernel_cluster.diagnostics.sources.dask_source import DaskSource, SchedulerUnreachable
from kernel_cluster.jupyter import lab
from kernel_cluster.jupyter.widgets import (
    FineMetrics,
    ProfileFlameGraph,
    SpanTree,
    TaskStream,
    dashboard,
)
from tests.engine.helpers import wait_for
from tests.views.test_publisher import Browser
from tests.views.test_report import report_data, report_sections


def slow_inc(x: int) -> int:
    time.sleep(0.02)
    return x + 1


# Dask puts a task in the span of its TaskGroup (named after its function) while that
# group lives: each test gets its own functions so that no group outlives a test into
# the next one's spans
def live_inc(x: int) -> int:
    return slow_inc(x)


def progress_inc(x: int) -> int:
    return slow_inc(x)


def memory_inc(x: int) -> int:
    return slow_inc(x)


def attached_inc(x: int) -> int:
    return slow_inc(x)


def fold_inc(x: int) -> int:
    return slow_inc(x)


def report_crunch(x: int) -> int:
    return crunch(x)


def crunch(x: int) -> int:
    total = 0
    for i in range(300_000):  # pure Python: the profiler sees it
        total += i * x
    return total


@pytest.fixture(scope="module")
def dask_client() -> Iterator[DaskClient]:
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # workers need not import tests
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
    )
    try:
        with DaskClient(cluster) as client:
            yield client
    finally:
        cluster.close()
        cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture
def restore_default() -> Iterator[None]:
    previous = source_module._default_source
    yield
    source_module.set_default_source(previous)


def capture(widget) -> Browser:
    browser = Browser()
    widget.publisher._send = browser
    return browser


def test_importing_kernel_cluster_imports_no_dask() -> None:
    code = "import sys, kernel_cluster; "
    code += "sys.exit('distributed' in sys.modules or 'dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_one_source_per_client(dask_client) -> None:
    source = source_of(dask_client)
    assert isinstance(source, DaskSource) and isinstance(source, DiagnosticsSource)
    assert source_of(dask_client) is source
    assert source.kind == "processes"
    assert "DaskSource" in repr(source) and dask_client.scheduler.address in repr(source)


def test_fine_metrics_span_tree_and_dashboard(dask_client) -> None:
    source = source_of(dask_client)  # counts tasks from here on (its plugin is installed)
    with span("widgets") as span_id:
        futures = dask_client.map(slow_inc, range(8))  # held: Dask counts held tasks only
        dask_client.gather(futures)
    source.fine_metrics()  # the workers' heartbeats are in
    metrics = FineMetrics(dask_client, autostart=False)
    tree = SpanTree(dask_client, autostart=False)
    board = dashboard(dask_client, autostart=False)
    try:
        browsers = [capture(w) for w in (metrics, tree, board)]
        assert all(w.update(force=True) for w in (metrics, tree, board))
        seen = browsers[0].metrics.as_dict()
        assert seen[("execute", span_id, "slow_inc", "tasks", "count")] == 8
        assert seen[("execute", span_id, "slow_inc", "thread-noncpu", "seconds")] >= 0.1
        assert browsers[1].spans.records[span_id]["name"] == ["widgets"]
        assert browsers[2].progress.records["slow_inc"]["memory"] == 8
    finally:
        for w in (metrics, tree, board):
            w.close()
        del futures


def table_inc(x: int) -> int:
    return slow_inc(x)


def test_the_fine_metrics_table_of_a_dask_client_without_widgets(dask_client) -> None:
    """``kernel_cluster.fine_metrics(dask_client)``: the widgets' numbers as the
    DataFrame ``client.fine_metrics()`` gives, with its ``unit`` and ``span``."""
    kernel_cluster.fine_metrics(dask_client)  # attaches: tasks are counted from here on
    with span("table"):
        futures = dask_client.map(table_inc, range(4))
        dask_client.gather(futures)

    def of_table(frame):
        return frame[frame.function == "table_inc"]

    def counted() -> bool:
        counts = of_table(kernel_cluster.fine_metrics(dask_client, unit="count", span="table"))
        return counts[counts.activity == "tasks"].value.sum() == 4

    wait_for(counted, 15, "the workers' heartbeats")
    seconds = of_table(kernel_cluster.fine_metrics(dask_client))  # seconds by default
    assert set(seconds.unit) == {"seconds"} and seconds.value.sum() >= 4 * 0.02
    every_unit = kernel_cluster.fine_metrics(dask_client, unit=None)
    assert {"seconds", "count"} <= set(every_unit.unit)
    del futures


def test_live_widget_keeps_up_with_new_work(dask_client) -> None:
    w = FineMetrics(dask_client, interval=0.25)
    browser = capture(w)
    try:
        with span("live") as span_id:
            futures = dask_client.map(live_inc, range(100, 104))
            dask_client.gather(futures)
        key = ("execute", span_id, "live_inc", "tasks", "count")
        wait_for(lambda: browser.metrics.as_dict().get(key) == 4, 15, "the widget's update")
        assert w.updating
    finally:
        w.close()


def test_task_stream_and_flame_graph(dask_client) -> None:
    stream = TaskStream(dask_client, autostart=False)
    flame = ProfileFlameGraph(dask_client, autostart=False)
    try:
        streamed, profiled = capture(stream), capture(flame)
        stream.update(force=True)
        before = len(streamed.tasks.keys)
        dask_client.gather(dask_client.map(crunch, range(6)))
        wait_for(lambda: stream.update(force=True) and len(streamed.tasks.keys) >= before + 6, 10)
        assert "crunch" in {t["prefix"] for t in streamed.tasks.tasks}
        # the flame graph reads the workers' profiles (sampled every 10 ms: give it time)
        wait_for(
            lambda: flame.update(force=True) and (profiled.profile.tree or {}).get("count", 0) > 0,
            10,
            "a profile",
        )
    finally:
        stream.close()
        flame.close()


def test_progress_as_text(dask_client) -> None:
    futures = dask_client.map(progress_inc, range(200, 210))
    # Dask's map returns before its scheduler has the tasks; progress() draws what the
    # scheduler holds, and would find nothing of these yet
    source = source_of(dask_client)
    wait_for(lambda: "progress_inc" in source.progress(), 10, "the scheduler to hold the tasks")
    out = io.StringIO()
    text = kernel_cluster.progress(dask_client, file=out, timeout=30)  # not a notebook: text
    assert dask_client.gather(futures) == list(range(201, 211))
    assert "progress_inc" in text and "running" not in text  # drawn until all were done
    assert out.getvalue().strip().endswith(text.strip().splitlines()[-1])


def test_memory_sampler(dask_client) -> None:
    ms = MemorySampler()
    with ms.sample("dask", client=dask_client, interval=0.05):
        dask_client.gather(dask_client.map(memory_inc, range(300, 320)))
    samples = ms.samples["dask"]
    assert len(samples) >= 2 and min(v for _, v in samples) > 10_000_000  # two processes
    assert ms.to_pandas().shape[0] == len(samples)


def test_performance_report(dask_client, tmp_path) -> None:
    out = tmp_path / "dask-report.html"
    with performance_report(filename=out, client=dask_client, memory_interval=0.05) as rep:
        with span("report"):
            parts = dask_client.map(report_crunch, range(400, 406))
            total = dask_client.submit(sum, parts)  # gathers from both workers
            total.result()
        wait_for(lambda: len(rep._memory) >= 2, 10, "two memory samples")
    html = out.read_text()
    data = report_data(html)
    s = data["summary"]
    assert s["tasks"] == 7 and s["workers"] == 2 and s["threads"] == 4
    sections, tasks, _trees = report_sections(html)
    assert len(tasks.keys) == 7
    assert {t["prefix"] for t in tasks.tasks} == {"report_crunch", "sum"}
    assert len(sections["memory"]["time"]) >= 2
    assert sections["bandwidth"]["bytes"]  # the sum fetched results from the other worker


def test_attach_makes_it_the_default_and_spans_go_to_dask(dask_client, restore_default) -> None:
    changes: list[object] = []
    unwatch = watch_default_source(changes.append)
    try:
        source = kernel_cluster.attach(dask_client)
    finally:
        unwatch()
    assert changes == [source] and source is source_of(dask_client)
    assert source_of(None) is source  # views made without a client read it
    with span("attached", "inner") as inner_id:
        future = dask_client.submit(attached_inc, 1)
        assert future.result() == 2

    def dask_span_names(dask_scheduler):  # what Dask's own dashboard shows
        return {s.id: s.name for s in dask_scheduler.extensions["spans"].spans.values()}

    names = dask_client.run_on_scheduler(dask_span_names)
    assert names[inner_id] == ("attached", "inner")
    w = FineMetrics(autostart=False)  # no client: the attached one
    try:
        assert w.source is source
    finally:
        w.close()
    summary = lab.cluster_summary(source)  # the JupyterLab sidebar's
    assert summary["kind"] == "processes" and summary["workers"] == 2 and summary["threads"] == 4


def test_unreadable_selector_and_bounded_reads(dask_client) -> None:
    source = source_of(dask_client)
    with pytest.raises(KeyError, match="tags seen so far"):
        source.span_metrics("no-such-tag")
    # what a widget does at each tick costs one round trip per read, none of them
    # waiting for the workers' heartbeats (as refresh=True does): cheap enough for a few
    # Hz. Counted on the scheduler (in this process), not timed.
    scheduler = dask_client.cluster.scheduler
    plugin = scheduler.plugins[dask_plugin.NAME]
    handle, fresh = scheduler.handlers[dask_plugin.HANDLER], plugin._fresh
    reads: list[str] = []
    waits: list[bool] = []

    async def counted_handle(*args, **kwargs):
        reads.append(kwargs.get("read", ""))
        return await handle(*args, **kwargs)

    async def counted_fresh(refresh, timeout):
        waits.append(refresh)
        return await fresh(refresh, timeout)

    scheduler.handlers[dask_plugin.HANDLER] = counted_handle
    plugin._fresh = counted_fresh
    try:
        for _ in range(20):
            source.fine_metrics(refresh=False)
            source.spans(refresh=False)
            source.progress()
    finally:
        scheduler.handlers[dask_plugin.HANDLER] = handle
        del plugin._fresh
    assert reads == ["metrics", "spans", "progress"] * 20
    assert waits and not any(waits)


def test_old_default_spans_fold_and_totals_stay(dask_client) -> None:
    """Dask keeps every span; the reads fold old finished default spans as the engine
    does, so that polling stays bounded however many loops of submit().result() ran."""
    source = source_of(dask_client)
    plugin = dask_client.cluster.scheduler.plugins[dask_plugin.NAME]
    plugin.keep_default_spans, plugin.fold_grace = 2, 0.0
    try:
        before = source.fine_metrics()
        for i in range(6):  # outside any span, each its own TaskGroup: a default span each
            future = dask_client.submit(fold_inc, i, key=f"fold{'abcdef'[i]}-{i}")
            assert future.result() == i + 1
        after = source.fine_metrics()  # folds, once the heartbeats are in
        spans = source.spans(refresh=False)
    finally:
        plugin.keep_default_spans = dask_plugin.KEEP_DEFAULT_SPANS
        plugin.fold_grace = dask_plugin.FOLD_GRACE

    def tasks(metrics, span_id=None) -> float:
        return sum(
            v
            for k, v in metrics.items()
            if str(k[-3]).startswith("fold") and k[-2] == "tasks" and span_id in (None, k[1])
        )

    assert tasks(after) - tasks(before) == 6  # folding moves numbers, loses none
    defaults = [s for s in spans if s.name == ("default",)]
    (folded,) = [s for s in defaults if s.id == dask_plugin.FOLDED_ID]
    assert len([s for s in defaults if s.done and s is not folded]) <= 2
    assert tasks(folded.metrics) >= 4
    assert tasks(after, dask_plugin.FOLDED_ID) >= 4
    metrics, label = source.span_metrics(dask_plugin.FOLDED_ID)
    assert metrics == folded.metrics and "folded" in label


def test_a_scheduler_without_the_plugin_gets_it_again(dask_client) -> None:
    """A scheduler restarted at the same address has lost the plugin: the next read
    installs it again instead of failing (its history starts anew)."""
    source = source_of(dask_client)
    source.progress()
    dask_client.unregister_scheduler_plugin(dask_plugin.NAME)
    assert dask_plugin.NAME not in dask_client.cluster.scheduler.plugins
    assert source.task_stream_index() == 0  # read through a new plugin
    assert dask_plugin.NAME in dask_client.cluster.scheduler.plugins


def test_a_closed_dask_client_is_named_with_its_schedulers_address(dask_client) -> None:
    """A view made on (or still reading) a closed distributed.Client fails at once,
    naming the scheduler's address (which the closed client no longer knows) and the
    fix, not 'the Dask scheduler at ?'."""
    address = dask_client.scheduler.address
    other = DaskClient(address)
    source = source_of(other)
    source.progress()
    other.close()
    for make in (lambda: source.progress(), lambda: FineMetrics(other), lambda: SpanTree(other)):
        with pytest.raises(SchedulerUnreachable) as info:
            make()
        message = str(info.value)
        assert address in message and "closed" in message
        assert "kernel_cluster.attach(client)" in message


def test_attach_names_what_to_pass_instead_of_an_address_or_a_cluster(
    dask_client, restore_default
) -> None:
    """The views read clients: an address or a cluster object is refused with the
    client to make of it, and the default source stays as it was."""
    before = source_module._default_source
    address = dask_client.scheduler.address
    cases = [
        (address, r"distributed\.Client.*connect to it first.*attach\(distributed\.Client"),
        (dask_client.cluster, r"LocalCluster: pass a client of it, distributed\.Client\(cluster\)"),
        (42, r"got int: it has no"),
    ]
    for bad, message in cases:
        with pytest.raises(TypeError, match=message):
            kernel_cluster.attach(bad)
        with pytest.raises(TypeError, match=message):
            FineMetrics(bad)
    assert source_module._default_source is before
