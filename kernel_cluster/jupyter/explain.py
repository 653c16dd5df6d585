"""A span explained, on request from a view: its critical path, its idle split by
reason, and the findings (``diagnose``), most costly first.

Walking a span's critical path and running the findings' rules read the whole task
stream of the span: too costly for every periodic update, and wanted for one span at
a time. So the views ask (the Span Tree for the selected span and for its finished
spans' path lengths, the Task Stream for the path it highlights) and the kernel
answers that message once, on the channel or widget comm it came on.

Answers are computed on a thread of this module's (``reply_later``), one request
after another, never on the thread that received the request: that is the kernel's
shell thread (or the subshell every panel message shares), and a reloaded page asking
for the paths of a hundred finished spans held it for minutes, a cell queued [*]
behind them and the panels' other requests too. The reply is sent from that thread,
as the hub's and the widgets' updates are.

A finished span cannot change, so what is computed for it is kept: its explanation
(``CACHE_SPANS`` per source) and its path length (``CACHE_LENGTHS``), so a second
reload costs nothing. The path lengths asked at once come from one read of the spans
and one of the task stream (``span_critical_paths``). They are not computed as each
span finishes: that would read the task stream for every span whether or not a view
ever shows it; a running span's answers are computed afresh.

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

import logging
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..core.critical_path import PARTS, CriticalPath
from ..core.idle_reasons import is_idle
from ..core.span_folding import IDLE as SPAN_IDLE
from ..diagnostics.feeds.task_stream import _key_text
from ..diagnostics.queries.critical_path import span_critical_path, span_critical_paths
from ..diagnostics.queries.findings import as_data, diagnose
from ..diagnostics.snapshots import SpanInfo
from ..diagnostics.source import DiagnosticsSource

logger = logging.getLogger(__name__)

KINDS = ("explain", "paths")
MAX_ID = 200  # characters of a span id from the browser
MAX_SPANS = 200  # span ids in one "paths" request
MAX_STEPS = 20_000  # path steps sent (the task stream keeps 100,000 tasks at most)
CACHE_SPANS = 256  # finished spans' explanations kept per source (each up to MAX_STEPS)
CACHE_LENGTHS = 20_000  # finished spans' path lengths kept per source (two numbers each)


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
        self._done: OrderedDict[str, dict[str, Any]] = OrderedDict()  # explanations
        self._lengths: OrderedDict[str, dict[str, float] | None] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, source: DiagnosticsSource | None, request: dict[str, Any]) -> dict[str, Any]:
        if "error" in request:
            return dict(request)
        if source is None:
            return {**request, "error": "No cluster in this kernel: nothing to explain."}
        if request["type"] == "paths":
            return {"type": "paths", "paths": self.lengths(source, request["spans"])}
        span_id = request["span"]
        with self._lock:
            if span_id in self._done:
                self._done.move_to_end(span_id)
                return self._done[span_id]
        spans = {s.id: s for s in source.spans()}
        span = spans.get(span_id)
        if span is None:
            return {
                "type": "explain",
                "span": span_id,
                "error": f"span={span_id!r}: no span has this id (it may have been "
                f"forgotten); {len(spans)} spans are known.",
            }
        answer = explain(source, span)
        if span.done:
            path = answer.get("path")
            self._keep(self._done, span_id, answer, CACHE_SPANS)
            length = {"length": path["length"], "wall": path["wall"]} if path else None
            self._keep(self._lengths, span_id, length, CACHE_LENGTHS)
        return answer

    def lengths(
        self, source: DiagnosticsSource, span_ids: list[str]
    ) -> dict[str, dict[str, float] | None]:
        """Path lengths by span id: None for a span unknown, still running or without
        a path. Those not kept yet are walked together (one read of the stream)."""
        with self._lock:
            known = {i: self._lengths[i] for i in span_ids if i in self._lengths}
        missing = [i for i in span_ids if i not in known]
        if missing:
            done = {s.id for s in source.spans(refresh=False) if s.done}
            # a running span's path grows: it is asked again when it is done
            walk = [i for i in missing if i in done]
            for span_id, path in span_critical_paths(source, walk).items():
                length = (
                    {"length": path.length, "wall": path.wall}
                    if isinstance(path, CriticalPath)
                    else None
                )
                self._keep(self._lengths, span_id, length, CACHE_LENGTHS)
                known[span_id] = length
        return {i: known.get(i) for i in span_ids}

    def _keep(self, cache: OrderedDict[str, Any], key: str, value: Any, most: int) -> None:
        with self._lock:
            cache[key] = value
            cache.move_to_end(key)
            while len(cache) > most:
                cache.popitem(last=False)


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


def reply_later(
    source: DiagnosticsSource | None,
    content: dict[str, Any],
    reply: Callable[[dict[str, Any]], None],
) -> None:
    """Answer a checked request on this module's thread, then ``reply(answer)`` from
    there; returns at once. A bad request is answered at once (it costs nothing)."""
    if "error" in content or source is None:
        reply(answer(source, content))
        return

    def job() -> None:
        try:
            out = answer(source, content)
        except Exception as exc:  # the view is told, not left waiting
            logger.warning("Could not answer a view's %r", content, exc_info=True)
            out = {**content, "error": f"Could not answer: {type(exc).__name__}: {exc}"}
        reply(out)

    _worker.submit(job)


class _Worker:
    """One daemon thread running jobs in the order given: requests come a few at a
    time and each reads the whole task stream, so one at a time is as fast as
    several and leaves a core to the user's cell. Started on first use."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="kernel-cluster-explain", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a comm closed under the reply: the next one is answered
                logger.debug("Could not send an answer to a view", exc_info=True)


_worker = _Worker()


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
