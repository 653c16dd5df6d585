"""``get_sync``: a dict graph computed in the calling thread, for debugging.

No scheduler, no workers, no threads: every task runs here, one after another, in
the engine's order (``core.spec.graph_order``) from the engine's task specs
(``core.spec.parse_graph``), so a graph that fails on the cluster fails the same
way here, where ``pdb`` (``%debug`` in a notebook) stops inside the task. The
local callbacks (``Callback``, the profilers, ``ProgressBar``) fire as they do on
the cluster; ``state["cache"]`` holds the values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from ..core.dask_specs import is_dask_graph, node_specs
from ..core.spec import (
    GraphError,
    check_acyclic,
    evaluate,
    graph_order,
    pack_results,
    parse_graph,
    wanted_keys,
)
from ..engine.pool import in_task_thread
from .callbacks import CallbackRun, active_callbacks, task_scope

__all__ = ["get_sync"]


_CANNOT_READ_FUTURES = (
    "get_sync runs the graph in this thread, without a cluster: it cannot read a "
    "persisted collection's pieces (futures). Compute it where it was persisted "
    "(scheduler=client), or build it again without persist()."
)


def _dask_specs(dsk: Any) -> dict[Any, Any]:
    """The task specs of a dask graph, for a run in this thread (no futures here)."""
    from dask._task_spec import Alias, convert_legacy_graph

    if not isinstance(dsk, Mapping):
        dsk = dsk.__dask_graph__()
    for key, value in dsk.items():
        if getattr(type(value), "__dask_future__", False):
            raise GraphError(f"Key {key!r} is a future. {_CANNOT_READ_FUTURES}", keys=(key,))
    specs = node_specs(convert_legacy_graph(dsk), Alias)
    for key, spec in specs.items():
        for dep in spec.dependencies:
            if dep not in specs:
                raise GraphError(
                    f"Task {key!r} needs key {dep!r}, which the graph does not define. "
                    f"{_CANNOT_READ_FUTURES}",
                    keys=(key, dep),
                )
    check_acyclic(specs)
    return specs


def get_sync(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """Compute ``keys`` (one key or a nested list of keys) of the dict graph ``dsk``
    in this thread; ``dsk`` may also be a dask collection's graph
    (``dask.compute(x, scheduler=kernel_cluster.get_sync)``). ``kwargs`` are accepted
    and ignored (dask passes some to a scheduler's ``get``)."""
    if is_dask_graph(dsk):  # dask.compute(x, scheduler=get_sync)
        specs = _dask_specs(dsk)
        if not isinstance(dsk, Mapping):
            dsk = dsk.__dask_graph__()  # what the hooks are shown
    else:
        specs = parse_graph(dsk)
    flat = wanted_keys(specs, keys)
    wanted = set(flat)
    order = graph_order(specs, list(dict.fromkeys(flat)))
    # only what the outputs need runs (the engine does the same)
    needed: set[Any] = set()
    stack = list(wanted)
    while stack:
        k = stack.pop()
        if k in needed:
            continue
        needed.add(k)
        stack.extend(specs[k].dependencies)
    run_keys = sorted(needed, key=order.__getitem__)
    deps = {k: specs[k].dependencies for k in run_keys}
    # none in a task (of get_sync, or of an engine's worker thread): nested
    callbacks = () if in_task_thread() else active_callbacks()
    run = CallbackRun(callbacks, dsk, deps) if callbacks else None
    cache: dict[Any, Any] = {}
    waiters = {k: 0 for k in run_keys}  # tasks still to read each value
    for k in run_keys:
        for d in deps[k]:
            waiters[d] += 1
    thread = threading.get_ident()
    errored = True
    try:
        if run is not None:
            run.state["cache"] = cache
            run.start()
        for k in run_keys:
            if run is not None:
                run.pretask(k)
            start = time.time()
            with task_scope():
                value = evaluate(specs[k].expr, cache)
            stop = time.time()
            cache[k] = value
            if run is not None:
                run.state["task_times"][k] = (start, stop)
                run.state["stored_times"][k] = stop
                run.posttask(k, value, run.worker_id("sync", thread))
            value = None
            for d in deps[k]:
                waiters[d] -= 1
                if waiters[d] == 0 and d not in wanted:
                    del cache[d]
                    if run is not None:
                        run.released(d, time.time())
        result = pack_results(keys, cache)
        errored = False
        return result
    finally:
        if run is not None:
            run.finish(errored)
