"""Graph packing: what the client sends the scheduler for a submission.

``pack_call``, ``pack_map`` and ``pack_graph`` make the one event a submission is
(``GraphSubmitted``) and the keys it asks for. They are pure: no lock, no future, no
engine call, so the synchronous ``Client`` and an asynchronous one share them; the
caller then queues the event and makes its own kind of future for the keys.

Under them: arguments with their futures swapped for references
(``replace_futures``), tasks pickled for another process with an error naming the
part that cannot travel (``dumps_task``; code pickled by value keeps its file name,
and ``files`` collects those names for the caller to share the lines of, see
engine/code_sources.py), and a submission's annotations: its span, where it may
run, the user's code that made it (``placement``).
``collect_futures``/``rebuild`` do the reverse for ``gather``.
"""

from __future__ import annotations

import linecache
import pickle
import sys
import uuid
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, Protocol

import cloudpickle

from ..core.annotations import current_span
from ..core.keys import Key, validate_key
from ..core.scheduler_messages import GraphSubmitted
from ..core.spec import Call, Ref, TaskSpec, graph_order, holds_refs
from ..core.user_frames import is_library_frame
from ..diagnostics.spans import note_submission
from ..engine import code_sources
from ..engine.comm import SerializationError
from . import dask_graphs
from .call_keys import funcname, function_token, tokenize
from .dask_graphs import DaskGraph
from .futures import Future

__all__ = [
    "Packer",
    "collect_futures",
    "dumps_library_tasks",
    "dumps_task",
    "pack_call",
    "pack_graph",
    "pack_map",
    "placement",
    "rebuild",
    "replace_futures",
    "user_code",
]

Placement = dict[str, Any] | None  # a submission's annotations (``placement``)


class Packer(Protocol):
    """The client a submission is packed for: its id, whether its workers are other
    processes (tasks travel pickled), and the cluster whose futures it accepts as
    arguments (a future's ``client.cluster``)."""

    @property
    def id(self) -> str: ...
    @property
    def cluster(self) -> object: ...
    @property
    def _pickle_tasks(self) -> bool: ...


def pack_call(
    client: Packer,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: Key | None,
    pure: bool,
    where: Placement,
    files: set[str] | None = None,
) -> tuple[Key, GraphSubmitted]:
    """``submit(fn, *args, **kwargs)`` as the scheduler takes it: its key and event."""
    if not callable(fn):
        raise TypeError(f"submit() needs a callable first, got {type(fn).__name__} {fn!r}.")
    deps: set[Key] = set()
    args2 = tuple(replace_futures(a, deps, client) for a in args)
    kwargs2 = replace_futures(kwargs, deps, client) if kwargs else None
    if key is None:
        token = tokenize(function_token(fn), args2, kwargs2) if pure else uuid.uuid4().hex
        key = f"{funcname(fn)}-{token}"
    validate_key(key)
    spec = TaskSpec(Call(fn, args2, kwargs2), frozenset(deps))
    payload = dumps_task(key, spec, files) if client._pickle_tasks else spec
    event = GraphSubmitted(client.id, {key: payload}, {key: spec.dependencies}, [key], None, where)
    return key, event


def pack_map(
    client: Packer,
    fn: Callable[..., Any],
    iterables: tuple[Iterable[Any], ...],
    kwargs: dict[str, Any],
    key: str | list[Key] | None,
    pure: bool,
    where: Placement,
    files: set[str] | None = None,
) -> tuple[list[Key], GraphSubmitted]:
    """``map(fn, *iterables, **kwargs)`` in one event: a key per item (repeated keys
    once in the event), and the event."""
    if not callable(fn):
        raise TypeError(f"map() needs a callable first, got {type(fn).__name__} {fn!r}.")
    if not iterables:
        raise TypeError("map() needs at least one iterable of arguments.")
    if key is not None and not isinstance(key, str | list):
        raise TypeError(
            f"map(key={key!r}): give a str (the keys' prefix) or a list of keys, one per task."
        )
    columns = [list(it) for it in iterables]
    n = min(len(c) for c in columns)
    deps_kw: set[Key] = set()
    kwargs2 = replace_futures(kwargs, deps_kw, client) if kwargs else None
    if isinstance(key, list):
        if len(key) != n:
            raise ValueError(f"map() got {len(key)} keys for {n} tasks.")
        first: dict[Key, int] = {}
        for i, k in enumerate(key):
            validate_key(k)
            j = first.setdefault(k, i)
            if j != i:
                raise ValueError(
                    f"map() got the key {k!r} twice (items {j} and {i}): each task needs a "
                    "key of its own. Give distinct keys, or leave key= out to have them made "
                    "from the arguments."
                )
        keys = key
    else:
        prefix = key if isinstance(key, str) else funcname(fn)
        validate_key(prefix)
        keys = []
    ftoken = function_token(fn) if pure else ""
    pickled = client._pickle_tasks
    specs: dict[Key, TaskSpec | bytes] = {}  # bytes: pickled for worker processes
    dependencies: dict[Key, frozenset[Key]] = {}
    order: dict[Key, int] = {}
    out_keys: list[Key] = []
    for i in range(n):
        deps = set(deps_kw)
        args = tuple(replace_futures(c[i], deps, client) for c in columns)
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
        specs[k] = dumps_task(k, spec, files) if pickled else spec
        dependencies[k] = spec.dependencies
        order[k] = i
    return out_keys, GraphSubmitted(client.id, specs, dependencies, list(specs), order, where)


def pack_graph(
    client: Packer,
    specs: dict[Key, TaskSpec],
    wanted: list[Key],
    graph: DaskGraph | None,
    where: Placement,
    files: set[str] | None = None,
) -> GraphSubmitted:
    """A parsed graph as the scheduler takes it (pickled here for worker processes:
    call it outside the client's lock). ``graph``: what a dask graph brings besides
    its specs (priorities, annotations), or None for a dict graph."""
    order = graph_order(specs, wanted)
    if graph is not None:
        if graph.priority:
            order = dask_graphs.prioritized(order, graph.priority)
        if graph.annotations:
            where = {**(where or {}), "tasks": graph.annotations}
        if graph.ignored:
            dask_graphs.warn_ignored(graph.ignored)
        dask_graphs.warn_lost_spans(graph)
    deps = {k: s.dependencies for k, s in specs.items()}
    payloads: dict[Key, Any] = specs
    if client._pickle_tasks:
        payloads = (
            dumps_library_tasks(specs, files)
            if graph is not None
            else {k: dumps_task(k, s, files) for k, s in specs.items()}
        )
    return GraphSubmitted(client.id, payloads, deps, wanted, order, where)


def dumps_task(key: Key, spec: TaskSpec, files: set[str] | None = None) -> bytes:
    """Pickle a task for another process, or say which part of it cannot travel.

    Code pickled by value keeps its file name (the profiler shows it); the names of
    those files are added to ``files``."""
    try:
        return code_sources.dumps(spec, protocol=5, files=files)
    except Exception as exc:
        call = spec.expr
        parts: list[tuple[str, Any]]
        if isinstance(call, Call):
            parts = [("the function", call.func)]
            parts += [(f"argument {i}", a) for i, a in enumerate(call.args)]
            parts += [(f"keyword argument {k!r}", v) for k, v in (call.kwargs or {}).items()]
        else:  # a dict graph's plain value ({"x": obj}), or a structure of them
            parts = [("the value", call)]
        for what, obj in parts:
            try:
                cloudpickle.dumps(obj, protocol=5)
            except Exception as inner:
                raise SerializationError(
                    f"{what} of task {key!r}",
                    type(obj).__name__,
                    f"{type(inner).__name__}: {inner}",
                ) from None
        raise SerializationError(
            f"task {key!r}", type(spec).__name__, f"{type(exc).__name__}: {exc}"
        ) from None


def send_main_by_value() -> None:
    """In a process that multiprocessing started with 'spawn' or 'forkserver', the
    script's module is ``__mp_main__``: cloudpickle sends ``__main__``'s functions by
    value, but would send these by reference, and a worker process cannot import
    ``__mp_main__``. Have them sent by value too (once per process)."""
    module = sys.modules.get("__mp_main__")
    if (
        module is not None
        and getattr(module, "__name__", None) == "__mp_main__"
        and "__mp_main__" not in cloudpickle.list_registry_pickle_by_value()
    ):
        cloudpickle.register_pickle_by_value(module)


def dumps_library_tasks(
    specs: dict[Key, TaskSpec], files: set[str] | None = None
) -> dict[Key, bytes]:
    """``dumps_task`` for many tasks whose functions are mostly importable library code
    (a dask graph's): plain pickle first, five to ten times faster than cloudpickle,
    which a task gets instead when plain pickle fails on it (a lambda, a closure) or
    names a module that cloudpickle would have sent by value (``__main__``, the
    modules registered with ``cloudpickle.register_pickle_by_value``)."""
    by_value = [b"__main__"]
    by_value += [name.encode() for name in cloudpickle.list_registry_pickle_by_value()]
    out: dict[Key, bytes] = {}
    for key, spec in specs.items():
        try:
            data = pickle.dumps(spec, protocol=5)
        except Exception:
            data = b""
        if not data or any(name in data for name in by_value):
            data = dumps_task(key, spec, files)
        out[key] = data
    return out


def worker_addresses(workers: Any, argument: str) -> tuple[str, ...]:
    """``workers=`` as a tuple of addresses: one address (a str) or several; TypeError
    naming the argument otherwise (``workers=5`` said "'int' object is not iterable")."""
    if isinstance(workers, str):
        return (workers,)
    try:
        addresses = tuple(workers)
    except TypeError:
        addresses = None
    if addresses is None or not all(isinstance(a, str) for a in addresses):
        raise TypeError(
            f"{argument}={workers!r}: give a worker's address (a str, such as "
            "'tcp://127.0.0.1:40123') or a list of them, as client.scheduler_info()"
            "['workers'] lists them."
        )
    return addresses


def placement(workers: Iterable[str] | str | None, loose: bool, code_frames: int = 1) -> Placement:
    """A submission's annotations: its span, where it may run, the code that made it."""
    out: dict[str, Any] = {}
    current = current_span.get()
    if current is not None:
        out["span"] = {"name": current[0], "ids": current[1]}
        note_submission(current[1])
    if code_frames:
        out["code"] = user_code(code_frames)
    if workers is not None:
        out["workers"] = worker_addresses(workers, "workers")
        out["allow_other_workers"] = loose
    return out or None


CodeFrame = tuple[str, int, str, str]  # (filename, line, function, source line)
_code_cache: dict[tuple[str, int], CodeFrame] = {}


def user_code(nframes: int) -> tuple[CodeFrame, ...]:
    """(filename, line, function, source line) of the user's frames calling us, innermost
    first; library frames (this package, dask, the standard library, installed
    packages: ``core.user_frames``) are skipped, as Dask skips its own."""
    frame: FrameType | None = sys._getframe(2)
    out: list[CodeFrame] = []
    while frame is not None and len(out) < nframes:
        if not is_library_frame(frame):
            filename = frame.f_code.co_filename
            where = (filename, frame.f_lineno)
            entry = _code_cache.get(where)
            if entry is None:
                line = linecache.getline(filename, frame.f_lineno).strip()
                entry = (filename, frame.f_lineno, frame.f_code.co_name, line)
                if len(_code_cache) < 10_000:
                    _code_cache[where] = entry
            out.append(entry)
        frame = frame.f_back
    return tuple(out)


def replace_futures(obj: Any, deps: set[Key], client: Packer) -> Any:
    """Arguments with every future swapped for a reference to its key."""
    t = type(obj)
    if t is Future:
        if obj.client is not client and obj.client.cluster is not client.cluster:
            raise ValueError(
                f"Future {obj.key!r} belongs to another cluster; gather it there first."
            )
        deps.add(obj.key)
        return Ref(obj.key)
    if t is tuple:
        items = [replace_futures(v, deps, client) for v in obj]
        if holds_refs(items):
            # tasks only look for references inside lists, dicts and calls: rebuild the
            # tuple from a list when it runs
            return Call(tuple, (items,))
        return tuple(items)
    if t is list:
        return [replace_futures(v, deps, client) for v in obj]
    if t is dict:
        return {k: replace_futures(v, deps, client) for k, v in obj.items()}
    if t not in _PLAIN_TYPES:  # one set lookup per argument once its type is known
        if not hasattr(t, "__dask_graph__"):
            if len(_PLAIN_TYPES) >= 4096:  # classes made on the fly must not pile up
                _PLAIN_TYPES.clear()
            _PLAIN_TYPES.add(t)
        elif "dask" in sys.modules:
            _refuse_collection(obj)
    return obj


# argument types that are no dask collection (a type either has __dask_graph__ or not)
_PLAIN_TYPES: set[type] = set()


def _refuse_collection(obj: Any) -> None:
    """A dask collection given as a task's argument would reach the task unevaluated
    (a lazy graph, computed by nobody or by dask's local scheduler inside the worker):
    say so, and how to pass its value."""
    from dask.base import is_dask_collection

    if is_dask_collection(obj):
        name = type(obj).__name__
        raise TypeError(
            f"A dask collection ({name}) was passed as a task's argument; the task would "
            f"get the lazy {name}, not its value. Pass client.compute(x) instead (a future "
            "of its value), or build the call with dask.delayed and compute it with "
            "scheduler=client."
        )


def collect_futures(obj: Any, out: list[Future]) -> None:
    t = type(obj)
    if t is Future:
        out.append(obj)
    elif t in (list, tuple, set, frozenset):
        for v in obj:
            collect_futures(v, out)
    elif t is dict:
        for v in obj.values():
            collect_futures(v, out)


def rebuild(obj: Any, data: dict[Key, Any]) -> Any:
    """``obj`` with each future replaced by its value in ``data`` (those missing from
    it, failed ones that ``gather(errors="skip")`` leaves out, dropped)."""
    t = type(obj)
    if t is Future:
        return data.get(obj.key)
    if t is list:
        return [rebuild(v, data) for v in obj if type(v) is not Future or v.key in data]
    if t is tuple:
        return tuple(rebuild(v, data) for v in obj if type(v) is not Future or v.key in data)
    if t is dict:
        return {
            k: rebuild(v, data) for k, v in obj.items() if type(v) is not Future or v.key in data
        }
    if t in (set, frozenset):
        return t(rebuild(v, data) for v in obj)
    return obj
