"""``Client.get`` and ``Client.compute`` with local callbacks: the engine's events,
turned into hooks.

Taken only when ``active_callbacks()`` is not empty, so a plain ``get`` pays one
context-variable read. Here the client registers a ``GraphEvents`` plugin for the
graph's keys (only if some hook wants per-task events), submits the graph, and
then, in the calling thread, drains the plugin's queue and calls the hooks until
the outputs are done (or one failed): hooks run where ``get`` was called, one at
a time, in the order the scheduler saw things happen.

What ``posttask`` gets as ``result``: with embedded workers the value itself, read
from the worker's memory as it was stored and held until the hook has seen it (a
value spilled to disk meanwhile is not read back: a ``RemoteValue`` stands for
it); with worker processes a ``RemoteValue`` (key, worker, size): values are not
shipped to the client for the callbacks. Metrics of the values
(``CacheProfiler(metric=...)``) are computed where the values live
(``diagnostics.value_metrics``) and handed over in ``state["value_metrics"]``
before ``finish``.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..core.keys import Key
from ..core.spec import TaskSpec, pack_results
from ..engine.graph_events import ERRED, FREED, POST, PRE, RETRY, GraphEvents
from ..local_diagnostics import value_metrics
from ..local_diagnostics.callbacks import Callback, CallbackRun, RemoteValue
from .futures import raise_if_failed

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


class _EngineRun:
    """One computation's callbacks on the engine: the plugin, the run, the cleanup."""

    def __init__(
        self, client: Any, dsk: Any, specs: dict[Key, TaskSpec], callbacks: tuple[Callback, ...]
    ) -> None:
        if not isinstance(dsk, Mapping) and hasattr(dsk, "__dask_graph__"):
            dsk = dsk.__dask_graph__()  # the hooks index it by key
        self.client = client
        scheduler = client._scheduler
        self.processes = processes = client._pickle_tasks
        deps = {k: s.dependencies for k, s in specs.items()}
        self.run = run = CallbackRun(
            callbacks, dsk, deps, client=client, num_workers=scheduler.state.total_nthreads
        )
        self.fns = remote_metric_functions(callbacks) if processes else ()
        self.token = f"callbacks-{uuid.uuid4().hex}"
        self.plugin = GraphEvents(
            frozenset(specs), run.uses_results and not processes, scheduler.clock
        )
        self.events = self.plugin.events
        self.registered = False

    def begin(self, specs: dict[Key, TaskSpec]) -> dict[Key, TaskSpec]:
        """Call the start hooks and listen to the scheduler; returns the specs to send."""
        self.run.start()
        if self.run.wants_tasks:
            client = self.client
            client._loop.run(client._scheduler.register_plugin, self.plugin, self.token)
            self.registered = True
        return value_metrics.wrap(specs, self.token, self.fns) if self.fns else specs

    def pump(self) -> None:
        """Call the hooks for the events as they come, until ``_DONE``."""
        events, run, processes = self.events, self.run, self.processes
        while True:
            item = events.get()
            if item is _DONE:
                return
            _dispatch(run, item, processes)

    def drain(self) -> None:
        _drain(self.run, self.events, self.processes)

    def stop_listening(self) -> None:
        client = self.client
        try:
            if self.registered and client.cluster.status == "running":
                self.registered = False
                client._loop.run(client._scheduler.unregister_plugin, self.token)
        except (KeyError, RuntimeError, TimeoutError):
            pass

    def end(self, errored: bool) -> None:
        """Collect the value metrics, then the finish hooks (whatever happens before)."""
        try:
            if self.fns:
                metrics, errors = _collect_metrics(self.client, self.token, self.fns)
                self.run.state["value_metrics"] = metrics
                self.run.state["value_metric_errors"] = errors
        finally:
            self.run.finish(errored)

    def follow(self, state: Any) -> None:
        """``client.compute``'s run, on a thread of its own until its future is done."""
        errored = True
        try:
            self.pump()
            self.drain()
            errored = state.status != "finished"
        finally:
            self.stop_listening()
            self.end(errored)


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
    er = _EngineRun(client, dsk, specs, callbacks)
    events = er.events
    submitted = False
    errored = True
    try:
        sent = er.begin(specs)
        event = client._graph_event(sent, wanted, graph)  # pickled outside the lock
        with client._lock:
            seq = client._enqueue(event)
            states = client._futures.want(wanted, seq)
            submitted = True
        latch = client._futures.latch(states, True, lambda: events.put(_DONE))
        if latch is None:
            events.put(_DONE)
        er.pump()
        raise_if_failed(wanted, states)
        data = client._gather_keys(wanted)
        er.drain()
        result = pack_results(keys, data)
        errored = False
        return result
    finally:
        # each step whatever the one before did (a second Ctrl-C included): finish last
        try:
            er.stop_listening()
        finally:
            try:
                if submitted:
                    client._release_keys(wanted)
                    del states
            finally:
                er.end(errored)


def compute_with_callbacks(
    client: Any,
    dsk: Any,
    specs: dict[Key, TaskSpec],
    key: Key,
    graph: Any,
    callbacks: tuple[Callback, ...],
) -> Any:
    """``client.compute`` driving ``callbacks``: the start hooks here, the others on a
    thread of its own ("callbacks-..."), which ends once the future is done (finish
    then, with ``errored`` if it failed or was cancelled). Returns the future."""
    er = _EngineRun(client, dsk, specs, callbacks)
    try:
        sent = er.begin(specs)
        event = client._graph_event(sent, [key], graph)  # pickled outside the lock
        with client._lock:
            future = client._future(key, client._enqueue(event))
    except BaseException:
        er.stop_listening()
        er.end(True)
        raise
    state = future._state  # not the future: the thread must not keep the key wanted
    thread = threading.Thread(target=_follow, args=(er, state), name=er.token, daemon=True)
    runs = client._futures.hook_runs
    runs[state] = (threading.Event(), thread)  # result() waits for the finish hooks
    thread.start()
    client._on_done(state, lambda: er.events.put(_DONE))
    # a future dropped before it is done gets no report (its key is released): its
    # callbacks finish then, with errored=True, and the thread ends
    weakref.finalize(future, er.events.put, _DONE)
    return future


def _follow(er: _EngineRun, state: Any) -> None:
    """``er.follow``, then let the future's waiters go (``FutureRegistry.wait_hooks``)."""
    try:
        er.follow(state)
    finally:
        done, _ = er.client._futures.hook_runs.pop(state)
        done.set()


def _drain(run: CallbackRun, events: Any, processes: bool) -> None:
    while not events.empty():
        item = events.get()
        if item is not _DONE:
            _dispatch(run, item, processes)


def _dispatch(run: CallbackRun, item: tuple[Any, ...], processes: bool) -> None:
    kind = item[0]
    if kind is POST:
        _, key, worker, thread, t0, t1, now, nbytes, has_value, value = item
        s = run.state
        s["task_times"][key] = (t0, t1)
        s["stored_times"][key] = now
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
) -> tuple[dict[Key, dict[Callable[[Any], Any], float]], dict[Callable[[Any], Any], str]]:
    """The metrics the workers kept for this computation, by key and function, and the
    first error of each function that raised."""
    out: dict[Key, dict[Callable[[Any], Any], float]] = {}
    errors: dict[Callable[[Any], Any], str] = {}
    try:
        if client.status != "running" or client.cluster.status != "running":
            return out, errors
        per_worker = client.run(value_metrics.take, token)
    except Exception:
        logger.warning("Could not collect the value metrics of %s from the workers", token)
        return out, errors
    for kept, failed in per_worker.values():
        for key, values in kept.items():
            out[key] = dict(zip(fns, values, strict=True))
        for i, text in failed.items():
            errors.setdefault(fns[i], text)
    return out, errors
