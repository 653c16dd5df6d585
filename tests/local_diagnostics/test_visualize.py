"""visualize: the local profilers' records shaped into the plots' data, and the page
(a real file, read back) or the widget that draws them."""

from __future__ import annotations

import functools
import json
import re
from operator import add

import pytest

from kernel_cluster.local_diagnostics import plots as local_plots
from kernel_cluster.local_diagnostics.plots import (
    group_name,
    plots_data,
    short_repr,
    task_text,
    visualize,
)
from kernel_cluster.local_diagnostics.records import CacheData, ResourceData, TaskData

T0 = 1_700_000_000.0


def random_sample(n):
    return [0.5] * n


def qr(block):
    return block


class Profiler:
    """Stands for the callbacks' Profiler: a class of that name with ``results``."""

    def __init__(self, results=()):
        self.results = list(results)


class ResourceProfiler(Profiler):
    dt = 0.25


class CacheProfiler(Profiler):
    metric_name = "nbytes"


def task_records():
    return [
        TaskData(("random-ab12cd34", 1), (random_sample, 10), T0 + 0.02, T0 + 0.4, 11),
        TaskData(("random-ab12cd34", 0), (random_sample, 10), T0 + 0.01, T0 + 0.35, 2),
        TaskData("qr-1", (qr, ("random-ab12cd34", 0)), T0 + 0.5, T0 + 0.9, 2),
        TaskData("sum-5", (add, 1, (qr, "x")), T0 + 0.9, T0 + 0.95, 11),
    ]


def resource_records():
    return [ResourceData(T0 + 0.25 * i, 70.0 + i, 100.0 * i) for i in range(5)]


def cache_records():
    return [
        CacheData(("random-ab12cd34", 0), (random_sample, 10), 80.0, T0 + 0.35, T0 + 0.9),
        CacheData("qr-1", (qr, "x"), 80.0, T0 + 0.9, None),  # never freed
    ]


def profilers():
    return [
        Profiler(task_records()),
        ResourceProfiler(resource_records()),
        CacheProfiler(cache_records()),
    ]


def page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="kc-report-data">(.*?)</script>', html, re.S)
    assert m, "the page carries its data"
    return json.loads(m.group(1))


def test_records_become_columns_on_one_time_axis():
    data = plots_data(profilers(), title="QR")
    assert data["page"] == "profiler-plots" and data["title"] == "QR"
    assert data["origin"] == T0  # the first record of all: resource sample 0
    assert data["duration"] == pytest.approx(1.0)
    # function names, in the order they first appear (tasks and cache together)
    assert data["groups"] == ["random_sample", "qr", "add"]
    tasks, resource, cache = data["plots"]
    assert tasks["kind"] == "tasks"
    assert tasks["keys"] == [
        "('random-ab12cd34', 0)",
        "('random-ab12cd34', 1)",
        "qr-1",
        "sum-5",
    ]  # sorted by start
    assert tasks["tasks"][0] == "random_sample(10)"
    assert tasks["tasks"][3] == "add(1, qr('x'))"
    assert tasks["group"] == [0, 0, 1, 2]
    assert tasks["workers"] == ["2", "11"]  # numbers in numeric order
    assert tasks["worker"] == [0, 1, 0, 1]
    assert tasks["start"] == [0.01, 0.02, 0.5, 0.9]
    assert tasks["end"] == [0.35, 0.4, 0.9, 0.95]
    assert resource == {
        "kind": "resource",
        "time": [0.0, 0.25, 0.5, 0.75, 1.0],
        "mem": [70.0, 71.0, 72.0, 73.0, 74.0],
        "cpu": [0.0, 100.0, 200.0, 300.0, 400.0],
    }
    assert cache == {
        "kind": "cache",
        "metric": "nbytes",
        "group": [0, 1],
        "start": [0.35, 0.9],
        "end": [0.9, None],
        "value": [80.0, 80.0],
    }
    json.dumps(data, allow_nan=False)  # plain JSON: no NaN, no infinity, no objects


def test_groups_keys_and_tasks_read_short():
    assert group_name((functools.partial(qr, 1), 2), "x-1") == "qr"
    assert group_name(None, ("load-0123abcd", 3)) == "load"  # no function: the key's prefix
    assert group_name("a string", "inc-1") == "inc"

    # dask's task objects hold dask's wrappers: the key's prefix names them, as the task
    # stream and the fine metrics do
    dask_task_spec = pytest.importorskip("dask._task_spec")
    wrapped = dask_task_spec.Task(("random_sample-5d1f", 0, 0), random_sample, 1)
    assert group_name(wrapped, ("random_sample-5d1f", 0, 0)) == "random_sample"
    assert group_name(wrapped, ("sum-aggregate-5d1f0e2a9c", 0)) == "sum-aggregate"
    long = task_text((add, "y" * 500, list(range(1000))))
    assert len(long) <= 160 and long.startswith("add('yyy")
    assert len(short_repr(object(), 20)) <= 20

    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert short_repr(Broken()).startswith("<Broken")  # a failing repr fails no plot


def test_profilers_are_duck_typed_and_plain_lists_are_accepted():
    # by the records' type, whatever the holder's class
    class Anything:
        results = task_records()

    assert [p["kind"] for p in plots_data([Anything()])["plots"]] == ["tasks"]
    # a plain list of records, alone or among others
    assert [p["kind"] for p in plots_data(resource_records())["plots"]] == ["resource"]
    kinds = [p["kind"] for p in plots_data([cache_records(), task_records()])["plots"]]
    assert kinds == ["cache", "tasks"]
    # one profiler, not in a list
    assert len(plots_data(Profiler(task_records()))["plots"]) == 1
    # the count metric by default
    assert plots_data([[CacheData("a", None, 1, T0, T0 + 1)]])["plots"][0]["metric"] == "count"


def test_empty_profilers_draw_empty_plots():
    data = plots_data([Profiler(), ResourceProfiler(), CacheProfiler()])
    assert [p["kind"] for p in data["plots"]] == ["tasks", "resource", "cache"]
    assert data["plots"][0]["keys"] == [] and data["plots"][1]["time"] == []
    assert data["duration"] == 0 and data["groups"] == []
    assert plots_data([])["plots"] == []


def test_what_cannot_be_plotted_is_named():
    class Nothing:
        results: list = []

    with pytest.raises(TypeError, match="cannot tell what Nothing profiled"):
        plots_data([Nothing()])
    with pytest.raises(TypeError, match="one kind of record"):
        plots_data([[*task_records(), *resource_records()]])
    with pytest.raises(TypeError, match="cannot plot int"):
        plots_data([3])
    with pytest.raises(TypeError, match="start_time is 'soon'"):
        plots_data([[TaskData("k", None, "soon", T0, 0)]])
    with pytest.raises(TypeError, match="takes filename, save, mode, title and show"):
        visualize(profilers(), save=False, palette="Viridis")
    with pytest.raises(ValueError, match="use 'widget', 'file'"):
        visualize(profilers(), save=False, mode="bokeh")


def test_the_page_is_written_self_contained_with_the_data(tmp_path):
    target = tmp_path / "profile.html"
    out = visualize(profilers(), filename=target, title="QR profile")
    assert out == target and target.exists()  # outside a notebook: a file, its path returned
    html = target.read_text(encoding="utf-8")
    assert page_data(html) == json.loads(json.dumps(plots_data(profilers(), title="QR profile")))
    assert "<title>QR profile</title>" in html
    # nothing to fetch: no script, style or image from elsewhere
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert all(u.startswith("http://www.w3.org/") for u in urls), urls  # XML namespaces only
    assert "renderProfilerPage" in html or "profiler-plots" in html


def test_save_false_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    html = visualize(profilers(), save=False)
    assert isinstance(html, str) and html.startswith("<!DOCTYPE html>")
    assert page_data(html)["plots"][0]["keys"][2] == "qr-1"
    assert list(tmp_path.iterdir()) == []


def test_empty_profilers_still_make_a_page(tmp_path):
    out = visualize([Profiler(), CacheProfiler()], filename=tmp_path / "empty.html")
    data = page_data(out.read_text(encoding="utf-8"))
    assert [p["kind"] for p in data["plots"]] == ["tasks", "cache"]


def test_an_unwritable_file_fails_before_anything_names_visualize(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"visualize cannot write .* does not exist"):
        visualize(profilers(), filename=tmp_path / "missing" / "p.html")


def test_widget_mode_gives_the_widget_with_the_data(tmp_path):
    pytest.importorskip("anywidget")
    from kernel_cluster.jupyter.widgets import ProfilerPlots

    w = visualize(profilers(), mode="widget")
    try:
        assert isinstance(w, ProfilerPlots) and w.kind == "profiler-plots"
        assert w.data == plots_data(profilers())
        assert "profiler-plots" in w._esm  # the bundle knows the view
    finally:
        w.close()
    assert list(tmp_path.iterdir()) == []  # nothing written unless asked
    w = visualize(profilers(), mode="widget", save=True, filename=tmp_path / "p.html")
    w.close()
    assert (tmp_path / "p.html").exists()


def test_in_a_notebook_the_default_is_the_widget(monkeypatch, tmp_path):
    pytest.importorskip("anywidget")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(local_plots, "in_notebook", lambda: True)
    w = visualize(profilers())
    try:
        assert w.kind == "profiler-plots"
    finally:
        w.close()
    assert list(tmp_path.iterdir()) == []  # no file by default in a notebook


def test_thread_idents_become_numbered_rows_with_their_ids_kept():
    late, early = 140645640603328, 140645648996032
    records = [
        TaskData("a-1", None, T0 + 1, T0 + 2, late),
        TaskData("a-2", None, T0, T0 + 1, early),
        TaskData("a-3", None, T0 + 2, T0 + 3, early),
    ]
    tasks = plots_data(records)["plots"][0]
    assert tasks["workers"] == ["thread 0", "thread 1"]  # in the order they first ran
    assert tasks["worker_ids"] == [str(early), str(late)]
    assert tasks["worker"] == [0, 1, 0]


def total(*xs):
    return sum(xs)


def test_dask_profilers_records_plot_as_they_are():
    """Records of the same shapes from elsewhere (dask.diagnostics, a real run) plot too:
    dask's task objects are grouped by their keys' prefixes."""
    dask = pytest.importorskip("dask")
    from dask.diagnostics import CacheProfiler as DaskCacheProfiler
    from dask.diagnostics import Profiler as DaskProfiler

    dsk = {("x", i): (add, i, 1) for i in range(8)}
    dsk["total"] = (total, *[("x", i) for i in range(8)])
    with DaskProfiler() as prof, DaskCacheProfiler() as cprof:
        assert dask.threaded.get(dsk, "total") == 36
    data = plots_data([prof, cprof])
    assert set(data["groups"]) == {"x", "total"}
    tasks, cache = data["plots"]
    assert len(tasks["keys"]) == 9 and "('x', 0)" in tasks["keys"]
    assert cache["metric"] == "count" and len(cache["group"]) == 9
    assert all(0 <= s <= e <= data["duration"] for s, e in zip(tasks["start"], tasks["end"]))
    json.dumps(data, allow_nan=False)
