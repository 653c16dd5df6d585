"""``performance_report``: record a block of work into one self-contained HTML file.

    from kernel_cluster import performance_report

    with performance_report(filename="report.html"):
        client.gather(client.map(work, items))

The file opens offline, from disk: its script (the same renderer library as the
notebook widgets, ``kernel_cluster/jupyter/static/report.js``), its styles and its
data are all inline. It shows a summary (duration, tasks, workers, threads,
versions, the code that ran the block), the fine metrics of the block with the
same panels and filters as the ``FineMetrics`` widget, and the spans made in it.

Views still being built get a section each, marked ``HOOK`` below: the data is
recorded when its API is there, and the page says what it holds.
"""

from __future__ import annotations

import ast
import base64
import html
import json
import linecache
import os
import platform
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from .feeds import MetricsFeed, RecordsFeed, progress_records, span_records
from .source import default_source

STATIC = Path(__file__).resolve().parent.parent / "jupyter" / "static"
_VERSIONED = ("kernel-cluster", "tornado", "msgpack", "cloudpickle", "pandas", "numpy")


class performance_report:
    """Record the work of a ``with`` block and write it to ``filename`` on exit.

    ``client``: a Client or a DiagnosticsSource (default: the most recent client).
    The report covers metrics added while the block ran; spans that began in it.
    """

    def __init__(
        self,
        filename: str | os.PathLike = "kernel-cluster-report.html",
        client: Any = None,
        title: str = "kernel-cluster performance report",
        stacklevel: int = 1,
    ):
        self.filename = Path(filename)
        self.client = client
        self.title = title
        self.stacklevel = stacklevel
        self.source: Any = None
        self.html: str | None = None

    def __enter__(self) -> performance_report:
        if self.client is None:
            self.source = default_source()
        else:
            self.source = getattr(self.client, "diagnostics", self.client)
        frame = sys._getframe(self.stacklevel)
        self._code = _block_source(frame.f_code.co_filename, frame.f_lineno)
        self._filename = frame.f_code.co_filename
        self._metrics0 = self.source.fine_metrics()
        self._spans0 = {s.id for s in self.source.spans(refresh=False)}
        self._stream0 = _try(lambda: self.source.task_stream_index())
        self._wall0 = time.time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        duration = time.perf_counter() - self._t0
        src = self.source
        metrics = _subtract(src.fine_metrics(), self._metrics0)
        spans = [s for s in src.spans(refresh=False) if s.id not in self._spans0]
        info = _try(src.info) or {}
        sections: dict[str, Any] = {}
        # HOOK task stream: the records of the tasks that ran in the block
        if self._stream0 is not None:
            sections["task_stream"] = _try(lambda: src.task_stream_since(self._stream0))
        # HOOK flame graph: the statistical profile of the block
        sections["profile"] = _try(lambda: _profile(src, self._wall0))
        # HOOK memory over time, transfer bandwidth: no data API yet
        sections["memory"] = None
        sections["bandwidth"] = None
        functions = {k[2] for k in metrics if k[0] == "execute" and len(k) == 5 and k[2]}
        progress = {p: st for p, st in (_try(src.progress) or {}).items() if p in functions}
        summary = {
            "start": self._wall0,
            "duration": duration,
            "tasks": int(_total(metrics, "execute", "tasks", "count")),
            "workers": len(info.get("workers", {})),
            "threads": int(info.get("total_nthreads", 0)),
            "nbytes": _total(metrics, "gather-dep", "network", "bytes"),
            "versions": versions(),
            "code": self._code,
            "filename": self._filename,
        }
        data = build_report_data(
            title=self.title,
            metrics=metrics,
            spans=spans,
            progress=progress,
            summary=summary,
            sections={k: v for k, v in sections.items() if v},
        )
        self.html = render_html(data)
        self.filename.write_text(self.html, encoding="utf-8")


def _total(metrics: dict[tuple, float], context: str, activity: str, unit: str) -> float:
    return sum(v for k, v in metrics.items() if k[0] == context and k[-2:] == (activity, unit))


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _profile(source: Any, since_wall: float) -> Any:
    from .profile import profile  # another view's module: optional here

    tree = profile(source, start=since_wall, stop=None, key=None, prefix=None, workers=None)
    return tree if tree and tree.get("count") else None


def _subtract(after: dict[tuple, float], before: dict[tuple, float]) -> dict[tuple, float]:
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0)
        if d:
            out[k] = d
    return out


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _block_source(filename: str, lineno: int) -> str:
    """The ``with`` statement at ``filename:lineno`` and its body, or the whole cell
    (or file) when it is short; an empty string when the source is unknown."""
    lines = linecache.getlines(filename)
    if not lines:
        return ""
    text = "".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text if len(lines) <= 200 else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith) and lineno in (
            node.lineno,
            node.items[0].context_expr.lineno,
        ):
            return textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
    return text if len(lines) <= 200 else "".join(lines[max(lineno - 10, 0) : lineno + 20])


def build_report_data(
    *,
    title: str,
    metrics: dict[tuple, float],
    spans: list,
    progress: dict,
    summary: dict,
    sections: dict,
) -> dict:
    """The report's data: the same full messages a widget gets, buffers in base64."""
    parts = [
        MetricsFeed().update(metrics, full=True),
        RecordsFeed("spans").update(span_records(spans), full=True),
        RecordsFeed("progress").update(progress_records(progress), full=True),
    ]
    contents = []
    buffers: list[str] = []
    for msg in parts:
        assert msg is not None
        content, bufs = msg
        contents.append({**content, "nbuffers": len(bufs)})
        buffers.extend(base64.b64encode(b).decode("ascii") for b in bufs)
    return {
        "title": title,
        "summary": summary,
        "updates": [{"parts": contents, "buffers": buffers}],
        "sections": sections,
    }


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element."""
    text = json.dumps(data, default=_jsonable, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def render_html(data: dict) -> str:
    script = STATIC / "report.js"
    styles = STATIC / "widget.css"
    if not script.exists():
        raise FileNotFoundError(
            f"The report script is missing ({script}). In a source checkout, build it with "
            "`npm ci && npm run build` (or `make venv`); wheels carry it."
        )
    js = script.read_text(encoding="utf-8").replace("</script", "<\\/script")
    css = styles.read_text(encoding="utf-8")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="kernel-cluster {html.escape(versions().get("kernel-cluster", ""))}">
<title>{html.escape(data["title"])}</title>
<style>
{css}
</style>
</head>
<body class="kc-report-page">
<div id="kc-report" class="kc-report"></div>
<script type="application/json" id="kc-report-data">{_script_json(data)}</script>
<script>
{js}
</script>
</body>
</html>
"""
