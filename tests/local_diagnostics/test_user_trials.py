"""Defects found by using the local diagnostics as a user would (the README's
examples, then edge cases): each test failed before its fix."""

from __future__ import annotations

import io
import logging
import math
import os
import re
import signal
import threading
import time

import psutil
import pytest

from kernel_cluster import CacheProfiler, ProgressBar, ResourceProfiler, get_sync
from kernel_cluster.core.spec import GraphError
from kernel_cluster.diagnostics import Callback
from kernel_cluster.local_diagnostics.callbacks import active_callbacks
from tests.engine.helpers import assert_no_new_children, blocked_until, child_pids, wait_for


def scalar(x):
    return x + 1


def listed(n):
    return list(range(n))


# a value with a len(), one without, then one with again
MIXED = {"a": (listed, 3), "b": (len, "a"), "c": (listed, "b"), "d": (scalar, "b")}


def _metrics(cprof: CacheProfiler) -> dict:
    return {r.key: r.metric for r in cprof.results}


def test_cache_metric_that_raises_gives_nan_and_keeps_the_records_sync():
    """A metric that fails on one value (len of an int) gave no record for any task
    after it: the hook was dropped for the rest of the computation. As with worker
    processes, that value's metric is NaN and the others are measured."""
    with CacheProfiler(metric=len) as cprof:
        assert get_sync(MIXED, ["c", "d"]) == [[0, 1, 2], 4]
    metrics = _metrics(cprof)
    assert set(metrics) == {"a", "b", "c", "d"}
    assert metrics["a"] == 3 and metrics["c"] == 3
    assert math.isnan(metrics["b"]) and math.isnan(metrics["d"])


def test_cache_metric_that_raises_gives_nan_and_keeps_the_records(client):
    with CacheProfiler(metric=len) as cprof:
        assert client.get(MIXED, ["c", "d"]) == [[0, 1, 2], 4]
    metrics = _metrics(cprof)
    assert set(metrics) == {"a", "b", "c", "d"}
    assert metrics["a"] == 3 and metrics["c"] == 3
    assert math.isnan(metrics["b"]) and math.isnan(metrics["d"])


def test_nested_resource_profiler_samples_until_the_outer_block_ends():
    """Leaving an inner ``with`` of the same ResourceProfiler stopped its sampler
    while the outer block was still open."""
    rprof = ResourceProfiler(dt=0.02)
    with rprof:
        with rprof:
            pass
        assert rprof.sampling
        n = len(rprof.results)
        wait_for(lambda: len(rprof.results) > n + 2, timeout=10)
    assert not rprof.sampling


def _bad_start(dsk):
    raise RuntimeError("from a hook")


def test_a_hook_that_raises_is_logged_by_its_function_name(caplog):
    """The warning named only ``<Callback object at 0x...>``: with hooks passed as
    functions, which one raised could not be told."""
    with caplog.at_level(logging.WARNING), Callback(start=_bad_start):
        assert get_sync({"a": (scalar, 1)}, "a") == 2
    (record,) = [r for r in caplog.records if "hook" in r.getMessage()]
    assert "_bad_start" in record.getMessage()


DSK = {"a": (scalar, 1), "b": (scalar, "a")}


def test_dask_own_progress_bar_says_it_sees_nothing_here_sync():
    """``from dask.diagnostics import ProgressBar`` kept from a dask script drew
    nothing at all around ``get_sync`` or ``scheduler=client``, silently: dask's
    callbacks fire only in dask's local schedulers. A warning names the
    replacement."""
    diagnostics = pytest.importorskip("dask.diagnostics")
    warns = pytest.warns(UserWarning, match=r"kernel_cluster\.diagnostics\.ProgressBar")
    with warns, diagnostics.ProgressBar():
        assert get_sync(DSK, "b") == 3


def test_dask_own_profiler_says_it_sees_nothing_here(client):
    diagnostics = pytest.importorskip("dask.diagnostics")
    warns = pytest.warns(UserWarning, match=r"kernel_cluster\.diagnostics\.Profiler")
    with warns, diagnostics.Profiler():
        assert client.get(DSK, "b") == 3


def test_result_of_client_compute_waits_for_the_finish_hooks(client):
    """``with CacheProfiler() as c: fut = client.compute(x); fut.result()`` then
    ``c.results`` was sometimes empty: the hooks of ``client.compute`` run on a
    thread of their own, and the future was done before its finish hooks had run
    (CacheProfiler makes its records there). ``result()``, ``gather`` and ``wait``
    now return once they have."""
    delayed = pytest.importorskip("dask").delayed
    finished: list[bool] = []

    def slow_finish(dsk, state, errored):
        time.sleep(0.3)  # a hook slower than the task: the race made certain
        finished.append(errored)

    x = delayed(scalar)(delayed(scalar)(1))
    with CacheProfiler() as cprof, Callback(finish=slow_finish):
        assert client.compute(x).result() == 3
        assert finished == [False]
        assert len(cprof.results) == 2
        assert client.gather(client.compute(x + 1)) == 4
        assert finished == [False, False]
    assert not client._futures.hook_runs


def _samplers() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and any(
                "resource_sampler" in a for a in p.cmdline()
            ):
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_ctrl_c_while_the_resource_profiler_starts_leaves_no_sampler(python_sigint):
    """A Ctrl-C while ``with ResourceProfiler():`` waited for its sampler's first
    sample left the sampler process running for the life of the kernel, and the
    profiler active in that context (the ``with`` block was never entered, so never
    left)."""

    def interrupt_once_the_sampler_runs():
        deadline = time.monotonic() + 10
        while not _samplers() and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    children = child_pids()
    rprof = ResourceProfiler(dt=0.05)
    thread = threading.Thread(target=interrupt_once_the_sampler_runs)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt), rprof:
            time.sleep(10)  # (not reached unless the interrupt came late)
    finally:
        thread.join()
    assert not rprof.sampling
    wait_for(lambda: not _samplers(), timeout=10, what="the sampler to end")
    assert rprof not in active_callbacks()
    # and waited for: a Ctrl-C inside Popen left it a zombie until another Popen
    assert_no_new_children(children)


def nap(x, seconds):
    time.sleep(seconds)
    return x


def _bar_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ProgressBar"]


def _set(event: threading.Event):
    return lambda *args: event.set()


def test_overlapping_computations_each_get_their_bar_and_records(client, new_event):
    """Two ``client.compute`` calls under one ProgressBar / CacheProfiler /
    registered ResourceProfiler overlap (each returns at once). The second start
    replaced the first's timer, whose thread then drew for ever; it emptied
    CacheProfiler's records of the first; and the first finish stopped the
    ResourceProfiler's sampler while the second still ran."""
    delayed = pytest.importorskip("dask").delayed
    out = io.StringIO()
    rprof = ResourceProfiler(dt=0.05)
    rprof.register()
    try:
        posted = threading.Event()
        release = new_event()  # the slow one runs until the quick one is checked
        with ProgressBar(out=out), CacheProfiler() as cprof, Callback(posttask=_set(posted)):
            slow = client.compute(delayed(blocked_until)(release, delayed(nap)(1, 0.2)))
            assert posted.wait(10)  # the first has a record pending when the second starts
            quick = client.compute(delayed(nap)(delayed(nap)(2, 0.2), 0))
            assert quick.result() == 2
            assert rprof.sampling  # the slow one still runs
            release.set()
            assert slow.result() == 1
    finally:
        rprof.unregister()
    wait_for(lambda: not _bar_threads(), timeout=10, what="the bars' threads to end")
    # each computation ends with its own final line (a tick may also have drawn 100%
    # over itself, with a carriage return, before the finish came: load decides that)
    assert len(re.findall(r"100% Completed \| [^\r\n]*\n", out.getvalue())) == 2
    assert len(cprof.results) == 4
    assert not rprof.sampling


def test_get_sync_on_a_persisted_collection_says_what_to_do(client):
    """``x = client.persist(...)`` then ``x.sum().compute(scheduler=get_sync)`` was
    told to "persist the collection with this client first", which it was:
    get_sync, which runs in this thread, cannot read a cluster's futures."""
    da = pytest.importorskip("dask.array")
    x = client.persist(da.ones(10, chunks=5))
    with pytest.raises(GraphError, match=r"get_sync.*cannot read.*scheduler=client"):
        x.sum().compute(scheduler=get_sync)
    assert x.sum().compute(scheduler=client) == 10
