"""``performance_report``: record a block of work into one self-contained HTML file.

    from kernel_cluster import performance_report

    with performance_report(filename="report.html"):
        client.gather(client.map(work, items))

The file opens offline, from disk: its script (the same renderer library as the
notebook widgets, ``kernel_cluster/jupyter/static/report.js``), its styles and its
data are all inline. It shows a summary (duration, tasks, workers, threads,
versions, the code that ran the block), the fine metrics of the block with the
same panels and filters as the ``FineMetrics`` widget, and the spans made in it.

It also holds the block's task stream, its statistical profile (a flame graph per
task prefix), the cluster's memory over time (sampled every ``memory_interval``
seconds while the block runs) and the transfers between workers (bandwidth over
time and by pair of workers, from the workers' transfer logs).

``compare_to=run`` (a stored run: ``"etl@-1"``, an id, a ``StoredRun``; or a live
span) adds a comparison of the block's fine metrics with that run's, as the
``Compare`` widget draws it, verdict first; the run's numbers are copied into
the page, which stays self-contained. The run is looked up on entering the
block, so a reference that names nothing fails before the work runs.
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
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.profile_tree import Tree
from ...core.spans import FOLDED_ID, is_default_span_id
from ..attach import source_of
from ..feeds.profile_codec import clean_timeline, static_profiles
from ..feeds.tables import MetricsFeed, RecordsFeed, progress_records, span_records
from ..feeds.task_stream import TaskStreamFeed
from ..queries.memory_sampler import Periodic
from ..queries.profile import profile, profile_metadata
from ..snapshots import Metrics, SpanInfo, TaskStreamRecord, TransferLogs
from ..source import Diagnosable, DiagnosticsSource

if TYPE_CHECKING:
    from ..history import compare as comparing

T = TypeVar("T")

STATIC = Path(__file__).resolve().parents[2] / "jupyter" / "static"
_VERSIONED = ("kernel-cluster", "tornado", "msgpack", "cloudpickle", "pandas", "numpy")


class performance_report:
    """Record the work of a ``with`` block and write it to ``filename`` on exit.

    ``client``: a Client or a DiagnosticsSource (default: the most recent client).
    The report covers metrics added while the block ran; spans that began in it.
    """

    def __init__(
        self,
        filename: str | os.PathLike[str] = "kernel-cluster-report.html",
        client: Diagnosable | None = None,
        title: str = "kernel-cluster performance report",
        stacklevel: int = 1,
        memory_interval: float = 0.1,
        compare_to: object = None,
    ):
        """``memory_interval``: seconds between two samples of the cluster's memory;
        ``compare_to``: a run to compare the block with (see the module's docstring)."""
        self.filename = Path(filename)
        self.memory_interval = memory_interval
        self.client = client
        self.title = title
        self.stacklevel = stacklevel
        self.compare_to = compare_to
        self.source: DiagnosticsSource | None = None
        self.html: str | None = None
        self._baseline: comparing.Side | None = None

    def __enter__(self) -> performance_report:
        check_writable(self.filename)  # before the work runs, not after it
        self.source = src = source_of(self.client)
        if self.compare_to is not None:  # a run that names nothing fails now, not after
            from ..history import compare  # numpy and pandas: only when a report compares

            self._baseline = compare.resolve(self.compare_to, src)
        frame = sys._getframe(self.stacklevel)
        self._code = _block_source(frame.f_code.co_filename, frame.f_lineno)
        self._filename = frame.f_code.co_filename
        self._metrics0 = src.fine_metrics()
        self._spans0 = {s.id for s in src.spans(refresh=False)}
        self._stream0 = _try(src.task_stream_index)
        self._wall0 = time.time()
        self._memory: list[list[float]] = []  # [time, process, managed, spilled] bytes
        # a source that measures no memory gives no samples, and the report no section
        self._sampler = Periodic(self._sample_memory, self.memory_interval, "report-memory")
        _try(self._sampler.start)
        self._t0 = time.perf_counter()
        return self

    def _sample_memory(self) -> None:
        assert self.source is not None
        try:
            m = self.source.memory()
        except Exception:  # the cluster went away mid-block: keep what was sampled
            return
        if m is not None:
            self._memory.append([time.time(), m.process_bytes, m.managed_bytes, m.spilled_bytes])

    def __exit__(self, *exc: Any) -> None:
        duration = time.perf_counter() - self._t0
        if self._sampler is not None:
            self._sampler.stop()
        src = self.source
        assert src is not None, "performance_report exited without entering"
        metrics = _subtract(src.fine_metrics(), self._metrics0)
        spans = [s for s in src.spans(refresh=False) if s.id not in self._spans0]
        info = _try(src.info)
        sections: dict[str, Any] = {}
        tasks = None  # the task stream records of the tasks that ran in the block
        stream0 = self._stream0
        if stream0 is not None:
            tasks = _try(lambda: src.task_stream_since(stream0))
        # the statistical profile of the block: every task's and each prefix's
        sections["profile"] = _try(lambda: read_static_profiles(src, start=self._wall0))
        sections["memory"] = memory_section(self._memory)
        sections["bandwidth"] = _try(
            lambda: transfers(src.transfer_logs(), since=self._wall0, until=time.time())
        )
        if self._baseline is not None:
            from ..history import compare

            block = compare.side_of_metrics(
                metrics, "report", self.title, self._wall0, self._wall0 + duration
            )
            sections["compare"] = compare.Comparison(self._baseline, block).to_data()
        functions = {k[2] for k in metrics if k[0] == "execute" and len(k) == 5 and k[2]}
        progress = {p: st for p, st in (_try(src.progress) or {}).items() if p in functions}
        summary = {
            "start": self._wall0,
            "duration": duration,
            "tasks": int(_total(metrics, "execute", "tasks", "count")),
            "workers": len(info.workers) if info is not None else 0,
            "threads": info.total_nthreads if info is not None else 0,
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
            tasks=tasks,
        )
        self.html = render_html(data)
        self.filename.write_text(self.html, encoding="utf-8")


def memory_section(samples: list[list[float]]) -> dict[str, list[float]] | None:
    """Memory samples as columns: times and process, managed, spilled bytes."""
    if not samples:
        return None
    cols = list(zip(*samples))
    return {
        "time": list(cols[0]),
        "process": list(cols[1]),
        "managed": list(cols[2]),
        "spilled": list(cols[3]),
    }


def transfers(
    logs: dict[str, TransferLogs], since: float, until: float, limit: int = 50_000
) -> dict[str, Any] | None:
    """Transfers that ended after ``since``, from the workers' incoming logs, as
    columns: ``{"workers": [address], "to", "from" (indices), "start", "stop",
    "bytes", "compressed"}``, the ``limit`` most recent; and the block's ``window``."""
    rows = []
    for worker, log in logs.items():
        for e in log.incoming:
            if e.stop >= since:
                rows.append((worker, e.peer, e))
    if not rows:
        return None
    rows.sort(key=lambda r: r[2].start)
    rows = rows[-limit:]
    names: dict[str, int] = {}
    out: dict[str, list[float]] = {
        k: [] for k in ("to", "from", "start", "stop", "bytes", "compressed")
    }
    for to, frm, e in rows:
        out["to"].append(names.setdefault(to, len(names)))
        out["from"].append(names.setdefault(frm, len(names)))
        out["start"].append(e.start)
        out["stop"].append(e.stop)
        out["bytes"].append(e.total_bytes)
        out["compressed"].append(e.compressed_bytes)
    return {"workers": list(names), "window": [since, until], **out}


def _total(metrics: Metrics, context: str, activity: str, unit: str) -> float:
    return sum(v for k, v in metrics.items() if k[0] == context and k[-2:] == (activity, unit))


def _try(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception:
        return None


def _subtract(after: Metrics, before: Metrics) -> Metrics:
    if any(k not in after for k in before):  # default spans folded meanwhile (core.spans)
        refolded: Metrics = {}
        for k, v in before.items():
            if k not in after and len(k) == 5 and is_default_span_id(k[1]):
                k = (k[0], FOLDED_ID, k[2], k[3], k[4])
            refolded[k] = refolded.get(k, 0) + v
        before = refolded
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


def check_writable(path: Path, who: str = "performance_report") -> None:
    """Fail now if ``path`` cannot be written, naming it, ``who`` wanted it, and what to do."""
    where = f"{who} cannot write {str(path)!r}"
    if path.is_dir():
        raise IsADirectoryError(f"{where}: it is a directory; give a file such as 'report.html'.")
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(
            f"{where}: the directory {str(parent)!r} does not exist; create it first or "
            "choose another filename."
        )
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        raise type(exc)(
            exc.errno, f"{where}: {exc.strerror}; choose a file in a directory you can write to."
        ) from None
    if not existed:
        path.unlink(missing_ok=True)


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
    metrics: Metrics,
    spans: list[SpanInfo],
    progress: dict[str, dict[str, int]],
    summary: dict[str, Any],
    sections: dict[str, Any],
    tasks: list[TaskStreamRecord] | None = None,
) -> dict[str, Any]:
    """The report's data: the same full messages a widget gets, buffers in base64."""
    parts = [
        MetricsFeed().update(metrics, full=True),
        RecordsFeed("spans").update(span_records(spans), full=True),
        RecordsFeed("progress").update(progress_records(progress), full=True),
    ]
    if tasks:
        parts.append(TaskStreamFeed(max_tasks=max(len(tasks), 1)).update(tasks, full=True))
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


def render_html(data: dict[str, Any], heading: str = "", note: str = "") -> str:
    """The page: the renderer library, its styles and ``data``, inline. ``heading``
    and ``note`` (HTML) are what a browser without scripts shows."""
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
<noscript><h1>{heading or html.escape(data["title"])}</h1><p>{note}</p></noscript>
<div id="kc-report" class="kc-report"></div>
<script type="application/json" id="kc-report-data">{_script_json(data)}</script>
<script>
{js}
</script>
</body>
</html>
"""


def read_static_profiles(
    source: DiagnosticsSource,
    start: float | None = None,
    stop: float | None = None,
    prefix: str | None = None,
    max_prefixes: int = 40,
    tree: Tree | None = None,
) -> dict[str, Any] | None:
    """The profile of a window from a source (``tree`` if it was read already), every
    task's and each prefix's (the ``max_prefixes`` busiest), for a static page; None
    when there are no samples."""
    if tree is None:
        tree = profile(source, start=start, stop=stop, prefix=prefix)
    if not tree.get("count"):
        return None
    timeline = clean_timeline(profile_metadata(source, start=start, stop=stop))
    trees = {"": tree}
    if prefix is None:
        busiest = sorted(timeline["keys"], key=lambda p: -sum(n for _, n in timeline["keys"][p]))
        for p in busiest[:max_prefixes]:
            trees[p] = profile(source, start=start, stop=stop, prefix=p)
    else:
        timeline = {"counts": timeline["keys"].get(prefix, []), "keys": {}}
    return static_profiles(trees, timeline, source.profile_interval())
