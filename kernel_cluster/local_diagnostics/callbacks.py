"""Local callbacks: five hooks into one computation, in the calling process.

A ``Callback`` is active in a ``with`` block (for computations started in that
thread or context, as ``span`` is) or everywhere in this process after
``register()``. A computation (``Client.get``, ``kernel_cluster.get_sync``, and
through them ``dask.compute(..., scheduler=client)``) takes the active callbacks
when it starts and drives them through a ``CallbackRun``: ``start(dsk)``,
``start_state(dsk, state)``, ``pretask(key, dsk, state)`` per task started,
``posttask(key, result, dsk, state, id)`` per task finished, and
``finish(dsk, state, errored)`` once, also after an error or a KeyboardInterrupt.

Every hook runs in the thread that called the computation, one at a time, in the
order the events happened. A hook that raises is logged once, naming it, and is
not called again during that computation; the computation's result is unchanged.
A computation started from inside a task (a nested ``get``) fires none of the
callbacks: the outer ones see that task as one task.

``state`` is a dict (see ``CallbackRun``); what it holds differs from Dask's local
scheduler, whose state is its own bookkeeping: here the values live on the
workers, so there is no ``"cache"`` of values unless the computation runs in this
thread (``get_sync``).
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple

from ..core.keys import Key
from ..core.user_frames import user_stacklevel

logger = logging.getLogger(__name__)

__all__ = [
    "Callback",
    "CallbackRun",
    "RemoteValue",
    "active_callbacks",
    "in_task",
    "task_scope",
]

HOOKS = ("start", "start_state", "pretask", "posttask", "finish")

# register(): every computation in this process; ``with``: those of this context
_registered: dict[int, Callback] = {}
_registered_lock = threading.Lock()
_scoped: ContextVar[tuple[Callback, ...]] = ContextVar("kernel_cluster_callbacks", default=())
# set while this thread runs a task of get_sync (the engine's task threads are told
# apart by the client): a computation started there is nested
_task_depth = threading.local()
# (worker, thread) -> the id posttask gets, for the life of the process
_worker_ids: dict[tuple[Any, Any], int] = {}
_worker_ids_lock = threading.Lock()


class Callback:
    """Hooks called as a computation runs: pass functions, or subclass and override
    ``_start``, ``_start_state``, ``_pretask``, ``_posttask`` and ``_finish``.

    >>> def show(key, dsk, state):
    ...     print("computing", key)
    >>> with Callback(pretask=show):
    ...     client.get(dsk, "c")
    """

    # a callback that never looks at ``result`` in posttask says so: the engine then
    # reads no value for it (ProgressBar, Profiler)
    uses_result: bool = True

    def __init__(
        self,
        start: Callable[[Any], Any] | None = None,
        start_state: Callable[[Any, dict[str, Any]], Any] | None = None,
        pretask: Callable[[Any, Any, dict[str, Any]], Any] | None = None,
        posttask: Callable[[Any, Any, Any, dict[str, Any], Any], Any] | None = None,
        finish: Callable[[Any, dict[str, Any], bool], Any] | None = None,
    ) -> None:
        given = (start, start_state, pretask, posttask, finish)
        for name, fn in zip(HOOKS, given):
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"Callback({name}=...) takes a function, got {type(fn).__name__} {fn!r}."
                )
        # a hook given here wins; otherwise a subclass's override; otherwise none
        for name, fn in zip(HOOKS, given):
            if fn is not None:
                setattr(self, "_" + name, fn)
        self._tokens: list[Any] = []

    @property
    def _callback(self) -> tuple[Callable[..., Any] | None, ...]:
        """The five hooks in the seed's order (start, start_state, pretask, posttask,
        finish), ``None`` where there is none."""
        return tuple(self.hook(name) for name in HOOKS)

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The function to call for hook ``name``, or None: an instance attribute set by
        ``__init__``, or a method a subclass overrides."""
        fn = self.__dict__.get("_" + name)
        if fn is not None:
            return fn  # type: ignore[no-any-return]
        method = getattr(type(self), "_" + name, None)
        if method is None or method is getattr(Callback, "_" + name, None):
            return None
        return getattr(self, "_" + name)  # type: ignore[no-any-return]

    # the hooks a subclass overrides (the base class defines them as doing nothing)
    def _start(self, dsk: Any) -> None: ...
    def _start_state(self, dsk: Any, state: dict[str, Any]) -> None: ...
    def _pretask(self, key: Any, dsk: Any, state: dict[str, Any]) -> None: ...
    def _posttask(
        self, key: Any, result: Any, dsk: Any, state: dict[str, Any], id: Any
    ) -> None: ...
    def _finish(self, dsk: Any, state: dict[str, Any], errored: bool) -> None: ...

    # -- activation ----------------------------------------------------------------

    def __enter__(self) -> Any:
        # (setdefault: a subclass's __init__ may not call ours)
        tokens: list[Any] = self.__dict__.setdefault("_tokens", [])
        tokens.append(_scoped.set((*_scoped.get(), self)))
        return self

    def __exit__(self, *exc: Any) -> None:
        token = self.__dict__["_tokens"].pop()
        try:
            _scoped.reset(token)
        except ValueError:  # left in another context than it entered: drop it there
            _scoped.set(tuple(c for c in _scoped.get() if c is not self))

    def register(self) -> None:
        """Active for every computation in this process until ``unregister()``."""
        with _registered_lock:
            _registered[id(self)] = self

    def unregister(self) -> None:
        """No longer active for every computation (a ``with`` block still is)."""
        with _registered_lock:
            _registered.pop(id(self), None)

    @property
    def registered(self) -> bool:
        return id(self) in _registered


def in_task() -> bool:
    """Whether this thread is running a task of ``get_sync`` right now."""
    return getattr(_task_depth, "n", 0) > 0


class task_scope:
    """Marks this thread as running a task (``get_sync``): computations started in
    it are nested and fire no callbacks."""

    def __enter__(self) -> None:
        _task_depth.n = getattr(_task_depth, "n", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _task_depth.n -= 1


def active_callbacks() -> tuple[Callback, ...]:
    """The callbacks a computation starting now in this thread drives: those of the
    enclosing ``with`` blocks, then the registered ones (each once). Cheap when there
    are none: one context-variable read and one dict test."""
    scoped = _scoped.get()
    dask_callbacks = sys.modules.get("dask.callbacks")
    if dask_callbacks is not None and getattr(dask_callbacks.Callback, "active", None):
        _warn_dask_callbacks(dask_callbacks.Callback.active)
    if not _registered and not scoped:
        return ()
    if in_task():
        return ()
    with _registered_lock:
        registered = list(_registered.values())
    out = list(dict.fromkeys([*scoped, *registered]))
    return tuple(out)


def _warn_dask_callbacks(active: Any) -> None:
    """Dask's own callbacks fire only in dask's local schedulers: one kept from a
    dask script (``from dask.diagnostics import ProgressBar``) would show nothing
    here, silently. Say so, naming ours."""
    dask_callback = sys.modules["dask.callbacks"].Callback
    names = set()
    for hooks in list(active):
        # a subclass's hooks are its bound methods; Callback(pretask=f) holds plain f
        owners = (getattr(h, "__self__", None) for h in hooks if h is not None)
        owner = next((o for o in owners if isinstance(o, dask_callback)), None)
        names.add(type(owner).__name__ if owner is not None else "Callback")
    for name in sorted(names):
        ours = name if name in _OURS else "Callback"
        warnings.warn(
            f"dask's {name} is active, but dask's callbacks see only dask's own "
            f"schedulers, not this computation; use kernel_cluster.diagnostics.{ours} "
            "instead (the same API).",
            UserWarning,
            stacklevel=user_stacklevel(),
        )


_OURS = ("CacheProfiler", "Callback", "ProgressBar", "Profiler", "ResourceProfiler")


class RemoteValue(NamedTuple):
    """``posttask``'s ``result`` when the value lives in a worker process: where it is
    and how large (the engine's ``sizeof``). The value itself stays there."""

    key: Any
    worker: str
    nbytes: int


class CallbackRun:
    """One computation's callbacks, and the ``state`` they are shown.

    ``state`` holds, as the computation goes (sets of keys unless said otherwise):

    - ``"dependencies"``, ``"dependents"``: key -> set of keys, for the whole graph;
    - ``"waiting"``: not started yet; ``"ready"``: always empty (the engine does not
      report when a task's inputs are ready, only when it is sent to a worker);
    - ``"running"``: sent to a worker (or, in ``get_sync``, running now);
    - ``"finished"``: computed (what ``"finished"`` is in Dask);
    - ``"released"``: finished, then freed by the engine (no task needs it any more);
    - ``"erred"``: failed;
    - ``"task_times"``: key -> (start, stop), seconds since the epoch, as the worker
      measured the task's run (more exact than the times hooks are called at);
    - ``"stored_times"``: key -> when the scheduler learned its value was stored, and
      ``"free_times"``: key -> when it freed it, both on the scheduler's clock (a
      worker process's times are converted to it, to a millisecond or so: mixing the
      two kinds could put a free before its store); ``"nbytes"``: key -> size of its
      value (the engine's ``sizeof``);
    - ``"workers"``: the ``id`` given to posttask -> (worker address, thread ident),
      for the threads of this computation (ids are kept for the process's life);
    - ``"num_workers"``: threads of the cluster (1 for ``get_sync``);
    - ``"client"``: the Client computing, or None (``get_sync``);
    - ``"cache"``: the values, key -> value, only in ``get_sync`` (elsewhere they stay
      on the workers);
    - ``"value_metrics"``: key -> {metric function: its value} for metrics asked to be
      computed where the values live (``CacheProfiler`` in process mode), filled
      before ``finish``.
    """

    def __init__(
        self,
        callbacks: Iterable[Callback],
        dsk: Any,
        dependencies: Mapping[Key, Iterable[Key]],
        *,
        client: Any = None,
        num_workers: int = 1,
    ) -> None:
        self.dsk = dsk
        # per hook, the (callback, function) pairs still called
        self._hooks: dict[str, list[tuple[Callback, Callable[..., Any]]]] = {
            name: [(cb, fn) for cb in callbacks if (fn := cb.hook(name)) is not None]
            for name in HOOKS
        }
        self.callbacks = tuple(callbacks)
        deps = {k: set(v) for k, v in dependencies.items()}
        dependents: dict[Key, set[Key]] = {k: set() for k in deps}
        for k, ds in deps.items():
            for d in ds:
                if d in dependents:
                    dependents[d].add(k)
        self.state: dict[str, Any] = {
            "dependencies": deps,
            "dependents": dependents,
            "waiting": set(deps),
            "ready": set(),
            "running": set(),
            "finished": set(),
            "released": set(),
            "erred": set(),
            "task_times": {},
            "stored_times": {},
            "free_times": {},
            "nbytes": {},
            "workers": {},
            "num_workers": num_workers,
            "client": client,
            "value_metrics": {},
        }
        self._ids: dict[tuple[Any, Any], int] = {}
        self.finished = False

    @property
    def uses_results(self) -> bool:
        """Whether some posttask hook reads ``result`` (else the engine reads none)."""
        return any(cb.uses_result for cb, _ in self._hooks["posttask"])

    @property
    def wants_tasks(self) -> bool:
        """Whether any hook needs per-task events at all."""
        h = self._hooks
        return bool(h["pretask"] or h["posttask"])

    def _call(self, name: str, *args: Any) -> None:
        hooks = self._hooks[name]
        for pair in list(hooks):
            cb, fn = pair
            try:
                fn(*args)
            except Exception:
                logger.warning(
                    "The %s hook %s of %r raised; it is not called again during this "
                    "computation (the computation goes on)",
                    name,
                    getattr(fn, "__qualname__", None) or repr(fn),
                    cb,
                    exc_info=True,
                )
                hooks.remove(pair)

    def worker_id(self, worker: Any, thread: Any) -> int:
        """A small number per (worker, thread), as Dask numbers its worker threads;
        the same in every computation of this process, so that a profiler kept over
        several shows each thread on one row."""
        pair = (worker, thread)
        n = self._ids.get(pair)
        if n is None:
            with _worker_ids_lock:
                n = _worker_ids.setdefault(pair, len(_worker_ids))
            self._ids[pair] = n
            self.state["workers"][n] = pair
        return n

    # -- events, in the order they happened -----------------------------------------

    def start(self) -> None:
        self._call("start", self.dsk)
        self._call("start_state", self.dsk, self.state)

    def pretask(self, key: Any) -> None:
        s = self.state
        s["waiting"].discard(key)
        s["running"].add(key)
        self._call("pretask", key, self.dsk, s)

    def posttask(self, key: Any, result: Any, worker_id: Any) -> None:
        s = self.state
        s["waiting"].discard(key)
        s["running"].discard(key)
        s["finished"].add(key)
        self._call("posttask", key, result, self.dsk, s, worker_id)

    def erred(self, key: Any) -> None:
        s = self.state
        s["waiting"].discard(key)
        s["running"].discard(key)
        s["erred"].add(key)

    def retry(self, key: Any) -> None:
        """A task is to run again (its worker died, or a value it made was lost)."""
        s = self.state
        s["running"].discard(key)
        s["finished"].discard(key)
        s["released"].discard(key)
        s["waiting"].add(key)

    def released(self, key: Any, when: float) -> None:
        s = self.state
        if key in s["finished"]:
            s["released"].add(key)
            s["free_times"][key] = when

    def finish(self, errored: bool) -> None:
        if self.finished:
            return
        self.finished = True
        self._call("finish", self.dsk, self.state, errored)
