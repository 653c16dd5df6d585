"""Profiler, ResourceProfiler and CacheProfiler on get_sync and on the engine, embedded
and with worker processes; the sampler process always ends."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
import time
from operator import add

import numpy as np
import psutil
import pytest

from kernel_cluster import (
    CacheProfiler,
    Profiler,
    ProgressBar,
    ResourceProfiler,
    get_sync,
    sizeof,
)
from kernel_cluster.diagnostics import Callback
from kernel_cluster.local_diagnostics.records import CacheData, ResourceData, TaskData
from tests.engine.helpers import wait_for


def ones(n):
    return np.ones(n)


def total(*arrays):
    return float(sum(a.sum() for a in arrays))


def array_bytes(value):
    return np.asarray(value).nbytes


def burn(seconds):
    """Hold a core (in numpy's C code or Python's loop) for ``seconds`` of CPU time."""
    t = time.thread_time()
    x = 0
    while time.thread_time() - t < seconds:
        x += 1
    return x


# 8 leaves of different sizes, reduced in two steps
GRAPH = {("leaf", i): (ones, 1000 * (i + 1)) for i in range(8)}
GRAPH["half-0"] = (total, *[("leaf", i) for i in range(4)])
GRAPH["half-1"] = (total, *[("leaf", i) for i in range(4, 8)])
GRAPH["sum"] = (add, "half-0", "half-1")
EXPECTED = float(sum(1000 * (i + 1) for i in range(8)))


def compute(where, dsk, key):
    return get_sync(dsk, key) if where == "sync" else where.get(dsk, key)


@pytest.fixture(params=["engine", "sync"])
def where(request, client, processes):
    """The test's client (embedded, then worker processes), or get_sync (once)."""
    if request.param == "engine":
        return client
    if processes:
        pytest.skip("get_sync: run once, with the embedded variant")
    return "sync"


def test_profiler_records_each_task(where):
    with Profiler() as prof:
        assert compute(where, GRAPH, "sum") == EXPECTED
    assert {r.key for r in prof.results} == set(GRAPH)
    for r in prof.results:
        assert type(r) is TaskData
        assert r.task == GRAPH[r.key]
        assert r.start_time <= r.end_time
        assert isinstance(r.worker_id, int) and r.worker_id >= 0
    by_key = {r.key: r for r in prof.results}
    for i in range(4):  # a task starts after its inputs end
        assert by_key["half-0"].start_time >= by_key["leaf", i].end_time - 1e-3
    # entering again clears the results; clear() too
    with prof:
        compute(where, {"x": (add, 1, 2)}, "x")
    assert [r.key for r in prof.results] == ["x"]
    prof.clear()
    assert prof.results == []


def test_cache_profiler_counts_and_frees(where):
    with CacheProfiler() as cprof:
        compute(where, GRAPH, "sum")
    assert {r.key for r in cprof.results} == set(GRAPH)
    by_key = {r.key: r for r in cprof.results}
    for r in cprof.results:
        assert type(r) is CacheData and r.metric == 1 and r.task == GRAPH[r.key]
        assert r.cache_time <= r.free_time
    # the leaves are freed once their half is computed, before the end (what is
    # still held then is freed at the finish: one time for all, the output's)
    for i in range(8):
        assert by_key["leaf", i].free_time < by_key["sum"].free_time
    assert by_key["sum"].free_time >= by_key["sum"].cache_time
    assert cprof.metric_name == "count"


@pytest.mark.parametrize("metric", [array_bytes, sizeof], ids=["custom", "sizeof"])
def test_cache_profiler_metric_in_both_modes(where, metric):
    """A custom metric runs where the values are (in the worker processes there)."""
    with CacheProfiler(metric=metric) as cprof:
        compute(where, GRAPH, "sum")
    by_key = {r.key: r.metric for r in cprof.results}
    for i in range(8):
        exact = 8000.0 * (i + 1)
        if metric is sizeof:  # the engine's estimate: the buffer and a little more
            assert exact <= by_key["leaf", i] <= exact + 1000
        else:
            assert by_key["leaf", i] == exact
    assert not any(math.isnan(m) for m in by_key.values())
    assert cprof.metric_name == metric.__name__


def test_resource_profiler_samples_the_worker_processes(client, processes):
    """A separate process samples: CPU of the worker processes counts."""
    with ResourceProfiler(dt=0.05) as rprof:
        sampler = rprof._proc
        assert sampler is not None
        client.get({("burn", i): (burn, 0.6) for i in range(2)}, [("burn", 0), ("burn", 1)])
    assert sampler.poll() is not None  # the sampler ended with the block
    assert not rprof.sampling
    assert len(rprof.results) >= 3
    for r in rprof.results:
        assert type(r) is ResourceData and r.mem > 0 and r.cpu >= 0
    times = [r.time for r in rprof.results]
    assert times == sorted(times)
    # two tasks burning 0.6 s of CPU each: the samples' CPU, summed over time, holds
    # most of those 1.2 s (psutil reads CPU times in clock ticks), wherever the tasks
    # ran (a sampler blind to the worker processes would see next to none); on a
    # loaded machine the peak says little, CPU time does not change
    assert cpu_seconds(rprof.results) > 1.2 * 0.7


def cpu_seconds(samples):
    """CPU time the samples account for: each percentage covers the time since the
    sample before it."""
    return sum(b.cpu / 100 * (b.time - a.time) for a, b in itertools.pairwise(samples))


def test_resource_profiler_ends_its_sampler_on_errors_and_interrupts(client):
    def fail(x):
        raise ValueError("no")

    for exc, hook in ((ValueError, None), (KeyboardInterrupt, "pretask")):
        rprof = ResourceProfiler(dt=0.05)
        extra = Callback(pretask=_raiser(exc)) if hook else Callback()
        with pytest.raises(exc), rprof, extra:
            sampler = rprof._proc
            client.get({"x": (fail, 1)} if hook is None else {"x": (add, 1, 2)}, "x")
        assert sampler.wait(10) is not None
        assert not rprof.sampling


def _raiser(exc):
    def hook(*args):
        raise exc("from a hook")

    return hook


def test_registered_resource_profiler_samples_each_computation():
    rprof = ResourceProfiler(dt=0.05)
    rprof.register()
    try:
        get_sync({"x": (burn, 0.2)}, "x")
        assert not rprof.sampling  # stopped at the computation's finish
        n = len(rprof.results)
        assert n >= 2  # at least a sample at the start and one at the end
        get_sync({"x": (burn, 0.2)}, "x")
        assert len(rprof.results) > n  # registered: not cleared between computations
    finally:
        rprof.unregister()


def test_the_sampler_ends_when_its_parent_dies(tmp_path):
    """The parent dies without cleaning up (os._exit): the sampler sees its standard
    input end and exits."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from kernel_cluster.local_diagnostics.profilers import ResourceProfiler
            rprof = ResourceProfiler(dt=0.05)
            rprof.__enter__()
            print(rprof._proc.pid, flush=True)
            sys.stdin.readline()
            os._exit(0)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        pid = int(parent.stdout.readline())
        sampler = psutil.Process(pid)
        assert sampler.is_running()
        parent.stdin.write("die\n")
        parent.stdin.flush()
        parent.wait(10)
        wait_for(
            lambda: not sampler.is_running() or sampler.status() == psutil.STATUS_ZOMBIE,
            10,
            "the sampler to end after its parent died",
        )
    finally:
        parent.kill()
        parent.wait()


def test_profilers_combine_in_one_with_statement(where, capsys):
    with (
        Profiler() as prof,
        ResourceProfiler(dt=0.05) as rprof,
        CacheProfiler() as cprof,
        ProgressBar(),
    ):
        compute(where, GRAPH, "sum")
    assert len(prof.results) == len(cprof.results) == len(GRAPH)
    assert rprof.results
    assert "100% Completed" in capsys.readouterr().out


def test_resource_profiler_checks_dt():
    with pytest.raises(ValueError, match="dt"):
        ResourceProfiler(dt=0)
    with pytest.raises(TypeError, match="metric"):
        CacheProfiler(metric="nbytes")
