"""A span explained, on request from a view: its critical path, its idle split by
reason, and the findings (``diagnose``), most costly first.

Walking a span's critical path and running the findings' rules read the whole task
stream of the span: too costly for every periodic update, and wanted for one span at
a time. So the views ask (the Span Tree for the selected span, the Task Stream for
the path it highlights) and the kernel answers that message once, on the channel or
widget comm it came on. A finished span's answer cannot change: it is kept
(``CACHE_SPANS`` of them per source); a running span's is computed afresh.

Browser -> kernel (JSON, checked by ``check_explain``; never a pickle):

- ``{"type": "explain", "span": str}``: one span's explanation;
- ``{"type": "paths", "spans": [str, ...]}``: the critical-path lengths of up to
  ``MAX_SPANS`` spans (the Span Tree's "path 3.2 s of 4.0 s"), finished spans only.

Kernel -> browser: ``{"type": "explain", "span", "done", "wall", "path", "idle",
"findings", "error"}`` (see ``explain``) and ``{"type": "paths", "paths": {id:
{"length", "wall"} | null}, "error"}``. A bad request gets its answer with
``error`` saying what was wrong; the kernel carries on.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from ..core.critical_path import PARTS, CriticalPath
from ..core.idle_reasons import is_idle
from ..core.span_folding import IDLE as SPAN_IDLE
from ..diagnostics.feeds.task_stream import _key_text
from ..diagnostics.queries.critical_path import span_critical_path
from ..diagnostics.queries.findings import as_data, diagnose
from ..diagnostics.snapshots import SpanInfo
from ..diagnostics.source import DiagnosticsSource

KINDS = ("explain", "paths")
MAX_ID = 200  # characters of a span id from the browser
MAX_SPANS = 200  # span ids in one "paths" request
MAX_STEPS = 20_000  # path steps sent (the task stream keeps 100,000 tasks at most)
# paths computed for one "paths" request (others come back None): a session of many
# finished spans asked for all at once took the kernel minutes
MAX_NEW_PATHS = 8
CACHE_SPANS = 256  # finished spans' answers kept per source


def check_explain(content: dict[str, Any]) -> dict[str, Any]:
    """A request, checked. Never raises: a bad one comes back as ``{"type", "error"}``
    so that its answer can say what was wrong (a dropped request would leave the
    view waiting)."""
    kind = content.get("type")
    if kind == "explain":
        span = content.get("span")
        if not isinstance(span, str) or not span or len(span) > MAX_ID:
            return {
                "type": kind,
                "span": span if isinstance(span, str) else None,
                "error": f"'span' must be a span's id (a string of 1 to {MAX_ID} "
                f"characters), got {_short(span)}",
            }
        return {"type": kind, "span": span}
    spans = content.get("spans")
    if (
        not isinstance(spans, list)
        or len(spans) > MAX_SPANS
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_ID for s in spans)
    ):
        return {
            "type": "paths",
            "spans": [],
            "error": f"'spans' must be a list of at most {MAX_SPANS} span ids (strings), "
            f"got {_short(spans)}",
        }
    return {"type": "paths", "spans": list(dict.fromkeys(spans))}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Explainer:
    """Answers the requests for one source, keeping finished spans' answers."""

    def __init__(self) -> None:
        self._done: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, source: DiagnosticsSource | None, request: dict[str, Any]) -> dict[str, Any]:
        if "error" in request:
            return dict(request)
        if source is None:
            return {**request, "error": "No cluster in this kernel: nothing to explain."}
        spans = {s.id: s for s in source.spans()}
        if request["type"] == "paths":
            paths: dict[str, dict[str, float] | None] = {}
            budget = MAX_NEW_PATHS  # each walks the task stream: a few per request
            for span_id in reversed(request["spans"]):  # the latest rows first
                span = spans.get(span_id)
                if span is None or (budget <= 0 and ("path", span_id) not in self._done):
                    paths[span_id] = None
                    continue
                if ("path", span_id) not in self._done:
                    budget -= 1
                paths[span_id] = self._length(source, span)
            return {"type": "paths", "paths": paths}
        span_id = request["span"]
        span = spans.get(span_id)
        if span is None:
            return {
                "type": "explain",
                "span": span_id,
                "error": f"span={span_id!r}: no span has this id (it may have been "
                f"forgotten); {len(spans)} spans are known.",
            }
        return self._cached(("explain", span_id), span, lambda: explain(source, span))

    def _length(self, source: DiagnosticsSource, span: SpanInfo) -> dict[str, float] | None:
        if not span.done:  # its path grows while it runs: asked again when it is done
            return None
        path = self._cached(("path", span.id), span, lambda: _path(source, span))
        return (
            {"length": path.length, "wall": path.wall} if isinstance(path, CriticalPath) else None
        )

    def _cached(self, key: tuple[str, str], span: SpanInfo, make: Any) -> Any:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
        value = make()
        if span.done:
            with self._lock:
                self._done[key] = value
                while len(self._done) > CACHE_SPANS:
                    self._done.popitem(last=False)
        return value


_explainers: weakref.WeakKeyDictionary[Any, Explainer] = weakref.WeakKeyDictionary()
_explainers_lock = threading.Lock()


def answer(source: DiagnosticsSource | None, content: dict[str, Any]) -> dict[str, Any]:
    """The answer to a checked request (``check_explain``), from ``source``'s cache.
    Errors of the source (a cluster closing) come back as the answer's ``error``."""
    try:
        if source is None:
            return Explainer().answer(None, content)
        with _explainers_lock:
            explainer = _explainers.get(source)
            if explainer is None:
                explainer = _explainers[source] = Explainer()
        return explainer.answer(source, content)
    except (RuntimeError, TimeoutError, OSError) as exc:
        return {**content, "error": f"Cannot read the cluster: {exc}"}


def _path(source: DiagnosticsSource, span: SpanInfo) -> CriticalPath | str:
    try:
        return span_critical_path(source, span.id)
    except (ValueError, KeyError) as exc:
        return str(exc)


def explain(source: DiagnosticsSource, span: SpanInfo) -> dict[str, Any]:
    """One span's explanation as plain data: ``path`` (None with ``path_error``),
    ``idle`` seconds by reason (and "idle or other spans"), ``findings``
    (``findings.as_data``; None with ``findings_error``)."""
    wall = max(0.0, span.stop - (span.enqueued or span.start)) if span.stop else 0.0
    out: dict[str, Any] = {
        "type": "explain",
        "span": span.id,
        "name": list(span.name),
        "done": span.done,
        "wall": wall,
    }
    path = _path(source, span)
    if isinstance(path, CriticalPath):
        steps = path.steps[-MAX_STEPS:]
        out["path"] = {
            "length": path.length,
            "wall": path.wall,
            "covered": path.covered,
            "totals": path.totals(),
            "ntasks": len(path.steps),
            "steps": [
                {
                    "key": _key_text(s.key),
                    "worker": s.worker,
                    "via": s.via,
                    "begin": s.begin,
                    "end": s.end,
                    **{p: getattr(s, p) for p in PARTS},
                }
                for s in steps
            ],
        }
    else:
        out["path"] = None
        out["path_error"] = path
    idle: dict[str, float] = {}
    for key, value in span.metrics.items():
        if key == SPAN_IDLE or (key[-1] == "seconds" and is_idle(key[-2])):
            idle[str(key[-2])] = idle.get(str(key[-2]), 0.0) + float(value)
    out["idle"] = idle
    try:
        out["findings"] = as_data(diagnose(source, span.id))
    except (ValueError, KeyError, TypeError) as exc:
        out["findings"] = None
        out["findings_error"] = str(exc)
    return out
