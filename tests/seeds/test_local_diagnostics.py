"""local-diagnostics.txt: the document's examples, run as written on this engine.

Adapted as README says: ``from kernel_cluster.diagnostics import ...`` for
``dask.diagnostics`` (and ``Callback`` for ``dask.callbacks``'), the client made
dask's scheduler for the block (``dask.config.set(scheduler=client)``), the client's
``get`` for dask's ``get``, ``kernel_cluster.sizeof`` for cachey's ``nbytes``. The
arrays are smaller than the document's (10,000 x 10,000 would take minutes of two
shared cores), built the same way.
"""

from __future__ import annotations

import io
import warnings
from operator import add, mul
from pathlib import Path

import dask
import dask.array as da
import pytest

from kernel_cluster import get_sync, sizeof
from kernel_cluster.diagnostics import (
    CacheProfiler,
    Callback,
    Profiler,
    ProgressBar,
    ResourceProfiler,
    visualize,
)

BAR = "[########################################] | 100% Completed"


@pytest.fixture
def res():
    a = da.random.normal(size=(400, 400), chunks=(100, 100))
    return a.dot(a.T).mean(axis=0)


def test_progress_bar_as_a_context_manager(client, res, capsys):
    with dask.config.set(scheduler=client), ProgressBar():
        out = res.compute()
    assert out.shape == (400,)
    assert BAR in capsys.readouterr().out


def test_progress_bar_registered_globally_then_unregistered(client, res, capsys):
    with dask.config.set(scheduler=client):
        pbar = ProgressBar()
        pbar.register()
        try:
            out = res.compute()
        finally:
            pbar.unregister()
        assert out.shape == (400,)
        assert BAR in capsys.readouterr().out
        res.compute()
    assert capsys.readouterr().out == ""  # unregistered: no bar


def test_a_registered_progress_bar_ignores_dasks_own_schedulers(res, capsys):
    """Registered, our ProgressBar follows this engine's computations; dask's own
    schedulers (threads, sync) run as they do, without it and without an error."""
    pbar = ProgressBar()
    pbar.register()
    try:
        assert res.compute(scheduler="sync").shape == (400,)
    finally:
        pbar.unregister()
    assert capsys.readouterr().out == ""


def test_profiler_settings_as_the_document_makes_them():
    rprof = ResourceProfiler(dt=0.5)
    assert rprof.dt == 0.5
    cprof = CacheProfiler(metric=sizeof)
    assert cprof._metric is sizeof


def test_the_qr_example_with_three_profilers(client, tmp_path, monkeypatch):
    """Profiler, ResourceProfiler(dt=0.25) and CacheProfiler in one with block around
    ``a2.compute()``; their ``results[0]``; ``prof.visualize()`` and
    ``visualize([prof, rprof, cprof])``."""
    monkeypatch.chdir(tmp_path)
    a = da.random.random(size=(4000, 100), chunks=(400, 100))
    q, r = da.linalg.qr(a)
    a2 = q.dot(r)

    with dask.config.set(scheduler=client):  # noqa: SIM117  (the document's with, as written)
        with Profiler() as prof, ResourceProfiler(dt=0.25) as rprof, CacheProfiler() as cprof:
            out = a2.compute()
    assert out.shape == (4000, 100)

    task = prof.results[0]
    assert type(task).__name__ == "TaskData"
    assert task._fields == ("key", "task", "start_time", "end_time", "worker_id")
    assert task.start_time <= task.end_time and isinstance(task.worker_id, int)
    keys = {t.key for t in prof.results}
    assert any(isinstance(k, tuple) and "qr" in k[0] for k in keys), sorted(map(str, keys))[:5]

    resource = rprof.results[0]
    assert type(resource).__name__ == "ResourceData"
    assert resource._fields == ("time", "mem", "cpu")
    assert resource.mem > 0

    cache = cprof.results[0]
    assert type(cache).__name__ == "CacheData"
    assert cache._fields == ("key", "task", "metric", "cache_time", "free_time")
    assert all(c.metric == 1 for c in cprof.results)  # the default metric counts

    one = prof.visualize()
    assert isinstance(one, Path) and one.exists()
    stack = visualize([prof, rprof, cprof], filename="stack.html")
    assert stack == Path("stack.html") and stack.stat().st_size > 1000


class PrintKeys(Callback):
    def _pretask(self, key, dask, state):
        """Print the key of every task as it's started"""
        print(f"Computing: {key!r}!")  # as the seed writes it


dsk = {"a": (add, 1, 2), "b": (add, 3, "a"), "c": (mul, "a", "b")}
PRINTED = "Computing: 'a'!\nComputing: 'b'!\nComputing: 'c'!\n"


def test_a_custom_callback(client, capsys):
    get = client.get
    with PrintKeys():
        assert get(dsk, "c") == 18
    assert capsys.readouterr().out == PRINTED


def test_callback_from_functions(client, capsys):
    def printkeys(key, dask, state):
        print(f"Computing: {key!r}!")  # as the seed writes it

    with Callback(pretask=printkeys):
        client.get(dsk, "c")
    assert capsys.readouterr().out == PRINTED
    with Callback(pretask=printkeys):  # in the calling thread, as dask's get_sync
        get_sync(dsk, "c")
    assert capsys.readouterr().out == PRINTED


def test_callbacks_are_tuples_of_five():
    """ "These are internally represented as tuples of length 5, stored in the order
    presented above"."""

    def pretask(key, dsk, state):
        pass

    hooks = Callback(pretask=pretask)._callback
    assert len(hooks) == 5 and hooks[2] is pretask and hooks[0] is None


def test_dasks_own_diagnostics_around_our_computations_warn_naming_ours(client):
    """``from dask.diagnostics import ProgressBar`` kept from a dask script: dask's
    callbacks fire only in dask's own schedulers, so around a computation on this
    engine each says so, once, naming ours: all of them."""
    from dask.callbacks import Callback as DaskCallback
    from dask.diagnostics import CacheProfiler as DaskCacheProfiler
    from dask.diagnostics import Profiler as DaskProfiler
    from dask.diagnostics import ProgressBar as DaskProgressBar
    from dask.diagnostics import ResourceProfiler as DaskResourceProfiler

    class DaskPrintKeys(DaskCallback):
        def _pretask(self, key, dask, state):
            pass

    res = da.ones(100, chunks=10).sum()
    made = {
        "ProgressBar": lambda: DaskProgressBar(out=io.StringIO()),
        "Profiler": DaskProfiler,
        "ResourceProfiler": lambda: DaskResourceProfiler(dt=0.05),
        "CacheProfiler": DaskCacheProfiler,
        "DaskPrintKeys": DaskPrintKeys,
        "Callback": lambda: DaskCallback(pretask=print),
    }
    for name, make in made.items():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            with make(), dask.config.set(scheduler=client):
                for _ in range(2):  # once per place, as the warnings module does
                    res.compute()
                dask.persist(res)
        messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
        ours = name if name != "DaskPrintKeys" else "Callback"
        assert len(messages) == 2, (name, messages)  # compute's line, and persist's
        assert all(f"dask's {name} is active" in m for m in messages), messages
        assert all(f"kernel_cluster.diagnostics.{ours}" in m for m in messages), messages
        assert all(w.filename == __file__ for w in seen)


def test_the_five_callbacks_in_order_with_their_arguments(client):
    """start(dsk), start_state(dsk, state), pretask(key, dsk, state),
    posttask(key, result, dsk, state, id), finish(dsk, state, errored)."""
    calls: list[tuple] = []

    def start(dsk):
        calls.append(("start", sorted(dsk)))

    def start_state(dsk, state):
        calls.append(("start_state", sorted(state["waiting"] | state["finished"])))

    def pretask(key, dsk, state):
        calls.append(("pretask", key))

    def posttask(key, result, dsk, state, id):
        calls.append(("posttask", key, isinstance(id, int)))

    def finish(dsk, state, errored):
        calls.append(("finish", errored, sorted(state["finished"])))

    with Callback(start, start_state, pretask, posttask, finish):
        assert client.get(dsk, "c") == 18
    assert calls[0] == ("start", ["a", "b", "c"])
    assert calls[1] == ("start_state", ["a", "b", "c"])
    assert calls[-1] == ("finish", False, ["a", "b", "c"])
    middle = calls[2:-1]
    for key in "abc":
        assert ("pretask", key) in middle and ("posttask", key, True) in middle
        assert middle.index(("pretask", key)) < middle.index(("posttask", key, True))
