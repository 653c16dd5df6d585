"""dask collections computed on this engine give what dask's own scheduler gives.

Each test runs embedded and with worker processes (the ``client`` fixture), and
compares with ``scheduler="sync"``.
"""

from __future__ import annotations

import operator
import subprocess
import sys
import time

import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
db = pytest.importorskip("dask.bag")
dd = pytest.importorskip("dask.dataframe")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from dask._task_spec import Task, TaskRef  # noqa: E402
from dask.utils import key_split as dask_key_split  # noqa: E402

from kernel_cluster import get_task_stream, span  # noqa: E402
from kernel_cluster.client import dask_graphs  # noqa: E402
from kernel_cluster.client.futures import Future  # noqa: E402
from kernel_cluster.core.spec import GraphError  # noqa: E402
from tests.engine.helpers import wait_for  # noqa: E402


class WordCountError(Exception):
    pass


def words(line):
    return line.split()


def clean(text):
    return text.strip().lower()


def count(items):
    return len(items)


def total(*xs):
    return sum(xs)


def boom(x):
    raise WordCountError(f"no words in {x!r}")


def frame():
    rng = np.random.default_rng(0)
    n = 2000
    return pd.DataFrame(
        {"k": rng.integers(0, 13, n), "v": rng.random(n), "w": rng.integers(0, 100, n)}
    )


@pytest.fixture(scope="module")
def tall_and_skinny():
    """A random array (its chunks' seeds are fixed in its graph) and the R of its QR
    decomposition by dask's own scheduler, computed once for both modes."""
    a = da.random.random((200_000, 100), chunks=(10_000, 100))
    return a, da.linalg.qr(a)[1].compute(scheduler="sync")


# LAPACK calls from several threads at once are slow on a loaded machine (OpenBLAS's
# own threads compete with the workers'): more time than other tests, never a hang
@pytest.mark.timeout(180)
def test_qr_of_a_tall_and_skinny_array(client, tall_and_skinny):
    a, r_by_dask = tall_and_skinny
    q, r = da.linalg.qr(a)
    error = abs(q @ r - a).max()
    ours_r, ours_error = dask.compute(r, error, scheduler=client.get)
    assert ours_error < 1e-8
    np.testing.assert_allclose(ours_r, r_by_dask, rtol=1e-10, atol=1e-10)


def test_dataframe_groupby_aggregate(client):
    df = dd.from_pandas(frame(), npartitions=5)
    agg = df.groupby("k").agg({"v": ["sum", "mean"], "w": "max"})
    pd.testing.assert_frame_equal(agg.compute(scheduler=client), agg.compute(scheduler="sync"))
    by_k = df.groupby("k").v.sum()
    (ours,) = dask.compute(by_k, scheduler=client.get)
    pd.testing.assert_series_equal(ours, by_k.compute(scheduler="sync"))


def test_bag_word_count(client):
    lines = ["the cat sat", "The dog sat", " a cat and a dog "] * 7
    bag = db.from_sequence(lines, npartitions=4).map(clean).map(words).flatten()
    counts = bag.frequencies(sort=True)
    assert counts.compute(scheduler=client) == counts.compute(scheduler="sync")
    assert dict(counts.compute(scheduler=client))["cat"] == 14


def test_delayed_pipeline(client):
    parts = [dask.delayed(words)(line) for line in ["a b", "c d e", "f"]]
    sizes = [dask.delayed(count)(p) for p in parts]
    result = dask.delayed(total)(*sizes)
    assert dask.compute(result, scheduler=client.get) == (6,)
    assert result.compute(scheduler=client) == result.compute(scheduler="sync") == 6


def test_config_set_compute_and_persist(client):
    x = da.arange(1000, chunks=100)
    y = (x * 2).sum()
    with dask.config.set(scheduler=client):
        assert y.compute() == 999_000
    future = client.compute(y)
    assert isinstance(future, Future) and future.result() == 999_000
    a, b = client.compute([x.sum(), x.max()])
    assert (a.result(), b.result()) == (499_500, 999)
    # compute applies the collection's postcompute: a whole array, a pandas frame
    np.testing.assert_array_equal(client.compute(x).result(), np.arange(1000))
    df = dd.from_pandas(frame(), npartitions=3)
    pd.testing.assert_frame_equal(client.compute(df).result(), frame())

    persisted = client.persist(x + 1)
    assert type(persisted) is type(x) and persisted.chunks == x.chunks
    held = [v for v in persisted.__dask_graph__().values() if isinstance(v, Future)]
    assert len(held) == 10
    assert (persisted.sum().compute(scheduler=client)) == 500_500
    assert dask.persist(x, scheduler=client)[0].sum().compute(scheduler=client) == 499_500
    p1, p2 = client.persist([x, x + 1])
    assert p1.max().compute(scheduler=client) == 999
    assert (p2 - p1).sum().compute(scheduler=client) == 1000
    (p3,) = client.persist([df])
    pd.testing.assert_frame_equal(p3.compute(scheduler=client), frame())
    # a future handed to a delayed call is its value there
    f = client.compute(x.sum())
    assert dask.delayed(operator.add)(f, 1).compute(scheduler=client) == 499_501
    del f, future, a, b, persisted, held, p1, p2, p3


def test_prefixes_are_dasks_in_fine_metrics_and_the_task_stream(client):
    x = da.random.random((400, 400), chunks=(100, 100))
    expr = (x @ x.T).sum()
    with get_task_stream(client) as ts, span("dask-matmul"):
        expr.compute(scheduler=client, optimize_graph=False)
    stream_prefixes = {r["prefix"] for r in ts.data}
    expected = {dask_key_split(r["key"]) for r in ts.data}
    assert stream_prefixes == expected
    assert {"random_sample", "matmul", "sum-aggregate"} <= stream_prefixes

    def functions():
        metrics = client.fine_metrics(span="dask-matmul")
        return set(metrics.function)

    wait_for(lambda: {"random_sample", "matmul"} <= functions(), what="the span's metrics")
    spans = client.spans().to_pandas().set_index("name")
    assert spans.loc["dask-matmul", "tasks"] == len(ts.data)


def test_error_inside_a_dask_graph_is_the_original_exception(client):
    bag = db.from_sequence(["a", "b"], npartitions=2).map(boom)
    with pytest.raises(WordCountError, match="no words in"):
        bag.compute(scheduler=client)
    with pytest.raises(WordCountError):
        client.compute(dask.delayed(boom)("x")).result()


def test_missing_dependency_is_named(client):
    dsk = {"b": Task("b", count, TaskRef("a")), "c": Task("c", count, TaskRef("b"))}
    with pytest.raises(GraphError, match="'b' needs key 'a'") as info:
        client.get(dsk, "c")
    assert info.value.keys == ("b", "a")


def test_dask_task_dict_and_legacy_tuples_mix(client):
    dsk = {
        ("x", 0): 1,
        ("x", 1): (operator.add, ("x", 0), 10),
        "y": Task("y", total, TaskRef(("x", 0)), TaskRef(("x", 1))),
    }
    assert client.get(dsk, ["y", ("x", 1)]) == [12, 11]


def test_annotations_workers_and_ignored_ones(client, cluster):
    workers = sorted(client.scheduler_info()["workers"])
    with dask.annotate(workers=[workers[1]]):
        parts = [dask.delayed(count)([i] * i) for i in range(8)]
    result = dask.delayed(total)(*parts)
    with get_task_stream(client) as ts:
        assert result.compute(scheduler=client, optimize_graph=False) == sum(range(8))
    ran = {r["key"]: r["worker"] for r in ts.data}
    assert {ran[p.key] for p in parts} == {workers[1]}
    with dask.annotate(resources={"GPU": 1}), pytest.warns(UserWarning, match="'resources'"):
        dask.delayed(count)([1]).compute(scheduler=client, optimize_graph=False)


def flaky(path, fails):
    """Fails the first ``fails`` times it runs (counted in a file: any process)."""
    with open(path, "a+") as f:
        f.seek(0)
        runs = len(f.read())
        f.write("x")
    if runs < fails:
        raise WordCountError(f"run {runs} failed")
    return runs


def test_retries_annotation(client, tmp_path):
    with dask.annotate(retries=2):
        ok = dask.delayed(flaky)(str(tmp_path / "ok"), 2)
        bad = dask.delayed(flaky)(str(tmp_path / "bad"), 3)
    assert dask.delayed(total)(ok, 10).compute(scheduler=client, optimize_graph=False) == 12
    with pytest.raises(WordCountError, match="run 2 failed"):
        dask.delayed(total)(bad, 10).compute(scheduler=client, optimize_graph=False)


def test_the_engine_never_imports_dask_itself():
    code = (
        "import sys\n"
        "from operator import add\n"
        "from kernel_cluster import Client\n"
        "with Client() as c:\n"
        "    assert c.get({'a': (add, 1, 2), 'b': (add, 'a', 1)}, 'b') == 4\n"
        "    assert c.submit(add, 1, 2).result() == 3\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_high_level_graph_keeps_its_layers_annotations(client):
    worker = sorted(client.scheduler_info()["workers"])[0]
    with dask.annotate(workers=[worker], retries=1):
        x = da.ones((10,), chunks=5) + 1
    graph = dask_graphs.convert(x.__dask_graph__(), client)
    assert graph.annotations and all(
        a == {"workers": (worker,), "retries": 1} for a in graph.annotations.values()
    )
    with get_task_stream(client) as ts:
        parts = client.get(x.__dask_graph__(), list(x.__dask_keys__()))
    np.testing.assert_array_equal(np.concatenate(parts), np.full(10, 2.0))
    assert {r["worker"] for r in ts.data} == {worker}


def test_priority_annotation_orders_the_submission():
    order = {"a": 0, "b": 1, "c": 2, "d": 3}
    assert dask_graphs.prioritized(order, {"c": 5, "d": 1}) == {"c": 0, "d": 1, "a": 2, "b": 3}


def spin(block, seconds=0.3):
    """``seconds`` of this thread's CPU in Python (the profiler sees it): counted on
    the thread's clock, as on a busy machine 0.3 s of wall time could pass before the
    sampler's thread ever ran."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return block


def test_the_profile_is_kept_by_dask_prefix(client):
    x = da.ones((4,), chunks=2).map_blocks(spin, dtype=float)
    assert x.sum().compute(scheduler=client, optimize_graph=False) == 4
    wait_for(lambda: client.profile(prefix="spin")["count"] > 0, what="spin's profile")


def test_a_collection_given_to_submit_or_map_is_refused_with_the_fix(client):
    """A task would get the lazy collection, not its value (and a result that is a
    graph): submit and map say so, and how to pass the value, before anything runs."""
    x = da.ones((10,), chunks=5)
    for submit in (
        lambda: client.submit(np.sum, x),
        lambda: client.submit(len, [x]),
        lambda: client.submit(np.sum, a=dask.delayed(sum)([1, 2])),
        lambda: client.map(np.sum, [x]),
    ):
        with pytest.raises(TypeError, match=r"dask collection \(\w+\).*client\.compute\(x\)"):
            submit()
    assert client.submit(np.sum, client.compute(x)).result() == 10  # the way it names


def test_compute_and_persist_act_on_their_keywords(client, tmp_path):
    """distributed's keywords of compute/persist do what they say there, or warn:
    none is dropped unseen (sync=True used to return a Future, workers= to run
    anywhere)."""
    x = da.arange(40, chunks=10)
    assert client.compute(x.sum(), sync=True) == 780
    assert client.compute([x.sum(), x.max()], sync=True) == [780, 39]

    workers = sorted(client.scheduler_info()["workers"])
    with get_task_stream(client) as ts:
        y = client.persist(x + 1, workers=workers[1])
        assert client.compute(y.sum(), workers=[workers[1]], sync=True) == 820
    assert ts.data and {r["worker"] for r in ts.data} == {workers[1]}

    ok = dask.delayed(flaky)(str(tmp_path / "ok"), 2)
    assert client.compute(ok, retries=2).result() == 2
    again = dask.delayed(flaky)(str(tmp_path / "again"), 1)
    assert client.persist(again, retries=1).compute(scheduler=client) == 1

    with pytest.warns(UserWarning, match=r"compute\(\) ignores 'fifo_timeout'"):
        assert client.compute(x.sum(), fifo_timeout="1s").result() == 780
    with pytest.warns(UserWarning, match=r"persist\(\) ignores 'num_workers'"):
        (z,) = dask.persist(x, scheduler=client, num_workers=4)
    assert z.sum().compute(scheduler=client) == 780


def test_dask_tasks_travel_by_plain_pickle_unless_their_code_must_travel(client):
    """Worker processes get a dask graph's tasks by plain pickle (twice as fast as
    cloudpickle on dask's partials and curries), except those cloudpickle would send
    by value: a lambda, a local function, a function of a module registered by value
    (as a notebook's ``__main__`` is, always)."""
    import pickle

    import cloudpickle

    from kernel_cluster.client.graph_packing import dumps_library_tasks, dumps_task

    def local(x):
        return x + 1

    graph = {
        "lib": Task("lib", operator.add, 1, 2),
        "lam": Task("lam", lambda x: x * 2, TaskRef("lib")),
        "loc": Task("loc", local, TaskRef("lib")),
        "mod": Task("mod", words, "a b"),  # this module, registered by value below
    }
    specs = dask_graphs.convert(graph, client).specs
    module = sys.modules[__name__]
    registered = __name__ in cloudpickle.list_registry_pickle_by_value()
    if not registered:
        cloudpickle.register_pickle_by_value(module)
    try:
        payloads = dumps_library_tasks(specs)
        by_cloudpickle = {k: dumps_task(k, s) for k, s in specs.items()}
    finally:
        if not registered:
            cloudpickle.unregister_pickle_by_value(module)
    assert payloads["lib"] == pickle.dumps(specs["lib"], protocol=5)
    for key in ("lam", "loc", "mod"):
        assert payloads[key] == by_cloudpickle[key]
    for key, payload in payloads.items():
        assert pickle.loads(payload).dependencies == specs[key].dependencies


def nested_sum(n):
    from kernel_cluster import get_client

    return float(da.ones(n, chunks=2).sum().compute(scheduler=get_client()))


def test_a_nested_compute_in_a_worker_process_says_it_cannot(client, processes):
    """Embedded, a task can compute a collection on the cluster; in a worker process
    there is no client, and the error must not advise Client() (a cluster per task)."""
    if not processes:
        assert client.submit(nested_sum, 10).result(timeout=30) == 10.0
        return
    with pytest.raises(ValueError, match=r"worker process.*processes=True.*kernel") as info:
        client.submit(nested_sum, 10).result(timeout=30)
    assert "create one with kernel_cluster.Client()" not in str(info.value)
