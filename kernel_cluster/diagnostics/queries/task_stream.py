"""Reading the task stream: ``client.get_task_stream(...)``, the ``get_task_stream()``
context manager, and their records.

As in distributed: ``client.get_task_stream(start=, stop=, count=)`` returns the
records of tasks that ended in a window; ``with get_task_stream() as ts:`` collects,
in ``ts.data``, exactly the records of the tasks that ran inside the block. The
views of them (``plot=``) are pages/task_stream_page.py's.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

from ..snapshots import TaskStreamRecord
from ..source import DiagnosticsSource
from .timewindow import resolve_window

__all__ = ["TaskStreamRecorder", "TaskStreamRecords", "task_stream_records"]


def task_stream_records(
    source: DiagnosticsSource,
    start: Any = None,
    stop: Any = None,
    count: int | None = None,
) -> TaskStreamRecords:
    """What ``client.get_task_stream`` returns: the records (dicts, as
    ``TaskStreamRecord.as_dict``) of tasks that ended between ``start`` and ``stop``
    (timestamps, or durations ago such as ``"10s"``), the last ``count`` of them."""
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0
    ):
        raise ValueError(
            f"count={count!r}: give how many of the latest records to return, an int "
            ">= 0 (0 or None: all of them)."
        )
    start_t, stop_t = resolve_window(start, stop, source.now())
    records = source.task_stream(start=start_t, stop=stop_t, count=count and int(count))
    out = TaskStreamRecords(r.as_dict() for r in records)
    out._source = source
    out.snapshots = records
    return out


class TaskStreamRecorder:
    """``with get_task_stream() as ts: ...`` then ``ts.data``.

    Remembers where the stream stood on entry and collects, on exit, exactly the
    records made in between, as dicts (``TaskStreamRecord.as_dict``; ``snapshots``:
    as they came).
    """

    def __init__(self, source: DiagnosticsSource):
        self.source = source
        self.data: list[dict[str, Any]] = []
        self.snapshots: list[TaskStreamRecord] = []
        self._start = 0

    def __enter__(self) -> TaskStreamRecorder:
        self._start = self.source.task_stream_index()
        return self

    def __exit__(self, *exc: object) -> None:
        self.snapshots = self.source.task_stream_since(self._start)
        self.data = [r.as_dict() for r in self.snapshots]

    def to_pandas(self) -> Any:
        """One row per task, with its compute start and stop."""
        return _frame(self.data)


class TaskStreamRecords(list[dict[str, Any]]):
    """The records ``client.get_task_stream()`` returns: a list of dicts, as Dask's.

    Earlier versions returned a context manager; ``with client.get_task_stream() as
    ts:`` still works, with a DeprecationWarning pointing to ``get_task_stream()``."""

    _source: DiagnosticsSource | None = None
    _recorder: TaskStreamRecorder | None = None
    snapshots: list[TaskStreamRecord] = []  # the records as they came, for a page

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
