"""A page of task stream records: what ``get_task_stream(plot=...)`` shows; and the
task stream readers that may draw one (``get_task_stream``, the context manager,
and what ``client.get_task_stream`` returns).

The performance report's renderer draws it (the same zoomable task stream as the
widget, offline), with only the records given: no metrics, profile or memory.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..attach import source_of
from ..queries.task_stream import TaskStreamRecorder, task_stream_records
from ..snapshots import TaskStreamRecord
from ..source import Diagnosable, DiagnosticsSource
from .report import build_report_data, check_writable, render_html, versions

__all__ = ["PlottedRecorder", "TaskStreamPage", "get_task_stream", "records_with_page"]


def check_plot(plot: Any, filename: Any) -> None:
    if plot not in (False, True, "save"):
        raise ValueError(f"plot={plot!r}: use False, True or 'save' (with filename=...).")
    if plot == "save" and not filename:
        raise ValueError("plot='save' needs a filename, e.g. filename='task-stream.html'.")


def _page(records: list[TaskStreamRecord], plot: Any, filename: Any) -> TaskStreamPage:
    page = TaskStreamPage(records)
    if plot == "save":
        page.save(filename)
    return page


def records_with_page(
    source: DiagnosticsSource,
    start: Any = None,
    stop: Any = None,
    count: int | None = None,
    plot: Any = False,
    filename: str = "task-stream.html",
) -> Any:
    """``client.get_task_stream``: the records of a window (``task_stream_records``),
    and with ``plot``, ``(records, page)``."""
    check_plot(plot, filename)
    records = task_stream_records(source, start, stop, count)
    if plot:
        return records, _page(records.snapshots, plot, filename)
    return records


class PlottedRecorder(TaskStreamRecorder):
    """``with get_task_stream(plot=...) as ts``: ``ts.data``, and ``ts.figure``, our
    task-stream view of those records (None without ``plot``)."""

    def __init__(
        self, source: DiagnosticsSource, plot: Any = False, filename: str = "task-stream.html"
    ):
        check_plot(plot, filename)
        super().__init__(source)
        self.plot = plot
        self.filename = filename
        self.figure: TaskStreamPage | None = None

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self.plot:
            self.figure = _page(self.snapshots, self.plot, self.filename)


def get_task_stream(
    client: Diagnosable | None = None, plot: Any = False, filename: str = "task-stream.html"
) -> PlottedRecorder:
    """``with get_task_stream() as ts:``, then ``ts.data``: the records of exactly the
    tasks that ran inside the block, on ``client``'s cluster (default: the current
    one). ``plot=True`` also makes ``ts.figure``, our task-stream view of them;
    ``plot="save"`` writes it to ``filename`` too."""
    return PlottedRecorder(source_of(client), plot, filename)


class TaskStreamPage:
    """The records drawn as a page: ``html``, ``save(filename)``, and shown inline in a
    notebook (an iframe holding the page)."""

    def __init__(self, records: Sequence[TaskStreamRecord], title: str = "Task stream"):
        self.records = list(records)
        self.title = title
        self.path: Path | None = None
        starts = [ss.start for r in self.records for ss in r.startstops]
        stops = [ss.stop for r in self.records for ss in r.startstops]
        workers = {r.worker for r in self.records}
        threads = {(r.worker, r.thread) for r in self.records}
        summary = {
            "start": min(starts) if starts else time.time(),
            "duration": (max(stops) - min(starts)) if starts else 0.0,
            "tasks": len(self.records),
            "workers": len(workers),
            "threads": len(threads),
            "versions": versions(),
            "code": "",
        }
        data = build_report_data(
            title=title,
            metrics={},
            spans=[],
            progress={},
            summary=summary,
            sections={},
            tasks=self.records,
        )
        self.html = render_html(data)

    def save(self, filename: str | os.PathLike[str]) -> Path:
        """Write the page to ``filename`` (it opens offline); returns its path."""
        path = Path(filename)
        check_writable(path, "get_task_stream")
        path.write_text(self.html, encoding="utf-8")
        self.path = path
        return path

    def _repr_html_(self) -> str:
        return (
            '<iframe style="width: 100%; height: 640px; border: 0" '
            f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>'
        )

    def __repr__(self) -> str:
        where = f", saved to {self.path}" if self.path is not None else ""
        return f"<TaskStreamPage: {len(self.records)} tasks{where}>"
