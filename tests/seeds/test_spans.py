"""spans.txt: every example of the spans document, run as written.

The adaptations README allows: ``from kernel_cluster import Client, span`` for
``from distributed import Client, span``, and the client given to dask as its
scheduler (``dask.config.set(scheduler=client)``), which ``distributed.Client()``
does by itself. Each test runs on embedded workers and on worker processes.
"""

from __future__ import annotations

import os
import time
import warnings

import dask
import dask.array as da
import dask.config
import dask.dataframe as dd
import numpy as np
import pytest

from kernel_cluster import Client, KernelCluster, get_annotations, span
from kernel_cluster.core.idle_reasons import is_idle
from kernel_cluster.core.spans import Span
from tests.seeds import workflows
from tests.seeds.workflows import STEPS, WORKFLOW, span_tree


def inc(x: int) -> int:
    return x + 1


def burn(n: int) -> int:
    """A task that takes the CPU for a while: its span has metrics to show."""
    return int(np.sum(np.arange(n) % 7))


def test_the_main_example_maps_each_span_to_the_tasks_built_inside_it(client):
    """The document's example, with a dask array for the data (the dataframe version,
    whose spans dask-expr drops, is the next test): the three steps are built inside
    nested spans and computed outside them, and each span holds its step's tasks."""
    before = dask.config.get("optimization.fuse.active")
    with dask.config.set(scheduler=client):
        dask.config.set({"optimization.fuse.active": False})
        try:
            with span("Alice's workflow") as alice:  # `as`: to find it again below
                with span("data load"):
                    df = workflows.read_array()
                with span("ML preprocessing"):
                    df = workflows.preprocess_array(df)
                with span("Model training"):
                    model = workflows.train_array(df)

            model = model.compute()
        finally:
            dask.config.set({"optimization.fuse.active": before})
    assert model.shape == (19,)
    client.fine_metrics()  # the workers' latest metrics, as a heartbeat would bring them
    tree = client.run_on_scheduler(span_tree, root_id=alice)
    # "The example will create the following spans on the scheduler"
    assert set(tree) == {WORKFLOW, *((*WORKFLOW, step) for step in STEPS)}
    children = [tree[(*WORKFLOW, step)] for step in STEPS]
    for step, child in zip(STEPS, children):
        assert child["tasks"] > 0, (step, tree)
        assert child["thread-cpu"] > 0, (step, tree)
    # "The parent span will be mapped to all tasks of its children"
    parent = tree[WORKFLOW]
    assert parent["tasks"] == sum(c["tasks"] for c in children)
    assert parent["thread-cpu"] == pytest.approx(sum(c["thread-cpu"] for c in children))
    assert sorted(parent["children"]) == sorted(c["id"] for c in children)


def test_the_main_example_with_a_dataframe_warns_naming_the_spans_and_the_fix(client, tmp_path):
    """dask-expr optimises the annotations of dataframes away: the tasks cannot be
    filed under the spans they were built in. The client says so, naming each span
    and what to do; done as it says (compute inside each span), every span gets its
    work and its metrics."""
    path = workflows.write_parquet(tmp_path / "events.parquet")
    with dask.config.set(scheduler=client):
        with span("Alice's workflow") as alice:
            with span("data load"):
                df = dd.read_parquet(path)
            with span("ML preprocessing"):
                df = workflows.preprocess_frame(df)
            with span("Model training"):
                model = workflows.train_frame(df)

        with pytest.warns(UserWarning, match=r"data load.*compute inside the span") as seen:
            model = model.compute()
        (ours,) = [w for w in seen if "kernel" in str(w.message) or "span(" in str(w.message)]
        for step in STEPS:
            assert repr(step) in str(ours.message)
        assert ours.filename == __file__  # it names the user's line
        assert len(model) == 50
        client.fine_metrics()
        lost = client.run_on_scheduler(
            lambda dask_scheduler: alice in dask_scheduler.extensions["spans"].spans
        )
        assert not lost  # nothing reached the span: the warning was right

        # the fix: compute (here, persist) inside each span
        with span("Alice's workflow") as alice:
            with span("data load"):
                df = dd.read_parquet(path).persist()
            with span("ML preprocessing"):
                df = workflows.preprocess_frame(df).persist()
            with span("Model training"):
                model = workflows.train_frame(df).compute()
        del df
    assert len(model) == 50
    client.fine_metrics()
    tree = client.run_on_scheduler(span_tree, root_id=alice)
    assert set(tree) == {WORKFLOW, *((*WORKFLOW, step) for step in STEPS)}
    for step in STEPS:
        assert tree[(*WORKFLOW, step)]["tasks"] > 0, (step, tree)
        assert tree[(*WORKFLOW, step)]["thread-cpu"] > 0, (step, tree)


def test_collections_built_in_two_spans_computed_one_by_one_warn_of_nothing(client):
    """Two arrays built in two spans, each computed later: each keeps its span, so
    neither compute may say a span was lost (the first named the second's span, whose
    own compute then filled it)."""
    with dask.config.set({"scheduler": client, "optimization.fuse.active": False}):
        with span("first") as first:
            x = (da.ones(1000, chunks=100) + 1).sum()
        with span("second") as second:
            y = (da.ones(1000, chunks=100) * 2).sum()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert x.compute() == 2000
            assert y.compute() == 2000
        ours = [str(w.message) for w in seen if "span(" in str(w.message)]
        assert ours == []

        def tasks(dask_scheduler, ids=(first, second)):
            spans = dask_scheduler.extensions["spans"].spans
            return [sum(spans[i].states.values()) for i in ids]

        assert all(n >= 10 for n in client.run_on_scheduler(tasks))


def test_parameterised_tags_keep_users_apart(client):
    """``with span(f"{user}'s workflow"):`` gives ("Alice's workflow", "data load"),
    ("Bob's workflow", "data load"): all of Alice's work, or all data loading."""
    ids = {}
    for user, n in (("Alice", 3), ("Bob", 5)):
        with span(f"{user}'s workflow") as ids[user], span("data load"):
            client.gather(client.map(burn, [200_000 + i for i in range(n)]))

    def read(dask_scheduler, ids=ids):
        ext = dask_scheduler.extensions["spans"]
        loads = [
            s for s in ext.find_by_tags("data load") if s.parent and s.parent.id in ids.values()
        ]
        return (
            sorted(s.name for s in loads),
            {u: sum(ext.spans[i].states.values()) for u, i in ids.items()},
            sum(ext.merge_by_tags("Bob's workflow").states.values()),
        )

    loads, per_user, bobs = client.run_on_scheduler(read)
    assert loads == [("Alice's workflow", "data load"), ("Bob's workflow", "data load")]
    assert per_user == {"Alice": 3, "Bob": 5}
    # every Bob's workflow span ever made: at least this one's 5 tasks, none of Alice's
    assert bobs >= 5


def test_work_outside_any_span_goes_to_the_default_span(client):
    """ "If you don't use the span() context manager, your tasks will be automatically
    attributed to the ("default", ) span." Its id is unique to this cluster."""
    future = client.submit(inc, 1)
    assert future.result() == 2
    (record,) = client.get_task_stream(count=1)
    span_id = record["span_id"]
    name = client.run_on_scheduler(
        lambda dask_scheduler: dask_scheduler.extensions["spans"].spans[span_id].name
    )
    assert name == ("default",)
    assert span_id.startswith("default-")


def test_default_span_ids_differ_between_clusters():
    """Runs stored and compared side by side must not mix: two clusters' first
    default spans have different ids (they were both ``default-1``)."""
    ids = []
    for _ in range(2):
        with KernelCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
            c.submit(inc, 1).result()
            (record,) = c.get_task_stream(count=1)
            ids.append(record["span_id"])
    assert ids[0] != ids[1], ids
    assert all(i.startswith("default-") and i.endswith("-1") for i in ids), ids


def test_capture_the_span_id_and_find_the_span_on_the_scheduler(client):
    """The document's example, as written (with the test's client for ``Client()``)."""
    with span("my workflow") as span_id:
        client.submit(lambda: "Hello world!").result()
    found = client.cluster.scheduler.extensions["spans"].spans[span_id]
    assert repr(found) == f"Span<name=('my workflow',), id={span_id}>"


def test_capture_the_span_id_with_the_default_client():
    """The same, literally: ``client = Client()``."""
    client = Client()
    try:
        with span("my workflow") as span_id:
            assert client.submit(lambda: "Hello world!").result() == "Hello world!"
        found = client.cluster.scheduler.extensions["spans"].spans[span_id]
        assert found.name == ("my workflow",) and found.id == span_id
    finally:
        client.close()


def task_annotations() -> dict:
    return get_annotations()


def test_the_current_span_in_client_code_and_in_a_task(client):
    """ "You may retrieve the current span with dask.get_annotations().get("span"). You
    can do so in the client code as well as from inside a task." In a task of this
    engine, ``kernel_cluster.get_annotations()`` (dask's annotations are one
    process-wide setting, which concurrent tasks cannot each have: README)."""
    assert "span" not in dask.get_annotations()
    with span("outer") as outer, span("inner") as inner:
        seen = dask.get_annotations().get("span")
        in_task = client.submit(task_annotations, pure=False).result()
    assert seen["name"] == ("outer", "inner")
    assert seen["ids"][-1] == inner and seen["ids"][0] == outer
    assert get_annotations() == {}
    assert in_task["span"]["name"] == ("outer", "inner")
    assert tuple(in_task["span"]["ids"]) == tuple(seen["ids"])
    assert "span" not in dask.get_annotations()  # the block's annotation ended with it


def test_spans_are_read_with_run_on_scheduler(client):
    """ "spans can be queried using scheduler extensions or run_on_scheduler()"."""
    with span("queried") as span_id:
        client.gather(client.map(inc, range(4)))

    def read(dask_scheduler):
        s = dask_scheduler.extensions["spans"].spans[span_id]
        return s.name, s.states["memory"] + s.states["forgotten"] + s.states["released"]

    assert client.run_on_scheduler(read) == (("queried",), 4)
    assert client.run_on_scheduler(lambda: 42) == 42  # no dask_scheduler parameter: none given
    with pytest.raises(ZeroDivisionError):
        client.run_on_scheduler(lambda dask_scheduler: 1 / 0)


def test_the_developer_api_of_a_span(client):
    """Every property the document lists on ``distributed.spans.Span``, and the
    extension's lookups, on a span of real work."""
    t0 = time.time()
    with span("dev") as dev_id:
        with span("part one") as one_id:
            a = client.map(burn, [300_000, 300_001])  # the line Span.code names
        with span("part two") as two_id:
            b = client.submit(sum, a)
    assert b.result() > 0
    client.fine_metrics()

    def read(dask_scheduler):
        ext = dask_scheduler.extensions["spans"]
        dev, one, two = ext.spans[dev_id], ext.spans[one_id], ext.spans[two_id]
        merged = Span.merge(one, two)
        return {
            "active_cpu_seconds": dev.active_cpu_seconds,
            "all_durations": dev.all_durations,
            "annotation": one.annotation,
            "code": one.code,
            "metrics": dev.cumulative_worker_metrics,
            "done": dev.done,
            "duration": dev.duration,
            "times": (dev.enqueued, one.enqueued, dev.start, dev.stop),
            "groups": len(dev.groups) + len(one.groups) + len(two.groups),
            "traverse_groups": len(list(dev.traverse_groups())),
            "id": dev.id,
            "name": one.name,
            "nbytes_total": dev.nbytes_total,
            "intervals": dev.nthreads_intervals,
            "states": dev.states,
            "spans": [s.name for s in dev.traverse_spans()],
            "merged": (merged.states, merged.nbytes_total, merged.annotation),
            "find": [s.id for s in ext.find_by_tags("part one", "dev")],
            "merge_by_tags": sum(ext.merge_by_tags("part two").states.values()) >= 1,
            "merge_all": sum(ext.merge_all().states.values()) >= 3,
            "roots": dev in ext.root_spans,
            "by_name": ext.spans_search_by_name[("dev", "part one")][-1] is one,
        }

    r = client.run_on_scheduler(read)
    assert r["active_cpu_seconds"] > 0
    assert r["all_durations"]["compute"] > 0
    assert r["annotation"] == {"name": ("dev", "part one"), "ids": (dev_id, one_id)}
    # code: one entry per submission, each a tuple of frames (filename, line number,
    # function, source line) of the user's code, innermost first (README)
    (stack,) = r["code"]
    ((filename, lineno, function, line),) = stack
    assert (os.path.basename(filename), function) == (
        "test_spans.py",
        "test_the_developer_api_of_a_span",
    )
    assert line == "a = client.map(burn, [300_000, 300_001])  # the line Span.code names"
    assert lineno > 0
    assert all(k[0] == "execute" and len(k) == 4 for k in r["metrics"])
    assert r["metrics"][("execute", "burn", "tasks", "count")] == 2
    assert r["done"] and r["duration"] > 0
    enqueued, child_enqueued, start, stop = r["times"]
    assert t0 - 1 <= enqueued <= child_enqueued <= start <= stop
    assert r["groups"] >= 2 and r["traverse_groups"] >= 2
    assert r["id"] == dev_id and r["name"] == ("dev", "part one")
    assert r["nbytes_total"] > 0
    assert all(lo <= hi and n > 0 for lo, hi, n in r["intervals"])
    assert sum(r["states"].values()) == 3
    assert r["spans"] == [("dev",), ("dev", "part one"), ("dev", "part two")]
    assert sum(r["merged"][0].values()) == 3 and r["merged"][2] is None
    assert r["find"] == [dev_id]  # the parent covers the child
    assert r["merge_by_tags"] and r["merge_all"] and r["roots"] and r["by_name"]


def test_span_code_is_empty_without_frames(cluster):
    """ "Only populated if ... nframes is non-zero": ``Client(code_frames=0)``."""
    with Client(cluster, code_frames=0) as client:
        with span("no code") as span_id:
            client.submit(inc, 1).result()
        code = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.extensions["spans"].spans[span_id].code
        )
    assert code == []


def test_span_code_names_the_users_line_for_every_way_to_compute(client):
    """``Span.code`` is "code snippets, sent by the client on compute(), persist() and
    submit()": the user's line, whichever way the collection reaches the client; never
    a line of dask (``x.compute(scheduler=client)`` reaches the client from inside
    ``dask/base.py``)."""
    x = da.ones(10, chunks=5)
    ids = {}
    with span("method") as ids["method"]:
        x.sum().compute(scheduler=client)  # code: method
    with span("function") as ids["function"]:
        dask.compute(x.sum(), scheduler=client)  # code: function
    with span("config") as ids["config"], dask.config.set(scheduler=client):
        x.sum().compute()  # code: config
    with span("client.compute") as ids["client.compute"]:
        client.compute(x.sum()).result()  # code: client.compute
    with span("client.persist") as ids["client.persist"]:
        client.gather(client.persist(x.sum()))  # code: client.persist

    def read(dask_scheduler):
        spans = dask_scheduler.extensions["spans"].spans
        return {name: spans[span_id].code for name, span_id in ids.items()}

    for name, code in client.run_on_scheduler(read).items():
        assert code, name
        for stack in code:
            ((filename, _, function, line),) = stack
            assert (os.path.basename(filename), function) == (
                "test_spans.py",
                "test_span_code_names_the_users_line_for_every_way_to_compute",
            ), (name, stack)
            assert line.endswith(f"# code: {name}"), (name, stack)


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def hold(started, release) -> int:
    started.set()
    assert release.wait(30), "the test never released this task"
    return 1


def test_a_spans_time_on_other_spans_is_idle_or_other_spans(client, new_event):
    """A span's metrics add up to the thread-seconds it had (``active_cpu_seconds``);
    what its tasks did not use is Dask's ("execute", "N/A", "idle or other spans",
    "seconds") line: here the other span's task held a thread meanwhile, so calling it
    "idle" would misread a busy cluster. ``spans().to_pandas()``'s ``metrics_seconds``
    is what the span's own tasks account for, the rest of ``active_cpu_seconds``."""
    started, release = new_event(), new_event()
    with span("long"):  # holds a thread for as long as "short" runs, however slow
        long = client.submit(hold, started, release)
    assert started.wait(30)
    # a second a task on the three other threads: the idle gap before them (filed under
    # "short": the cluster was busy) stays small beside the held thread, however slow
    # the machine is to hand them over
    with span("short"):
        assert client.gather(client.map(nap, [1.0] * 3)) == [1.0] * 3
    release.set()
    assert long.result(timeout=30) == 1

    frame = client.fine_metrics(span="short")
    assert "idle" not in set(frame.activity)
    (other,) = frame[frame.activity == "idle or other spans"].itertuples()
    assert other.function == "N/A" and other.value > 0
    # the workers' idle filed under the span, by reason (``idle: ...``): no task's either
    idle = frame.activity.map(is_idle)
    assert frame[idle].function.isna().all()
    tasks_seconds = frame[~idle & (frame.activity != "idle or other spans")].value.sum()

    row = client.spans().to_pandas().set_index("name").loc["short"]
    assert row.metrics_seconds == pytest.approx(tasks_seconds)
    assert row.metrics_seconds + frame[idle].value.sum() + other.value == pytest.approx(
        row.active_cpu_seconds
    )
    assert row.metrics_seconds < row.active_cpu_seconds


def test_the_span_table_of_a_cluster_without_spans_has_its_columns():
    """``client.spans().to_pandas()`` before any work: no rows, but the columns, so that
    selecting them works as it will once spans exist."""
    with KernelCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        empty = c.spans().to_pandas()
        c.submit(inc, 1).result()
        full = c.spans().to_pandas()
    assert len(empty) == 0 and len(full) == 1
    assert list(empty.columns) == list(full.columns)
    assert empty[["name", "duration", "active_cpu_seconds", "metrics_seconds"]].empty
