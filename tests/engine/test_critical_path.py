"""The critical path of a span on a running engine, embedded and with worker
processes: the slow chain among quick parallel work is found, and its steps account
for the span's wall time."""

from __future__ import annotations

import time

import pytest

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.queries.critical_path import describe, path_frame


def link(seconds, *inputs):
    time.sleep(seconds)
    return 1 + sum(inputs)


@pytest.fixture(params=[False, True], ids=["embedded", "processes"])
def pclient(request):
    with KernelCluster(n_workers=2, threads_per_worker=2, processes=request.param,
                       memory_limit=0) as cluster, Client(cluster) as client:  # fmt: skip
        # warm every worker (a worker process's first task imports what it needs)
        client.gather([client.submit(link, 0.0, workers=[w], pure=False) for w in cluster.workers])
        yield client


def test_a_slow_chain_among_quick_parallel_work_is_the_path(pclient):
    client = pclient
    graph: dict = {}
    for i in range(5):  # 5 x 0.15 s, one after the other
        graph[f"chain-{i}"] = (link, 0.15, *([f"chain-{i - 1}"] if i else []))
    for i in range(40):  # 40 x 5 ms side by side, done long before the chain
        graph[f"quick-{i}"] = (link, 0.005)
    with span("slow chain") as span_id:
        client.get(graph, sorted(graph))
    path = client.critical_path(span=span_id)
    chain = [s.key for s in path.steps if str(s.key).startswith("chain-")]
    assert chain == [f"chain-{i}" for i in range(5)], path_frame(path).to_string()
    assert path.steps[-1].key == "chain-4"
    # from chain-0 on, every step followed its input
    first = [s.key for s in path.steps].index("chain-0")
    assert [s.via for s in path.steps[first + 1 :]] == ["dependency"] * 4
    assert sum(s.compute for s in path.steps[first:]) >= 5 * 0.15
    # the steps add up to the span's wall time (the rest: reporting the last result)
    assert path.length == pytest.approx(path.wall, rel=0.05)
    assert path.covered == pytest.approx(1.0, abs=0.05)
    frame = path_frame(path)
    assert list(frame.key) == [s.key for s in path.steps]
    assert frame.total.sum() == pytest.approx(path.length)
    assert "chain-4" in describe(path)
    # by tag, and the latest top-level span by default: the same span here
    assert [s.key for s in client.critical_path("slow chain").steps] == [s.key for s in path.steps]
    assert client.critical_path().steps[-1].key == "chain-4"


def test_inputs_from_another_worker_show_as_transfer():
    with KernelCluster(n_workers=2, threads_per_worker=1, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        a, b = (w for w in cluster.workers)
        with span("moved") as span_id:
            x = client.submit(link, 0.01, key="x", workers=[a])
            y = client.submit(link, 0.01, x, key="y", workers=[b])
            y.result()
        path = client.critical_path(span_id)
        assert [(s.key, s.via) for s in path.steps] == [("x", "start"), ("y", "dependency")]
        assert path.steps[1].worker == b and path.totals()["transfer"] > 0


def test_bad_span_selectors_are_named(pclient):
    with pytest.raises(KeyError, match="no-such-tag"):
        pclient.critical_path("no-such-tag")
    with pytest.raises(TypeError, match="span=3"):
        pclient.critical_path(3)
