"""``Client.get`` with local callbacks active: the engine's events, turned into hooks.

Taken only when ``active_callbacks()`` is not empty, so a plain ``get`` pays one
context-variable read. Here the client registers a ``GraphEvents`` plugin for the
graph's keys (only if some hook wants per-task events), submits the graph, and
then, in the calling thread, drains the plugin's queue and calls the hooks until
the outputs are done (or one failed): hooks run where ``get`` was called, one at
a time, in the order the scheduler saw things happen.

What ``posttask`` gets as ``result``: with embedded workers the value itself, read
from the worker's memory as it was stored (a value spilled to disk meanwhile is
not read back: a ``RemoteValue`` stands for it); with worker processes a
``RemoteValue`` (key, worker, size): values are not shipped to the client for
the callbacks. Metrics of the values (``CacheProfiler(metric=...)``) are computed
where the values live (``diagnostics.value_metrics``) and handed over in
``state["value_metrics"]`` before ``finish``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .core.keys import Key
from .core.spec import TaskSpec, pack_results
from .diagnostics import value_metrics
from .diagnostics.callbacks import Callback, CallbackRun, RemoteValue
from .engine.graph_events import ERRED, FREED, POST, PRE, RETRY, GraphEvents
from .futures import _cancelled

logger = logging.getLogger(__name__)

_DONE = ("done",)


def remote_metric_functions(callbacks: tuple[Callback, ...]) -> tuple[Callable[[Any], Any], ...]:
    """The metric functions the callbacks want computed where the values live."""
    fns: list[Callable[[Any], Any]] = []
    for cb in callbacks:
        fn = getattr(cb, "value_metric", None)
        if fn is not None and fn not in fns:
            fns.append(fn)
    return tuple(fns)


def get_with_callbacks(
    client: Any,
    dsk: Any,
    specs: dict[Key, TaskSpec],
    keys: Any,
    wanted: list[Key],
    graph: Any,
    callbacks: tuple[Callback, ...],
) -> Any:
    """``client.get(dsk, keys)`` driving ``callbacks`` (see the module's docstring).

    ``graph``: the client's conversion of a dask graph, or None for a dict graph;
    the hooks are shown a dask expression's graph (a mapping), not the expression.
    """
    if not isinstance(dsk, Mapping) and hasattr(dsk, "__dask_graph__"):
        dsk = dsk.__dask_graph__()
    scheduler = client._scheduler
    loop = client._loop
    processes = client._pickle_tasks
    deps = {k: s.dependencies for k, s in specs.items()}
    run = CallbackRun(
        callbacks,
        dsk,
        deps,
        client=client,
        num_workers=scheduler.state.total_nthreads,
    )
    fns = remote_metric_functions(callbacks) if processes else ()
    token = f"callbacks-{uuid.uuid4().hex}"
    plugin = GraphEvents(frozenset(specs), run.uses_results and not processes, scheduler.clock)
    events = plugin.events
    registered = False
    submitted = False
    errored = True
    try:
        run.start()
        if run.wants_tasks:
            loop.run(scheduler.register_plugin, plugin, token)
            registered = True
        sent: dict[Key, TaskSpec] = value_metrics.wrap(specs, token, fns) if fns else specs
        with client._lock:
            seq = client._submit_graph(sent, wanted, graph)
            states = client._futures.want(wanted, seq)
            submitted = True
        latch = client._futures.latch(states, True, lambda: events.put(_DONE))
        if latch is None:
            events.put(_DONE)
        while True:
            item = events.get()
            if item is _DONE:
                break
            _dispatch(run, item, processes)
        for k, st in zip(wanted, states):
            if st.status == "error":
                assert st.exception is not None
                raise st.exception.with_traceback(st.traceback)
            if st.status == "cancelled":
                raise _cancelled(st, k)
        data = client._gather_keys(wanted)
        _drain(run, events, processes)
        result = pack_results(keys, data)
        errored = False
        return result
    finally:
        # each step whatever the one before did (a second Ctrl-C included): finish last
        try:
            if registered and client.cluster.status == "running":
                loop.run(scheduler.unregister_plugin, token)
        except (KeyError, RuntimeError, TimeoutError):
            pass
        finally:
            try:
                if submitted:
                    client._release_keys(wanted)
                    del states
                if fns:
                    run.state["value_metrics"] = _collect_metrics(client, token, fns)
            finally:
                run.finish(errored)


def _drain(run: CallbackRun, events: Any, processes: bool) -> None:
    while not events.empty():
        item = events.get()
        if item is not _DONE:
            _dispatch(run, item, processes)


def _dispatch(run: CallbackRun, item: tuple[Any, ...], processes: bool) -> None:
    kind = item[0]
    if kind is POST:
        _, key, worker, thread, t0, t1, nbytes, has_value, value = item
        s = run.state
        s["task_times"][key] = (t0, t1)
        s["nbytes"][key] = nbytes
        if not has_value and (processes or run.uses_results):
            value = RemoteValue(key, worker, nbytes)
        run.posttask(key, value, run.worker_id(worker, thread))
    elif kind is PRE:
        run.pretask(item[1])
    elif kind is FREED:
        run.released(item[1], item[2])
    elif kind is ERRED:
        run.erred(item[1])
    elif kind is RETRY:
        run.retry(item[1])


def _collect_metrics(
    client: Any, token: str, fns: tuple[Callable[[Any], Any], ...]
) -> dict[Key, dict[Callable[[Any], Any], float]]:
    """The metrics the workers kept for this computation, by key and function."""
    out: dict[Key, dict[Callable[[Any], Any], float]] = {}
    try:
        if client.status != "running" or client.cluster.status != "running":
            return out
        per_worker = client.run(value_metrics.take, token)
    except Exception:
        logger.warning("Could not collect the value metrics of %s from the workers", token)
        return out
    for kept in per_worker.values():
        for key, values in kept.items():
            if values is not None:
                out[key] = dict(zip(fns, values))
    return out
