"""A page of task stream records: what ``get_task_stream(plot=...)`` shows.

The performance report's renderer draws it (the same zoomable task stream as the
widget, offline), with only the records given: no metrics, profile or memory.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from pathlib import Path

from ..snapshots import TaskStreamRecord
from .report import build_report_data, check_writable, render_html, versions

__all__ = ["TaskStreamPage"]


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
