"""Spans end to end: the seed's examples on a running cluster."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kernel_cluster import Client, KernelCluster, get_annotations, span
from kernel_cluster.core.span_folding import IDLE


def inc(x):
    return x + 1


def busy(seconds):
    time.sleep(seconds)
    return seconds


def annotations_inside(x):
    return get_annotations()


def submits_more(x):
    from kernel_cluster import get_client

    return get_client().submit(inc, x).result()


@pytest.fixture
def sclient():
    with (
        KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        yield client


def names(client) -> set:
    return {s.name for s in client.spans()}


def test_the_seeds_nested_example_makes_exactly_four_spans(sclient):
    with span("Alice's workflow"):
        with span("data load"):
            df = sclient.map(inc, range(4))
        with span("ML preprocessing"):
            df = sclient.map(inc, df)
        with span("Model training"):
            model = sclient.submit(sum, df)
    assert model.result() == sum(range(2, 6))
    assert names(sclient) == {
        ("Alice's workflow",),
        ("Alice's workflow", "data load"),
        ("Alice's workflow", "ML preprocessing"),
        ("Alice's workflow", "Model training"),
    }


def test_span_id_finds_the_span_object_on_the_scheduler(sclient):
    with span("my workflow") as span_id:
        sclient.submit(lambda: "Hello world!").result()
    ext = sclient.cluster.scheduler.extensions["spans"]
    found = ext.spans[span_id]
    assert found.name == ("my workflow",)
    assert repr(found).startswith("Span<name=('my workflow',), id=")
    assert found.done and found.states["memory"] == 1


def test_tags_are_validated():
    with pytest.raises(ValueError, match="at least one tag"), span():
        pass
    with pytest.raises(TypeError, match="strings"), span("ok", 3):  # type: ignore[arg-type]
        pass


def test_span_with_two_tags_equals_nesting(sclient):
    with span("a", "b") as inner:
        sclient.submit(inc, 1).result()
    tree = sclient.spans()
    assert tree[inner].name == ("a", "b")
    assert tree[tree[inner].parent].name == ("a",)


def test_reentering_the_same_tags_makes_a_separate_span(sclient):
    with span("x") as first:
        sclient.submit(inc, 1).result()
    with span("x") as second:
        sclient.submit(inc, 2).result()
    assert first != second
    assert len(sclient.cluster.scheduler.extensions["spans"].spans_search_by_name[("x",)]) == 2


def test_get_annotations_in_client_and_inside_tasks_and_nested_submissions(sclient):
    assert get_annotations() == {}
    with span("outer", "inner") as sid:
        outside = get_annotations()
        inside = sclient.submit(annotations_inside, 1).result()
        assert sclient.submit(submits_more, 5).result() == 6
    assert outside["span"]["name"] == ("outer", "inner")
    assert outside["span"]["ids"][-1] == sid
    assert inside == outside
    ext = sclient.cluster.scheduler.extensions["spans"]
    # the task submitted from inside a task belongs to the same span
    assert {g.name for g in ext.spans[sid].groups} >= {"submits_more", "inc"}


def test_tasks_outside_any_span_use_a_default_span_that_rotates(sclient):
    gate = threading.Event()
    first = sclient.submit(gate.wait)
    second = sclient.submit(inc, 1)  # while the default span is still busy
    defaults_busy = [s for s in sclient.spans() if s.name == ("default",)]
    assert len(defaults_busy) == 1
    gate.set()
    first.result(), second.result()
    sclient.submit(inc, 2).result()  # after everything finished: a new default span
    defaults = [s for s in sclient.spans() if s.name == ("default",)]
    assert len(defaults) == 2


def test_parent_metrics_are_its_own_plus_its_childrens(sclient):
    with span("parent") as parent_id:
        sclient.submit(busy, 0.1, key="own-1").result()
        with span("child") as child_id:
            sclient.gather(sclient.map(busy, [0.1, 0.2], key="kid"))
    tree = sclient.spans()
    parent, child = tree[parent_id], tree[child_id]

    def execute_only(metrics):
        return {k: v for k, v in metrics.items() if k != IDLE}

    child_m = execute_only(child.metrics)
    parent_m = execute_only(parent.metrics)
    for key, value in child_m.items():
        assert parent_m[key] == pytest.approx(value), key
    assert parent_m[("execute", "own", "thread-noncpu", "seconds")] > 0.09
    assert child_m[("execute", "kid", "tasks", "count")] == 2
    # a span's seconds, idle share included, add up to the thread time it was given
    seconds = sum(v for k, v in parent.metrics.items() if k[-1] == "seconds")
    assert seconds == pytest.approx(parent.active_cpu_seconds, rel=0.05)


def test_fine_metrics_by_span_id_tag_or_tags(sclient):
    with span("Alice's workflow") as alice:
        sclient.submit(busy, 0.05, key="alice_task-1").result()
    by_id = sclient.fine_metrics(span=alice)
    by_tag = sclient.fine_metrics(span="Alice's workflow")
    by_tags = sclient.fine_metrics(span=("Alice's workflow",))
    for frame in (by_id, by_tag, by_tags):
        assert set(frame.function) == {"alice_task", "N/A"}  # N/A: idle or other spans
    with pytest.raises(KeyError, match="No span has the tag"):
        sclient.fine_metrics(span="nobody's workflow")


def test_spans_to_pandas(sclient):
    with span("w"):
        sclient.gather(sclient.map(inc, range(3)))
    table = sclient.spans().to_pandas()
    row = table[table.name == "w"].iloc[0]
    assert row.done and row.tasks >= 3 and row.stop >= row.start > 0
    assert row.active_cpu_seconds > 0


def test_two_clients_alice_and_bob_filter_as_the_seed_describes():
    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster:
        results = {}

        def workflow(user: str) -> None:
            with Client(cluster, set_as_default=False) as client, span(f"{user}'s workflow"):
                with span("data load"):
                    data = client.map(busy, [0.02] * 3, key=f"{user}_load")
                with span("ML preprocessing"):
                    out = client.map(inc, data, key=f"{user}_prep")
                results[user] = client.gather(out)

        threads = [threading.Thread(target=workflow, args=(u,)) for u in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {"alice": [1.02] * 3, "bob": [1.02] * 3}
        with Client(cluster, set_as_default=False) as viewer:
            alice = set(viewer.fine_metrics(span="alice's workflow").function)
            loading = set(viewer.fine_metrics(span="data load").function)
        # "N/A": each span's "idle or other spans" line, as Dask's
        assert alice - {"N/A"} == {"alice_load", "alice_prep"}
        assert loading - {"N/A"} == {"alice_load", "bob_load"}


def test_worker_death_does_not_lose_span_attribution():
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        with span("survives") as sid:
            futures = client.map(busy, [0.05] * 8, key="surv", pure=False)
            client.gather(futures[:2])
            os.kill(next(iter(cluster.worker_pids().values())), signal.SIGKILL)
            assert client.gather(futures) == [0.05] * 8
        metrics = client.spans()[sid].metrics
        assert metrics[("execute", "surv", "tasks", "count")] >= 8
