"""Reading the task stream: ``client.get_task_stream(...)``, the ``get_task_stream()``
context manager, and their records.

As in distributed: ``client.get_task_stream(start=, stop=, count=)`` returns the
records of tasks that ended in a window; ``with get_task_stream() as ts:`` collects,
in ``ts.data``, exactly the records of the tasks that ran inside the block. Either
with ``plot=True`` also gives our task-stream view of them (``plot="save"`` writes
it to ``filename``).
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

from ..attach import source_of
from ..source import Diagnosable, DiagnosticsSource
from ..snapshots import TaskStreamRecord
from .timewindow import resolve_window

__all__ = ["TaskStreamRecorder", "TaskStreamRecords", "get_task_stream", "task_stream_records"]


def check_plot(plot: Any, filename: Any) -> None:
    if plot not in (False, True, "save"):
        raise ValueError(f"plot={plot!r}: use False, True or 'save' (with filename=...).")
    if plot == "save" and not filename:
        raise ValueError("plot='save' needs a filename, e.g. filename='task-stream.html'.")


def _page(records: list[TaskStreamRecord], plot: Any, filename: Any) -> Any:
    from ..pages.task_stream_page import TaskStreamPage

    page = TaskStreamPage(records)
    if plot == "save":
        page.save(filename)
    return page


def task_stream_records(
    source: DiagnosticsSource,
    start: Any = None,
    stop: Any = None,
    count: int | None = None,
    plot: Any = False,
    filename: str = "task-stream.html",
) -> Any:
    """What ``client.get_task_stream`` returns: the records (dicts, as
    ``TaskStreamRecord.as_dict``) of tasks that ended between ``start`` and ``stop``
    (timestamps, or durations ago such as ``"10s"``), the last ``count`` of them;
    with ``plot``, ``(records, page)``."""
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0
    ):
        raise ValueError(
            f"count={count!r}: give how many of the latest records to return, an int "
            ">= 0 (0 or None: all of them)."
        )
    check_plot(plot, filename)
    start_t, stop_t = resolve_window(start, stop, source.now())
    records = source.task_stream(start=start_t, stop=stop_t, count=count and int(count))
    out = TaskStreamRecords(r.as_dict() for r in records)
    out._source = source
    if plot:
        return out, _page(records, plot, filename)
    return out


class TaskStreamRecorder:
    """``with get_task_stream() as ts: ...`` then ``ts.data`` (and, with ``plot``,
    ``ts.figure``: our task-stream view of those records).

    Remembers where the stream stood on entry and collects, on exit, exactly the
    records made in between, as dicts (``TaskStreamRecord.as_dict``).
    """

    def __init__(
        self,
        source: DiagnosticsSource,
        plot: Any = False,
        filename: str = "task-stream.html",
    ):
        check_plot(plot, filename)
        self.source = source
        self.plot = plot
        self.filename = filename
        self.data: list[dict[str, Any]] = []
        self.figure: Any = None
        self._start = 0

    def __enter__(self) -> TaskStreamRecorder:
        self._start = self.source.task_stream_index()
        return self

    def __exit__(self, *exc: object) -> None:
        records = self.source.task_stream_since(self._start)
        self.data = [r.as_dict() for r in records]
        if self.plot:
            self.figure = _page(records, self.plot, self.filename)

    def to_pandas(self) -> Any:
        """One row per task, with its compute start and stop."""
        return _frame(self.data)


def get_task_stream(
    client: Diagnosable | None = None, plot: Any = False, filename: str = "task-stream.html"
) -> TaskStreamRecorder:
    """``with get_task_stream() as ts:``, then ``ts.data``: the records of exactly the
    tasks that ran inside the block, on ``client``'s cluster (default: the current
    one). ``plot=True`` also makes ``ts.figure``, our task-stream view of them;
    ``plot="save"`` writes it to ``filename`` too."""
    return TaskStreamRecorder(source_of(client), plot, filename)


class TaskStreamRecords(list[dict[str, Any]]):
    """The records ``client.get_task_stream()`` returns: a list of dicts, as Dask's.

    Earlier versions returned a context manager; ``with client.get_task_stream() as
    ts:`` still works, with a DeprecationWarning pointing to ``get_task_stream()``."""

    _source: DiagnosticsSource | None = None
    _recorder: TaskStreamRecorder | None = None

    def __enter__(self) -> TaskStreamRecorder:
        warnings.warn(
            "client.get_task_stream() returns the records, as distributed's does; for a "
            "block use `with kernel_cluster.get_task_stream(client) as ts:`.",
            DeprecationWarning,
            stacklevel=2,
        )
        assert self._source is not None
        self._recorder = TaskStreamRecorder(self._source)
        return self._recorder.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._recorder is not None:
            self._recorder.__exit__(*exc)

    def to_pandas(self) -> Any:
        """One row per task, with its compute start and stop."""
        return _frame(self)


def _frame(data: list[dict[str, Any]]) -> Any:
    import pandas as pd

    rows = []
    for r in data:
        compute = [ss for ss in r["startstops"] if ss["action"] == "compute"]
        rows.append(
            {
                **{k: r[k] for k in ("key", "prefix", "worker", "thread", "status", "nbytes")},
                "start": compute[0]["start"] if compute else None,
                "stop": compute[0]["stop"] if compute else None,
            }
        )
    return pd.DataFrame(rows)
