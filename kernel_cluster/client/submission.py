"""Submitting work: ``submit``, ``map``, ``get``, and dask collections (``compute``,
``persist``).

Each packs the submission with graph_packing.py's pure functions (which an
asynchronous client shares), then, under the client's lock, queues the one event
it makes and hands out the futures of its keys. With local callbacks active
(``with Profiler():``), ``get`` and ``compute`` go through callback_runs.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar, overload

from ..core.keys import Key
from ..core.scheduler_messages import GraphSubmitted
from ..core.spec import TaskSpec, pack_results, parse_graph, wanted_keys
from ..engine import code_sources
from ..engine.pool import in_task_thread
from ..local_diagnostics.callbacks import active_callbacks
from . import dask_graphs
from .base import ClientBase
from .callback_runs import compute_with_callbacks, get_with_callbacks
from .dask_graphs import DaskGraph, is_dask_graph
from .futures import Future, raise_if_failed
from .graph_packing import pack_call, pack_graph, pack_map, placement

C = TypeVar("C")  # a dask collection, persisted as the same kind of collection

Workers = Iterable[str] | str | None


class Submission(ClientBase):
    """The ways to submit work; the futures they return are results.Results' business."""

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        key: Key | None = None,
        pure: bool = True,
        workers: Workers = None,
        allow_other_workers: bool = False,
        **kwargs: Any,
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` on the cluster; futures among the arguments are inputs."""
        self._check_running()
        where = placement(workers, allow_other_workers, self.code_frames)
        files: set[str] = set()
        key, event = pack_call(self, fn, args, kwargs, key, pure, where, files)
        self._share_code_sources(files)
        with self._lock:
            return self._future(key, self._enqueue(event))

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        key: str | list[Key] | None = None,
        pure: bool = True,
        workers: Workers = None,
        allow_other_workers: bool = False,
        **kwargs: Any,
    ) -> list[Future]:
        """``submit`` over the items of ``iterables`` in one message to the scheduler."""
        self._check_running()
        where = placement(workers, allow_other_workers, self.code_frames)
        files: set[str] = set()
        keys, event = pack_map(self, fn, iterables, kwargs, key, pure, where, files)
        self._share_code_sources(files)
        with self._lock:
            seq = self._enqueue(event)
            return [self._future(k, seq) for k in keys]

    @overload
    def get(self, dsk: Any, keys: list[Any], **kwargs: Any) -> list[Any]: ...
    @overload
    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any: ...

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        """Compute ``keys`` (one key or a nested list of keys) of a dict graph: their
        values, nested as ``keys`` are.

        ``dsk`` may also be what dask hands a scheduler (an expression, or a dict of
        dask's task objects): ``dask.compute(x, scheduler=client.get)`` runs here."""
        self._check_running()
        graph: DaskGraph | None = None
        if is_dask_graph(dsk):
            graph = dask_graphs.convert(dsk, self)
            specs = graph.specs
        else:
            specs = parse_graph(dsk)
        # a dask graph may name a key a future of ours holds (a persisted collection)
        flat = wanted_keys(specs, keys, self._holds if graph is not None else None)
        wanted = list(dict.fromkeys(flat))
        callbacks = active_callbacks()
        if callbacks and not in_task_thread():  # local callbacks (Callback, profilers)
            return get_with_callbacks(self, dsk, specs, keys, wanted, graph, callbacks)
        event = self._graph_event(specs, wanted, graph)
        with self._lock:
            seq = self._enqueue(event)
            states = self._futures.want(wanted, seq)
        try:
            self._wait_all(states, True)
            raise_if_failed(wanted, states)
            data = self._gather_keys(wanted)
        finally:
            del states
            self._release_keys(wanted)
        return pack_results(keys, data)

    def _graph_event(
        self, specs: dict[Key, TaskSpec], wanted: list[Key], graph: DaskGraph | None = None
    ) -> GraphSubmitted:
        """A parsed graph as the scheduler takes it (pickled for worker processes:
        outside the client's lock)."""
        files: set[str] = set()
        where = placement(None, False, self.code_frames)
        event = pack_graph(self, specs, wanted, graph, where, files)
        self._share_code_sources(files)
        return event

    def _share_code_sources(self, files: set[str]) -> None:
        """Hand the scheduler the lines of the ``files`` of code pickled by value that
        worker processes cannot read (notebook cells: engine/code_sources.py), before
        the tasks running that code are queued, so that they reach every worker first.
        Once per file: the scheduler keeps them (read here; the loop thread adds)."""
        known = self._scheduler.code_sources
        new = {}
        for filename in files:
            if filename not in known:
                lines = code_sources.lines_only_here(filename)
                if lines is not None:
                    new[filename] = tuple(lines)
        if not new:
            return
        if self._loop.in_loop_thread():
            self._scheduler.add_code_sources(new)
        else:
            self._loop.run(self._scheduler.add_code_sources, new, timeout=30)

    # -- dask collections -------------------------------------------------------------

    @overload
    def compute(
        self,
        collections: list[Any] | tuple[Any, ...],
        optimize_graph: bool = ...,
        sync: Literal[False] = ...,
        workers: Workers = ...,
        allow_other_workers: bool = ...,
        retries: int | None = ...,
        **kwargs: Any,
    ) -> list[Future]: ...

    @overload
    def compute(
        self,
        collections: Any,
        optimize_graph: bool = ...,
        sync: Literal[False] = ...,
        workers: Workers = ...,
        allow_other_workers: bool = ...,
        retries: int | None = ...,
        **kwargs: Any,
    ) -> Future: ...

    @overload
    def compute(
        self,
        collections: Any,
        optimize_graph: bool = ...,
        *,
        sync: Literal[True],
        workers: Workers = ...,
        allow_other_workers: bool = ...,
        retries: int | None = ...,
        **kwargs: Any,
    ) -> Any: ...

    def compute(
        self,
        collections: Any,
        optimize_graph: bool = True,
        sync: bool = False,
        workers: Workers = None,
        allow_other_workers: bool = False,
        retries: int | None = None,
        **kwargs: Any,
    ) -> Future | list[Future] | Any:
        """Start computing a dask collection (or a list of them); a Future of its final
        value each (what ``dask.compute`` would return for it), or with ``sync=True``
        the values themselves. ``workers``/``retries`` apply to each of its tasks, as
        ``dask.annotate`` would; other keywords are ignored with a warning."""
        self._check_running()
        dask_graphs.refuse_options("compute", kwargs)
        if isinstance(collections, (list, tuple)) or sync:
            many = isinstance(collections, (list, tuple))
            futures: list[Any] = [
                self.compute(c, optimize_graph, False, workers, allow_other_workers, retries)
                for c in (collections if many else [collections])
            ]
            if sync:
                futures = self.gather(futures)
            return futures if many else futures[0]
        if not dask_graphs.is_collection(collections):
            raise TypeError(
                f"compute() takes dask collections, got {type(collections).__name__}; "
                "use submit() for a function call."
            )
        expr, key = dask_graphs.collection_graph(collections, optimize_graph)
        graph = dask_graphs.apply_options(
            dask_graphs.convert(expr, self), workers, allow_other_workers, retries
        )
        callbacks = active_callbacks()
        if callbacks and not in_task_thread():  # local callbacks (Callback, profilers)
            return compute_with_callbacks(self, expr, graph.specs, key, graph, callbacks)
        event = self._graph_event(graph.specs, [key], graph)
        with self._lock:
            return self._future(key, self._enqueue(event))

    @overload
    def persist(
        self,
        collections: list[C] | tuple[C, ...],
        optimize_graph: bool = ...,
        workers: Workers = ...,
        allow_other_workers: bool = ...,
        retries: int | None = ...,
        **kwargs: Any,
    ) -> list[C]: ...

    @overload
    def persist(
        self,
        collections: C,
        optimize_graph: bool = ...,
        workers: Workers = ...,
        allow_other_workers: bool = ...,
        retries: int | None = ...,
        **kwargs: Any,
    ) -> C: ...

    def persist(
        self,
        collections: Any,
        optimize_graph: bool = True,
        workers: Workers = None,
        allow_other_workers: bool = False,
        retries: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start computing a dask collection (or a list of them) and return the same
        kind of collection, made of futures: computing it later reuses them.
        ``workers``/``retries`` as for ``compute``; other keywords (what
        ``dask.persist`` passes on) are ignored with a warning."""
        self._check_running()
        dask_graphs.refuse_options("persist", kwargs)
        active_callbacks()  # dask's own callbacks see nothing here: warns if any are active
        many = isinstance(collections, (list, tuple))
        colls: list[Any] = (
            list(collections) if isinstance(collections, (list, tuple)) else [collections]
        )
        for c in colls:
            if not dask_graphs.is_collection(c):
                raise TypeError(
                    f"persist() takes dask collections, got {type(c).__name__}; "
                    "use submit() for a function call."
                )
        expr, keys = dask_graphs.persist_graph(colls, optimize_graph)
        graph = dask_graphs.apply_options(
            dask_graphs.convert(expr, self), workers, allow_other_workers, retries
        )
        wanted = list(dict.fromkeys(k for ks in keys for k in ks))
        event = self._graph_event(graph.specs, wanted, graph)
        with self._lock:
            seq = self._enqueue(event)
            futures = {k: self._future(k, seq) for k in wanted}
        out = []
        for c, ks in zip(colls, keys):
            rebuild, state = c.__dask_postpersist__()
            out.append(rebuild({k: futures[k] for k in ks}, *state))
        return out if many else out[0]
