"""The user's door: Client and the default embedded cluster.

The client runs in the user's thread (the kernel). It never touches engine
state directly: it queues core events for the scheduler, flushed once per
loop iteration, and receives per-key reports back on the loop thread.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

from ..core.keys import Key, validate_key
from ..core.scheduler_messages import (
    ClientCancelledKeys,
    ClientReleasedKeys,
    GraphSubmitted,
)
from ..core.spec import (
    Call,
    TaskSpec,
    graph_order,
    pack_results,
    parse_graph,
    wanted_keys,
)
from ..core.spec import MissingKeyError as MissingKeyError  # get's, importable here as before
from ..diagnostics.attach import set_default_source
from ..diagnostics.sources.engine_source import EngineSource
from ..engine.cluster import KernelCluster
from ..engine.comm import SerializationError
from ..engine.execute import unpack_exception
from ..engine.plugins import check_plugin
from ..engine.pool import in_task_thread
from ..local_diagnostics.callbacks import active_callbacks
from . import dask_graphs
from .call_keys import funcname, function_token, tokenize
from .callback_runs import compute_with_callbacks, get_with_callbacks
from .dask_graphs import DaskGraph, is_dask_graph
from .futures import (
    FAILED,
    Future,
    FutureRegistry,
    FutureState,
    raise_if_failed,
    run_callback,
    task_error,
)
from .graph_packing import (
    collect_futures,
    dumps_library_tasks,
    dumps_task,
    placement,
    rebuild,
    replace_futures,
)

_default_cluster: KernelCluster | None = None
_default_users: set[str] = set()  # ids of the open clients on the default cluster
_default_lock = threading.Lock()
_current_client: Client | None = None


def _default(client_id: str) -> KernelCluster:
    """The default cluster, started if need be, with ``client_id`` among its users.

    It lives while any client uses it: the last one to close closes it (and the
    process's exit closes whatever is left).
    """
    global _default_cluster
    with _default_lock:
        if _default_cluster is None or _default_cluster.status != "running":
            _default_cluster = KernelCluster()
            _default_users.clear()
        _default_users.add(client_id)
        return _default_cluster


def _leave_default(cluster: KernelCluster, client_id: str) -> None:
    """``client_id`` no longer uses the default ``cluster``: close it if it was the last."""
    global _default_cluster
    with _default_lock:
        if cluster is _default_cluster:
            _default_users.discard(client_id)
            if _default_users:
                return
            _default_cluster = None
    cluster.close()


def get_client() -> Client:
    """The most recently created client that is still open."""
    if _current_client is None or _current_client.status != "running":
        if in_task_thread():  # a task of a worker process: Client() would start a cluster
            raise ValueError(
                "No client in this worker process: tasks of KernelCluster(processes=True) "
                "cannot submit work or compute dask collections on the cluster (in an "
                "embedded cluster they can). Return what the nested work needs and run it "
                "from the kernel, or compute it inside the task with dask's own "
                'scheduler (scheduler="sync").'
            )
        raise ValueError("No client is open; create one with kernel_cluster.Client().")
    return _current_client


class Client:
    """Submit work to a KernelCluster and collect the results.

    ``Client()`` creates (or reuses) the default embedded cluster; ``Client(cluster)``
    attaches to one you made. The default cluster lives while any ``Client()`` on it
    is open: the last one to close stops it. A cluster you made is yours to close.
    """

    def __init__(
        self,
        cluster: KernelCluster | None = None,
        *,
        set_as_default: bool = True,
        code_frames: int = 1,
    ):
        """``code_frames``: how many frames of your code each span remembers (0: none)."""
        global _current_client
        self.id = f"Client-{uuid.uuid4().hex[:12]}"
        if cluster is None:
            cluster, owned = _default(self.id), True
        elif isinstance(cluster, KernelCluster):
            owned = False
            if cluster.status != "running":
                raise ValueError(f"{cluster!r} is not running; create a new KernelCluster.")
        else:
            raise TypeError(
                f"Client() takes a KernelCluster or nothing, got {type(cluster).__name__}."
            )
        self.cluster = cluster
        self.code_frames = code_frames
        self._owns_cluster = owned  # the default cluster, shared with other Client()s
        self.status = "running"
        self._loop = cluster.loop_thread
        self._scheduler = cluster.scheduler
        self._lock = threading.RLock()
        # the futures by key; Future objects call its methods through ours (FutureOwner)
        self._futures = futures = FutureRegistry(self._lock, self._schedule_flush, unpack_exception)
        self._inc_ref = futures.inc_ref
        self._dec_ref = futures.dec_ref
        self._release_keys = futures.release_keys
        self._on_done = futures.on_done
        self._wait_for = futures.wait_for
        self._wait_all = futures.wait_all
        self._outbox: list[tuple[int, Any]] = []
        self._flush_pending = False
        self._seq = itertools.count(1)
        # workers in other processes get tasks as bytes, pickled here so that a
        # function or argument that cannot travel fails at submit, naming the task
        self._pickle_tasks = cluster.processes
        try:
            self._loop.run(self._scheduler.add_client, self.id, futures.apply_reports)
        except BaseException:
            if owned:  # not a user of the default cluster after all
                _leave_default(cluster, self.id)
            raise
        self._source = EngineSource(cluster)
        if set_as_default:
            _current_client = self
            set_default_source(self._source)

    # -- sending events ---------------------------------------------------------------

    def _enqueue(self, event: Any) -> int:
        """Queue an event for the scheduler (caller holds the lock); returns its number."""
        futures = self._futures
        if futures.releases:
            self._outbox.append((next(self._seq), ClientReleasedKeys(self.id, futures.releases)))
            futures.releases = []
        seq = next(self._seq)
        self._outbox.append((seq, event))
        self._schedule_flush()
        return seq

    def _schedule_flush(self) -> None:
        if not self._flush_pending and self.status == "running":
            self._flush_pending = True
            try:
                self._loop.call_soon(self._flush)
            except RuntimeError:  # the cluster closed under us: nothing left to tell it
                pass

    def _flush(self) -> None:
        with self._lock:
            self._flush_pending = False
            futures = self._futures
            if futures.releases:
                self._outbox.append(
                    (next(self._seq), ClientReleasedKeys(self.id, futures.releases))
                )
                futures.releases = []
            batch = self._outbox
            self._outbox = []
        if batch:
            self._scheduler.handle_client_events(self.id, batch)

    def _future(self, key: Key, seq: int) -> Future:
        """A future for ``key`` sharing the state of any other future for it (lock held)."""
        return self._futures.future(key, seq, self)

    # -- submitting work --------------------------------------------------------------

    def submit(
        self,
        fn: Callable,
        *args: Any,
        key: Key | None = None,
        pure: bool = True,
        workers: Iterable[str] | str | None = None,
        allow_other_workers: bool = False,
        **kwargs: Any,
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` on the cluster; futures among the arguments are inputs."""
        if not callable(fn):
            raise TypeError(f"submit() needs a callable first, got {type(fn).__name__} {fn!r}.")
        self._check_running()
        deps: set = set()
        args2 = tuple(replace_futures(a, deps, self) for a in args)
        kwargs2 = replace_futures(kwargs, deps, self) if kwargs else None
        if key is None:
            token = tokenize(function_token(fn), args2, kwargs2) if pure else uuid.uuid4().hex
            key = f"{funcname(fn)}-{token}"
        else:
            validate_key(key)
        spec = TaskSpec(Call(fn, args2, kwargs2), frozenset(deps))
        payload = dumps_task(key, spec) if self._pickle_tasks else spec
        with self._lock:
            event = GraphSubmitted(
                self.id,
                {key: payload},
                {key: spec.dependencies},
                [key],
                None,
                placement(workers, allow_other_workers, self.code_frames),
            )
            seq = self._enqueue(event)
            return self._future(key, seq)

    def map(
        self,
        fn: Callable,
        *iterables: Iterable,
        key: str | list[Key] | None = None,
        pure: bool = True,
        workers: Iterable[str] | str | None = None,
        allow_other_workers: bool = False,
        **kwargs: Any,
    ) -> list[Future]:
        """``submit`` over the items of ``iterables`` in one message to the scheduler."""
        if not callable(fn):
            raise TypeError(f"map() needs a callable first, got {type(fn).__name__} {fn!r}.")
        if not iterables:
            raise TypeError("map() needs at least one iterable of arguments.")
        self._check_running()
        columns = [list(it) for it in iterables]
        n = min(len(c) for c in columns)
        deps_kw: set = set()
        kwargs2 = replace_futures(kwargs, deps_kw, self) if kwargs else None
        if isinstance(key, list):
            if len(key) != n:
                raise ValueError(f"map() got {len(key)} keys for {n} tasks.")
            for k in key:
                validate_key(k)
            keys = key
        else:
            prefix = key if isinstance(key, str) else funcname(fn)
            keys = []
        ftoken = function_token(fn) if pure else ""
        specs: dict[Key, TaskSpec | bytes] = {}  # bytes: pickled for worker processes
        dependencies: dict[Key, frozenset] = {}
        order: dict[Key, int] = {}
        out_keys = []
        for i in range(n):
            deps = set(deps_kw)
            args = tuple(replace_futures(c[i], deps, self) for c in columns)
            if isinstance(key, list):
                k = keys[i]
            elif pure:
                k = f"{prefix}-{tokenize(ftoken, args, kwargs2)}"
            else:
                k = f"{prefix}-{uuid.uuid4().hex}"
            out_keys.append(k)
            if k in specs:
                continue
            spec = TaskSpec(Call(fn, args, kwargs2), frozenset(deps))
            specs[k] = dumps_task(k, spec) if self._pickle_tasks else spec
            dependencies[k] = spec.dependencies
            order[k] = i
        with self._lock:
            event = GraphSubmitted(
                self.id,
                specs,
                dependencies,
                list(specs),
                order,
                placement(workers, allow_other_workers, self.code_frames),
            )
            seq = self._enqueue(event)
            return [self._future(k, seq) for k in out_keys]

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        """Compute ``keys`` (one key or a nested list of keys) of a dict graph.

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
            self._wait_all(states, fail_fast=True)
            raise_if_failed(wanted, states)
            data = self._gather_keys(wanted)
        finally:
            del states
            self._release_keys(wanted)
        return pack_results(keys, data)

    def _graph_event(
        self, specs: dict[Key, TaskSpec], wanted: list[Key], graph: DaskGraph | None = None
    ) -> GraphSubmitted:
        """A parsed graph as the scheduler takes it (pickled here for worker processes,
        outside the client's lock)."""
        order = graph_order(specs, wanted)
        ann = placement(None, False, self.code_frames)
        if graph is not None:
            if graph.priority:
                order = dask_graphs.prioritized(order, graph.priority)
            if graph.annotations:
                ann = {**(ann or {}), "tasks": graph.annotations}
            if graph.ignored:
                dask_graphs.warn_ignored(graph.ignored)
        deps = {k: s.dependencies for k, s in specs.items()}
        payloads: dict = specs
        if self._pickle_tasks:
            payloads = (
                dumps_library_tasks(specs)
                if graph is not None
                else {k: dumps_task(k, s) for k, s in specs.items()}
            )
        return GraphSubmitted(self.id, payloads, deps, wanted, order, ann)

    def _holds(self, key: Key) -> bool:
        """Whether a future of this client holds ``key`` (its value is or will be on
        the cluster): a graph may read it without defining it."""
        with self._lock:
            return self._futures.refcount.get(key, 0) > 0

    # -- dask collections -------------------------------------------------------------

    # dask.compute(x, scheduler=client) takes an object named like a Client with a
    # ``get`` as a scheduler, if it is not asynchronous: this one never is
    asynchronous = False

    def compute(
        self,
        collections: Any,
        optimize_graph: bool = True,
        sync: bool = False,
        workers: Iterable[str] | str | None = None,
        allow_other_workers: bool = False,
        retries: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Start computing a dask collection (or a list of them); a Future of its final
        value each (what ``dask.compute`` would return for it), or with ``sync=True``
        the values themselves. ``workers``/``retries`` apply to each of its tasks, as
        ``dask.annotate`` would; other keywords are ignored with a warning."""
        self._check_running()
        dask_graphs.refuse_options("compute", kwargs)
        if isinstance(collections, (list, tuple)) or sync:
            many = isinstance(collections, (list, tuple))
            futures = [
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

    def persist(
        self,
        collections: Any,
        optimize_graph: bool = True,
        workers: Iterable[str] | str | None = None,
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
        many = isinstance(collections, (list, tuple))
        colls = list(collections) if many else [collections]
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

    # -- collecting results -----------------------------------------------------------

    def gather(self, futures: Any, errors: str = "raise") -> Any:
        """Values for a future, or a (nested) list / tuple / dict of futures.

        ``errors="skip"`` leaves out failed and cancelled futures instead of raising.
        """
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors={errors!r}: use 'raise' or 'skip'.")
        flat: list[Future] = []
        collect_futures(futures, flat)
        self._wait_all([f._state for f in flat], fail_fast=errors == "raise")
        good = []
        failed: tuple[FutureState, Key] | None = None
        for f in flat:
            status = f._state.status
            if status == "finished":
                good.append(f.key)
            elif errors == "raise" and status in FAILED:  # others may still be pending
                failed = f._state, f.key
                break
        if failed is not None:
            # the traceback keeps this frame: let go of the futures first (see Future.result)
            del futures, flat, f
            st, key = failed
            raise_if_failed([key], [st])
        data = self._gather_keys(list(dict.fromkeys(good))) if good else {}
        return rebuild(futures, data)

    def _gather_keys(self, keys: list[Key], timeout: float | None = None) -> dict:
        """The values of ``keys``; ``timeout``: seconds to wait for values being computed
        again (their worker died), then TimeoutError."""
        if self.status != "running":
            raise RuntimeError(
                f"Cannot fetch the result of {keys[0]!r}: {self.id} is closed, and the results "
                "it held were released with it. Gather what you need before client.close(), "
                "or compute it again with a new Client()."
            )
        self._check_running()
        if timeout is None:
            data, missing = self._loop.run(self._scheduler.gather, keys)
        else:  # the engine's own answer says why; ours only if its loop is stalled
            deadline = time.monotonic() + timeout
            data, missing = self._loop.run(
                self._scheduler.gather, keys, deadline, timeout=timeout + 1.0
            )
        if missing:
            with self._lock:
                erred = [self._futures.states.get(k) for k in missing]
            for st in erred:  # e.g. a result that turned out not to be serialisable
                if st is not None and st.status == "error" and st.exception is not None:
                    raise task_error(st)
            raise KeyError(
                f"{len(missing)} results are no longer on the cluster (first: {missing[0]!r}); "
                "they were released or their worker was lost."
            )
        return data

    def cancel(self, futures: Future | Iterable[Future]) -> None:
        """Stop these tasks (and whatever depends on them) if they have not finished."""
        if isinstance(futures, Future):
            fs: list[Any] = [futures]  # checked below
        else:
            try:
                fs = list(futures)
            except TypeError:
                fs = [futures]
        for f in fs:
            if not isinstance(f, Future):
                raise TypeError(
                    f"cancel() takes a Future or a list of Futures, got {type(f).__name__} "
                    f"{f!r}; to cancel by key, keep the future that submit() returned."
                )
        keys = [f.key for f in fs]
        if not keys or self.status != "running":
            return
        with self._lock:
            self._enqueue(ClientCancelledKeys(self.id, keys))
            callbacks = self._futures.detach_cancelled(fs)
        for cb in callbacks:
            run_callback(cb)

    # -- information ------------------------------------------------------------------

    def scheduler_info(self) -> dict:
        """The workers (address, name, threads, memory, pid, ...) and task counts."""
        self._check_running()
        return self._loop.run(self._scheduler.scheduler_info)

    def fine_metrics(self, unit: str | None = "seconds", span: Any = None) -> Any:
        """Where the workers' time went: a DataFrame with columns context, span,
        function, activity, unit and value. ``unit=None`` keeps every unit; see
        ``kernel_cluster.diagnostics.queries.fine_metrics`` for the by-function and
        by-activity tables."""
        from ..diagnostics.queries.fine_metrics import span_frame, to_frame

        self._check_running()
        if span is None:
            return to_frame(self.diagnostics.fine_metrics(), unit=unit)
        metrics, label = self.diagnostics.span_metrics(span)
        return span_frame(metrics, label, unit=unit)

    def register_plugin(self, plugin: Any, name: str | None = None) -> str:
        """Add a SchedulerPlugin (an instance); it is called from the engine's thread.
        Returns its name."""
        check_plugin(plugin, name)
        self._check_running()
        return self._loop.run(self._scheduler.register_plugin, plugin, name)

    def unregister_plugin(self, name: str) -> None:
        self._check_running()
        self._loop.run(self._scheduler.unregister_plugin, name)

    def get_task_stream(self) -> Any:
        """``with client.get_task_stream() as ts:``, then ``ts.data``: the records of
        exactly the tasks that ran inside the block."""
        from ..diagnostics.queries.task_stream import TaskStreamRecorder

        self._check_running()
        return TaskStreamRecorder(self.diagnostics)

    def task_stream(
        self, start: Any = None, stop: Any = None, count: int | None = None
    ) -> list[dict[str, Any]]:
        """Task stream records of tasks that ended between ``start`` and ``stop``
        (timestamps, or durations ago such as ``"10s"``); the last ``count`` of them,
        as dicts (``diagnostics.snapshots.TaskStreamRecord.as_dict``)."""
        from ..diagnostics.queries.timewindow import resolve_window

        if count is not None and (
            isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0
        ):
            raise ValueError(
                f"count={count!r}: give how many of the latest records to return, an int "
                ">= 0 (0 or None: all of them)."
            )
        self._check_running()
        source = self.diagnostics
        start_t, stop_t = resolve_window(start, stop, source.now())
        records = source.task_stream(start=start_t, stop=stop_t, count=count and int(count))
        return [r.as_dict() for r in records]

    def profile(
        self,
        start: Any = None,
        stop: Any = None,
        key: Any = None,
        prefix: str | None = None,
        workers: Any = None,
        filename: Any = None,
    ) -> dict:
        """The workers' statistical profile, merged: a count tree ``{"description",
        "count", "own", "identifier", "children"}``. ``start`` / ``stop``: timestamps or
        durations ago (``"10s"``); ``key`` / ``prefix``: one task prefix; ``workers``:
        addresses or names; ``filename``: also write an HTML flame graph there."""
        from ..diagnostics.pages.profile_page import profile_to_file
        from ..diagnostics.queries.profile import profile

        self._check_running()
        if filename is not None:
            return profile_to_file(self.diagnostics, filename, start, stop, key, prefix, workers)
        return profile(self.diagnostics, start, stop, key, prefix, workers)

    def profile_metadata(self, start: Any = None, stop: Any = None, workers: Any = None) -> dict:
        """Profile samples over time, in total and per task prefix (for a timeline):
        ``{"counts": [(time, n)], "keys": {prefix: [(time, n)]}}``."""
        from ..diagnostics.queries.profile import profile_metadata

        self._check_running()
        return profile_metadata(self.diagnostics, start, stop, workers)

    def dashboard(self, **kwargs: Any) -> Any:
        """Live widgets for a notebook: progress per task prefix, the span tree and
        the fine metrics panels in one view (``kernel_cluster.jupyter.widgets``)."""
        from ..jupyter.widgets import dashboard

        self._check_running()
        return dashboard(self, **kwargs)

    def spans(self) -> Any:
        """The span tree as plain data: ``.roots``, ``[span_id]``, ``.to_pandas()``."""
        from ..diagnostics.spans import SpanTreeView

        self._check_running()
        return SpanTreeView(self.diagnostics.spans())

    @property
    def diagnostics(self) -> EngineSource:
        """The read-only DiagnosticsSource every view of this client's cluster reads."""
        return self._source

    _diagnostics = diagnostics  # the name earlier versions used

    def run(
        self, fn: Callable, *args: Any, workers: list[str] | None = None, **kwargs: Any
    ) -> dict:
        """Call ``fn(*args, **kwargs)`` on every worker (or those in ``workers``), with
        ``dask_worker=worker`` too if ``fn`` takes that.

        Returns ``{worker_address: result}``; an exception on any worker is raised here.
        """
        self._check_running()
        if args or kwargs:
            fn = functools.partial(fn, *args, **kwargs)
        if not self.cluster.processes:
            return self._loop.run(self._scheduler.run_on_workers, fn, workers)
        pickled = self._loop.run(self._scheduler.run_on_workers, _PickledResult(fn), workers)
        return {address: cloudpickle.loads(data) for address, data in pickled.items()}

    def restart(self) -> None:
        """Cancel every future on the cluster and replace every worker."""
        self._check_running()
        self.cluster.restart()

    def _check_running(self) -> None:
        if self.status != "running":
            raise RuntimeError(f"{self.id} is closed; create a new Client().")
        if self.cluster.status != "running":
            raise RuntimeError(
                f"{self.cluster.name} is closed; {self.id} cannot run anything on it. "
                "Create a new KernelCluster and Client."
            )

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        global _current_client
        if self.status == "closed":
            return
        with self._lock:
            self.status = "closing"
            self._futures.tracking = False
        if self.cluster.status == "running":
            try:
                self._loop.run(self._flush)
                self._loop.run(self._scheduler.remove_client, self.id)
            except (TimeoutError, RuntimeError):
                pass
        with self._lock:
            self.status = "closed"
            reason = (
                f"{self.id} was closed before it finished; keep the client open until "
                "you have gathered the results you need"
            )
            callbacks = self._futures.cancel_pending(reason)
        for cb in callbacks:
            run_callback(cb)
        if _current_client is self:
            _current_client = None
            set_default_source(None)
        if self._owns_cluster:
            _leave_default(self.cluster, self.id)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError(
            f"{self.id} cannot be pickled: a task in a worker process cannot use the client "
            "that submitted it. Pass the values it needs (or futures, which arrive as values) "
            "as arguments to submit() instead."
        )

    def __repr__(self) -> str:
        info = self.cluster
        return f"<Client {self.id} {self.status}, cluster={info!r}>"


class _PickledResult:
    """``client.run``'s function as a worker process calls it: the result is pickled
    there, so one that cannot travel raises an error naming it (and the fix) instead
    of breaking the connection it was to be sent on."""

    def __init__(self, fn: Callable):
        self.fn = fn

    async def __call__(self, dask_worker: Any) -> bytes:
        import inspect

        fn = self.fn
        try:
            takes_worker = "dask_worker" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_worker = False
        result = fn(dask_worker=dask_worker) if takes_worker else fn()
        if inspect.isawaitable(result):
            result = await result
        try:
            return cloudpickle.dumps(result, protocol=5)
        except Exception as exc:
            raise SerializationError(
                f"the result of client.run({funcname(fn)}) on worker "
                f"{getattr(dask_worker, 'address', '?')}",
                type(result).__name__,
                f"{type(exc).__name__}: {exc}",
            ) from None
