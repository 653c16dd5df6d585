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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.keys import key_split
from ..diagnostics.pages.report import check_writable, render_html
from ..jupyter.notebook import in_notebook

__all__ = ["plots_data", "visualize"]

TASK_FIELDS = ("key", "task", "start_time", "end_time", "worker_id")
RESOURCE_FIELDS = ("time", "mem", "cpu")
CACHE_FIELDS = ("key", "task", "metric", "cache_time", "free_time")
_KIND_BY_FIELDS = {TASK_FIELDS: "tasks", RESOURCE_FIELDS: "resource", CACHE_FIELDS: "cache"}
_KIND_BY_CLASS = {"Profiler": "tasks", "ResourceProfiler": "resource", "CacheProfiler": "cache"}
_FIELDS_BY_KIND = {kind: fields for fields, kind in _KIND_BY_FIELDS.items()}

DEFAULT_TITLE = "Profile results"


def _notebook_view(data: dict[str, Any]) -> Any:
    """The ``ProfilerPlots`` widget for ``data`` (anywidget, imported when first needed)."""
    try:
        from ..jupyter.widgets import ProfilerPlots
    except ImportError as exc:
        raise RuntimeError(
            "visualize(mode='widget') needs kernel_cluster's notebook widgets "
            "(pip install 'kernel-cluster[widgets]'), or use mode='file'."
        ) from exc
    return ProfilerPlots(data)


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
        mode = "widget" if in_notebook() else "file"
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
        return _notebook_view(data)
    return path if save else page


# -- shaping ----------------------------------------------------------------------------


def plots_data(profilers: Any, title: str = DEFAULT_TITLE) -> dict[str, Any]:
    """The page's (and the widget's) data: ``{"page", "title", "origin", "duration",
    "groups", "plots"}`` where each plot holds columns (see widgets/src/profilerLayout.ts)."""
    shaped = [_shape(*_records_of(p)) for p in _as_list(profilers)]
    starts = [min(s.start) for s in shaped if s.start]
    origin = min(starts, default=0.0)
    ends = [max(s.start) for s in shaped if s.start]
    ends += [t for s in shaped for t in s.end if t is not None]
    last = max(ends, default=origin)
    # function names numbered in the order they first appear, over every plot
    first: dict[str, float] = {}
    for s in shaped:
        for t, name in zip(s.start, s.names, strict=False):
            if first.get(name, math.inf) > t:
                first[name] = t
    groups = sorted(first, key=first.__getitem__)
    number = {name: i for i, name in enumerate(groups)}
    return {
        "page": "profiler-plots",
        "title": str(title),
        "origin": origin,
        "duration": _round(last - origin),
        "groups": groups,
        "plots": [s.plot(origin, number) for s in shaped],
    }


class _Shaped:
    """One profiler's records as columns, sorted by time, times still absolute."""

    def __init__(self, kind: str, start: list[float], end: list[float | None]):
        self.kind = kind
        self.start = start
        self.end = end
        self.names: list[str] = []  # colour groups (tasks and cache)
        self.columns: dict[str, Any] = {}

    def plot(self, origin: float, number: dict[str, int]) -> dict[str, Any]:
        start = [_round(t - origin) for t in self.start]
        out: dict[str, Any] = {"kind": self.kind, **self.columns}
        if self.kind == "resource":
            return {**out, "time": start}
        out["group"] = [number[n] for n in self.names]
        if self.kind == "tasks":
            # a task with no end (or one before its start) is drawn as an instant
            out["end"] = [
                s if e is None else max(_round(e - origin), s)
                for s, e in zip(start, self.end, strict=True)
            ]
        else:
            out["end"] = [None if e is None else _round(e - origin) for e in self.end]
        return {**out, "start": start}


def _shape(kind: str, records: list[Any], source: Any) -> _Shaped:
    if kind == "resource":
        times = [_time(r.time, "time") for r in records]
        order = sorted(range(len(records)), key=times.__getitem__)
        rs = [records[i] for i in order]
        out = _Shaped(kind, [times[i] for i in order], [])
        out.columns = {
            "mem": [_value(r.mem, "mem") for r in rs],
            "cpu": [_value(r.cpu, "cpu") for r in rs],
        }
        return out
    name = "start_time" if kind == "tasks" else "cache_time"
    times = [_time(getattr(r, name), name) for r in records]
    order = sorted(range(len(records)), key=times.__getitem__)
    rs = [records[i] for i in order]
    ends = [_end(r.end_time if kind == "tasks" else r.free_time) for r in rs]
    out = _Shaped(kind, [times[i] for i in order], ends)
    out.names = [group_name(r.task, r.key) for r in rs]
    if kind == "tasks":
        ids = [_hashable(r.worker_id) for r in rs]
        workers = _worker_order(ids)
        row = {w: i for i, w in enumerate(workers)}
        out.columns = {
            "keys": [key_text(r.key) for r in rs],
            "tasks": [task_text(r.task) for r in rs],
            "worker": [row[w] for w in ids],
            "workers": _worker_labels(workers),
            "worker_ids": [short_repr(w, 60) if not isinstance(w, str) else w for w in workers],
        }
    else:
        out.columns = {
            "metric": _metric_name(source, rs),
            "value": [_value(r.metric, "metric") for r in rs],
        }
    return out


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


_kind_by_type: dict[type, str | None] = {}


def _record_kind(record: Any) -> str | None:
    """The plot a record belongs to, by its fields (a TaskData, or any record alike)."""
    cls = type(record)
    try:
        return _kind_by_type[cls]
    except KeyError:
        pass
    kind = None
    fields = getattr(cls, "_fields", None)
    if isinstance(fields, tuple):
        kind = _KIND_BY_FIELDS.get(fields)
    else:
        for names, candidate in _KIND_BY_FIELDS.items():
            if all(hasattr(record, f) for f in names):
                kind = candidate
                break
    if isinstance(fields, tuple) or kind is not None:
        _kind_by_type[cls] = kind  # a named tuple's fields, or a class whose records have them
    return kind


def _metric_name(source: Any, records: list[Any]) -> str:
    for attr in ("metric_name", "_metric_name"):
        name = getattr(source, attr, None)
        if isinstance(name, str) and name:
            return name
    return "count" if all(r.metric == 1 for r in records) else "metric"


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


def _short_id(worker: Any) -> bool:
    if isinstance(worker, int) and not isinstance(worker, bool):
        return 0 <= worker < 10_000
    return isinstance(worker, str) and len(worker) <= 14


def _worker_order(ids: list[Any]) -> list[Any]:
    """Rows: small numbers (a pool's thread numbers) and short names in order; others
    (thread idents) in the order they ran their first task."""
    seen = list(dict.fromkeys(ids))
    if all(_short_id(w) for w in seen):
        return sorted(seen, key=lambda w: (0, w, "") if isinstance(w, int) else (1, 0, w))
    return seen


def _worker_labels(workers: list[Any]) -> list[str]:
    """What the rows are called: the ids when short, else 'thread 0', 'thread 1', ..."""
    if all(_short_id(w) for w in workers):
        return [str(w) for w in workers]
    return [f"thread {i}" for i in range(len(workers))]


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 6


_SCALARS = frozenset({int, float, bool, type(None)})


def _plain(obj: Any) -> bool:
    """A number, or a short string: its repr is short and cheap."""
    cls = type(obj)
    return cls in _SCALARS or (cls is str and len(obj) <= 60)


def short_repr(obj: Any, limit: int = 120) -> str:
    """``repr(obj)``, abridged (nested containers and long strings cut), at most ``limit``
    characters."""
    cls = type(obj)
    if _plain(obj) or (cls is tuple and len(obj) <= 6 and all(_plain(x) for x in obj)):
        text = repr(obj)  # most keys and arguments: no need for reprlib
    elif cls is str:
        text = repr(obj[:limit])
    else:
        try:
            text = _REPR.repr(obj)
        except Exception:  # a repr that fails must not fail the plot
            text = f"<{cls.__name__}>"
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
    """The colour group of a task: for a tuple task ``(f, *args)``, ``f``'s name; for
    anything else (dask's task objects, whose functions are dask's own wrappers such
    as ``_apply_random``), the key's prefix, the name the task stream and the fine
    metrics give it too (``random_sample``, ``qr``, ``sum-aggregate``)."""
    if isinstance(task, tuple) and task and callable(task[0]):
        return function_name(task[0])
    return key_split(key)


def function_name(func: Any) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    name = getattr(func, "__name__", None)
    return name if isinstance(name, str) and name else type(func).__name__
