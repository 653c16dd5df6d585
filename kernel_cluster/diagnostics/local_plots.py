"""``visualize``: the local profilers' records as a stack of plots on one time axis.

    with Profiler() as prof, ResourceProfiler(dt=0.25) as rprof, CacheProfiler() as cprof:
        out = client.get(dsk, keys)
    visualize([prof, rprof, cprof])

From top to bottom, in the order given: each task as a rectangle on its worker's
row, coloured by function; CPU (%) and memory (MB) of the computing processes;
for each function, the sum of the cache metric of its results held, over time. A
function has the same colour in the task and the cache plots. Time is in seconds
from the first record of all the profilers given.

In a notebook the plots are a widget (``kernel_cluster.jupyter.widgets.
ProfilerPlots``); elsewhere they are a self-contained HTML file, which opens from
disk, offline (the same page script as ``performance_report``).

The records are turned into JSON-able columns here (``plots_data``): keys and
tasks as short strings, a colour group (the task's function name, or the key's
prefix) per task and cache entry, times relative to the first record.
"""

from __future__ import annotations

import functools
import math
import reprlib
import webbrowser
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..core.keys import key_split
from .report import check_writable, render_html

__all__ = ["plots_data", "register_notebook_view", "visualize"]

TASK_FIELDS = ("key", "task", "start_time", "end_time", "worker_id")
RESOURCE_FIELDS = ("time", "mem", "cpu")
CACHE_FIELDS = ("key", "task", "metric", "cache_time", "free_time")
_KIND_BY_FIELDS = {TASK_FIELDS: "tasks", RESOURCE_FIELDS: "resource", CACHE_FIELDS: "cache"}
_KIND_BY_CLASS = {"Profiler": "tasks", "ResourceProfiler": "resource", "CacheProfiler": "cache"}
_FIELDS_BY_KIND = {kind: fields for fields, kind in _KIND_BY_FIELDS.items()}

DEFAULT_TITLE = "Profile results"

# The notebook view: kernel_cluster.jupyter (a layer above this one, which this
# module must not import) registers it when kernel_cluster is imported.
_notebook_view: Callable[[dict[str, Any]], Any] | None = None
_in_notebook: Callable[[], bool] = lambda: False  # noqa: E731


def register_notebook_view(
    view: Callable[[dict[str, Any]], Any], in_notebook: Callable[[], bool]
) -> None:
    """Make ``visualize`` show its plots with ``view(data)`` when ``in_notebook()``."""
    global _notebook_view, _in_notebook
    _notebook_view = view
    _in_notebook = in_notebook


def visualize(
    profilers: Any,
    filename: str | Path = "profile.html",
    save: bool | None = None,
    mode: str | None = None,
    *,
    title: str = DEFAULT_TITLE,
    show: bool = False,
    **kwargs: Any,
) -> Any:
    """Plot the records of ``profilers`` one above the other, on one time axis.

    ``profilers``: a profiler, or a list of them (anything with a ``results`` list of
    ``TaskData``, ``ResourceData`` or ``CacheData`` records; a profiler with no results
    is recognised by its class name and drawn as an empty plot), or plain lists of
    such records.

    ``mode``: ``"widget"`` (an interactive notebook widget), ``"file"`` (an HTML
    page), or None: a widget in a notebook, a page elsewhere.
    ``save``: write the page to ``filename``; by default only in ``"file"`` mode.
    ``show``: open the written page in a web browser.

    Returns the widget in ``"widget"`` mode (display it, or let the cell show it);
    otherwise the ``Path`` of the page written, or the page's HTML text when
    ``save=False``.
    """
    if kwargs:
        raise TypeError(
            f"visualize() got unexpected keyword arguments {sorted(kwargs)}; it takes "
            "filename, save, mode, title and show (the plots size themselves to the page)."
        )
    if mode is None:
        mode = "widget" if _notebook_view is not None and _in_notebook() else "file"
    if mode not in ("widget", "file"):
        raise ValueError(f"visualize(mode={mode!r}): use 'widget', 'file' or None (automatic).")
    if save is None:
        save = mode == "file"
    path = Path(filename)
    if save:
        check_writable(path, who="visualize")
    data = plots_data(profilers, title=title)
    page = render_html(data) if save or mode == "file" else None
    if save:
        assert page is not None
        path.write_text(page, encoding="utf-8")
        if show:
            webbrowser.open(path.resolve().as_uri())
    if mode == "widget":
        if _notebook_view is None:
            raise RuntimeError(
                "visualize(mode='widget') needs kernel_cluster's notebook widgets "
                "(anywidget); install them, or use mode='file'."
            )
        return _notebook_view(data)
    return path if save else page


# -- shaping ----------------------------------------------------------------------------


def plots_data(profilers: Any, title: str = DEFAULT_TITLE) -> dict[str, Any]:
    """The page's (and the widget's) data: ``{"page", "title", "origin", "duration",
    "groups", "plots"}`` where each plot holds columns (see widgets/src/profilerLayout.ts)."""
    sources = [_records_of(p) for p in _as_list(profilers)]
    times: list[float] = []
    ends: list[float | None] = []
    for kind, records, _ in sources:
        if kind == "tasks":
            times += (_time(r.start_time, "start_time") for r in records)
            ends += (_end(r.end_time) for r in records)
        elif kind == "resource":
            times += (_time(r.time, "time") for r in records)
        else:
            times += (_time(r.cache_time, "cache_time") for r in records)
            ends += (_end(r.free_time) for r in records)
    origin = min(times, default=0.0)
    last = max([*times, *(t for t in ends if t is not None)], default=origin)
    groups = _Groups()
    # function names numbered in the order they first appear, over every plot
    firsts: list[tuple[float, int, Any, Any]] = []
    for kind, records, _ in sources:
        if kind == "resource":
            continue
        for i, r in enumerate(records):
            t = r.start_time if kind == "tasks" else r.cache_time
            firsts.append((_time(t, "time"), i, r.key, r.task))
    firsts.sort(key=lambda f: (f[0], f[1]))
    for _, _, key, task in firsts:
        groups.index(group_name(task, key))
    plots = []
    for kind, records, source in sources:
        if kind == "tasks":
            plots.append(_tasks_plot(records, origin, groups))
        elif kind == "resource":
            plots.append(_resource_plot(records, origin))
        else:
            plots.append(_cache_plot(records, origin, groups, _metric_name(source, records)))
    return {
        "page": "profiler-plots",
        "title": str(title),
        "origin": origin,
        "duration": _round(last - origin),
        "groups": groups.names,
        "plots": plots,
    }


def _as_list(profilers: Any) -> list[Any]:
    if hasattr(profilers, "results"):
        return [profilers]  # one profiler
    if isinstance(profilers, str | bytes) or not isinstance(profilers, Iterable):
        raise TypeError(
            f"visualize() takes profilers (objects with a .results list) or lists of their "
            f"records, not {type(profilers).__name__}."
        )
    items = list(profilers)
    if items and _record_kind(items[0]) is not None:
        return [items]  # one plain list of records
    return items


def _records_of(source: Any) -> tuple[str, list[Any], Any]:
    """(kind, records, the profiler or None) of a profiler or a list of records."""
    records = source.results if hasattr(source, "results") else source
    if isinstance(records, str | bytes) or not isinstance(records, Iterable):
        raise TypeError(
            f"visualize() cannot plot {type(source).__name__}: give profilers (with a .results "
            "list) or lists of TaskData, ResourceData or CacheData records."
        )
    records = list(records)
    kinds = {_record_kind(r) for r in records}
    if len(kinds) > 1 or None in kinds:
        odd = next((r for r in records if _record_kind(r) != _record_kind(records[0])), records[0])
        raise TypeError(
            f"visualize() plots one kind of record per profiler (TaskData, ResourceData or "
            f"CacheData); {type(source).__name__} holds {short_repr(odd, 80)}."
        )
    if kinds:
        kind = kinds.pop()
        assert kind is not None
        return kind, records, source
    for cls in type(source).__mro__:
        if cls.__name__ in _KIND_BY_CLASS:
            return _KIND_BY_CLASS[cls.__name__], [], source
    raise TypeError(
        f"visualize() cannot tell what {type(source).__name__} profiled: it has no records, "
        "and it is not a Profiler, ResourceProfiler or CacheProfiler."
    )


def _record_kind(record: Any) -> str | None:
    """The plot a record belongs to, by its fields (a TaskData, or any record alike)."""
    fields = getattr(type(record), "_fields", None)
    if isinstance(fields, tuple):
        return _KIND_BY_FIELDS.get(fields)
    for fields, kind in _KIND_BY_FIELDS.items():
        if all(hasattr(record, f) for f in fields):
            return kind
    return None


def _metric_name(source: Any, records: list[Any]) -> str:
    for attr in ("metric_name", "_metric_name"):
        name = getattr(source, attr, None)
        if isinstance(name, str) and name:
            return name
    return "count" if all(r.metric == 1 for r in records) else "metric"


class _Groups:
    def __init__(self) -> None:
        self.names: list[str] = []
        self._at: dict[str, int] = {}

    def index(self, name: str) -> int:
        at = self._at.get(name)
        if at is None:
            at = self._at[name] = len(self.names)
            self.names.append(name)
        return at


def _tasks_plot(records: list[Any], origin: float, groups: _Groups) -> dict[str, Any]:
    records = sorted(records, key=lambda r: _time(r.start_time, "start_time"))
    workers: dict[Any, int] = {}
    for r in records:
        workers.setdefault(_hashable(r.worker_id), 0)
    ordered = sorted(workers, key=_worker_sort_key)
    for i, w in enumerate(ordered):
        workers[w] = i
    starts = [_round(_time(r.start_time, "start_time") - origin) for r in records]
    return {
        "kind": "tasks",
        "keys": [key_text(r.key) for r in records],
        "tasks": [task_text(r.task) for r in records],
        "group": [groups.index(group_name(r.task, r.key)) for r in records],
        "worker": [workers[_hashable(r.worker_id)] for r in records],
        "workers": [str(w) for w in ordered],
        "start": starts,
        "end": [
            max(_round(e - origin), s) if (e := _end(r.end_time)) is not None else s
            for r, s in zip(records, starts, strict=True)
        ],
    }


def _resource_plot(records: list[Any], origin: float) -> dict[str, Any]:
    records = sorted(records, key=lambda r: _time(r.time, "time"))
    return {
        "kind": "resource",
        "time": [_round(_time(r.time, "time") - origin) for r in records],
        "mem": [_value(r.mem, "mem") for r in records],
        "cpu": [_value(r.cpu, "cpu") for r in records],
    }


def _cache_plot(records: list[Any], origin: float, groups: _Groups, metric: str) -> dict[str, Any]:
    records = sorted(records, key=lambda r: _time(r.cache_time, "cache_time"))
    return {
        "kind": "cache",
        "metric": metric,
        "group": [groups.index(group_name(r.task, r.key)) for r in records],
        "start": [_round(_time(r.cache_time, "cache_time") - origin) for r in records],
        "end": [None if (e := _end(r.free_time)) is None else _round(e - origin) for r in records],
        "value": [_value(r.metric, "metric") for r in records],
    }


# -- values -----------------------------------------------------------------------------


def _time(value: Any, name: str) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"visualize() needs times in seconds since the epoch; "
            f"{name} is {short_repr(value, 60)}."
        ) from None
    if not math.isfinite(t):
        raise ValueError(f"visualize() needs finite times; {name} is {t}.")
    return t


def _end(value: Any) -> float | None:
    """An end time, or None where there is none (still running, never freed)."""
    if value is None:
        return None
    t = _time(value, "end time")
    return t


def _value(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"visualize() needs a number for {name}, not {short_repr(value, 60)}."
        ) from None
    return v if math.isfinite(v) else 0.0


def _round(t: float) -> float:
    return round(t, 6)  # a microsecond: what the plots can show, and shorter JSON


def _hashable(obj: Any) -> Any:
    try:
        hash(obj)
    except TypeError:
        return repr(obj)
    return obj


def _worker_sort_key(worker: Any) -> tuple[int, float, str]:
    if isinstance(worker, int | float) and not isinstance(worker, bool):
        return (0, float(worker), "")
    return (1, 0.0, str(worker))


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 6


def short_repr(obj: Any, limit: int = 120) -> str:
    """``repr(obj)``, abridged (nested containers and long strings cut), at most ``limit``
    characters."""
    try:
        text = _REPR.repr(obj)
    except Exception:  # a repr that fails must not fail the plot
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def key_text(key: Any) -> str:
    """A key as the hover shows it: a string as is, a tuple as its repr."""
    return key if isinstance(key, str) else short_repr(key, 160)


def task_text(task: Any, limit: int = 160, depth: int = 2) -> str:
    """A task as the hover shows it: ``(f, a, b)`` as ``f(a, b)``, nested tasks alike
    down to ``depth``; anything else as its abridged repr."""
    func = task[0] if isinstance(task, tuple) and task and callable(task[0]) else None
    if func is None or depth <= 0:
        return short_repr(task, limit)
    args = [task_text(a, 40, depth - 1) for a in task[1:7]]
    if len(task) > 7:
        args.append("…")
    text = f"{function_name(func)}({', '.join(args)})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_name(task: Any, key: Any) -> str:
    """The colour group of a task: its function's name, or else its key's prefix."""
    func: Any = None
    if isinstance(task, tuple) and task and callable(task[0]):
        func = task[0]
    elif callable(task):
        func = task
    else:
        for attr in ("func", "function"):  # task objects that hold their function
            try:
                candidate = getattr(task, attr, None)
            except Exception:
                candidate = None
            if callable(candidate):
                func = candidate
                break
    return function_name(func) if func is not None else key_split(key)


def function_name(func: Any) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    name = getattr(func, "__name__", None)
    return name if isinstance(name, str) and name else type(func).__name__
