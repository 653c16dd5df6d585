"""What a client shows of its cluster: fine metrics, the task stream, profiles, spans,
the dashboard, and the workers. Each reads the cluster through ``diagnostics`` (a
DiagnosticsSource, the same protocol every view uses); the modules behind each
view are imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..diagnostics.sources.engine_source import EngineSource
from .base import ClientBase

if TYPE_CHECKING:
    import pandas as pd

    from ..diagnostics.spans import SpanTreeView
    from ..jupyter.widgets import Dashboard


class Views(ClientBase):
    """The read-only views of the client's cluster."""

    @property
    def diagnostics(self) -> EngineSource:
        """The read-only DiagnosticsSource every view of this client's cluster reads."""
        return self._source

    _diagnostics = diagnostics  # the name earlier versions used

    def scheduler_info(self) -> dict[str, Any]:
        """The workers (address, name, threads, memory, pid, ...) and task counts."""
        self._check_running()
        return self._loop.run(self._scheduler.scheduler_info)

    def fine_metrics(self, unit: str | None = "seconds", span: Any = None) -> pd.DataFrame:
        """Where the workers' time went: a DataFrame with columns context, span,
        function, activity, unit and value. ``unit=None`` keeps every unit; see
        ``kernel_cluster.diagnostics.queries.fine_metrics`` for the by-function and
        by-activity tables."""
        from ..diagnostics.queries import fine_metrics as queries

        self._check_running()
        return queries.fine_metrics(self.diagnostics, unit=unit, span=span)

    def get_task_stream(
        self,
        start: Any = None,
        stop: Any = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
    ) -> Any:
        """The task stream records (dicts) of tasks that ended between ``start`` and
        ``stop`` (timestamps, or durations ago such as ``"10s"``; default: all kept),
        the last ``count`` of them, as distributed's ``Client.get_task_stream``.
        ``plot=True``: ``(records, page)``, our task-stream view of them (shown inline
        in a notebook); ``plot="save"`` writes it to ``filename`` too. For the tasks of
        one block: ``with kernel_cluster.get_task_stream(client) as ts:``."""
        from ..diagnostics.pages.task_stream_page import records_with_page

        self._check_running()
        return records_with_page(self.diagnostics, start, stop, count, plot, filename)

    def task_stream(
        self, start: Any = None, stop: Any = None, count: int | None = None
    ) -> list[dict[str, Any]]:
        """``get_task_stream(start, stop, count)``: the name earlier versions used."""
        records: list[dict[str, Any]] = self.get_task_stream(start, stop, count)
        return records

    def profile(
        self,
        start: Any = None,
        stop: Any = None,
        key: Any = None,
        prefix: str | None = None,
        workers: Any = None,
        filename: Any = None,
    ) -> dict[str, Any]:
        """The workers' statistical profile, merged: a count tree ``{"description",
        "count", "own", "identifier", "children"}``. ``start`` / ``stop``: timestamps or
        durations ago (``"10s"``); ``key`` / ``prefix``: one task prefix; ``workers``:
        addresses or names; ``filename``: also write an HTML flame graph there."""
        from ..diagnostics.pages.profile_page import profile_to_file
        from ..diagnostics.queries.profile import profile

        self._check_running()
        if filename is not None:
            return profile_to_file(self.diagnostics, filename, start, stop, key, prefix, workers)
        return profile(self.diagnostics, start, stop, key, prefix, workers)

    def profile_metadata(
        self, start: Any = None, stop: Any = None, workers: Any = None
    ) -> dict[str, Any]:
        """Profile samples over time, in total and per task prefix (for a timeline):
        ``{"counts": [(time, n)], "keys": {prefix: [(time, n)]}}``."""
        from ..diagnostics.queries.profile import profile_metadata

        self._check_running()
        return profile_metadata(self.diagnostics, start, stop, workers)

    def dashboard(self, **kwargs: Any) -> Dashboard:
        """Live widgets for a notebook: progress per task prefix, the span tree and
        the fine metrics panels in one view (``kernel_cluster.jupyter.widgets``)."""
        from ..jupyter.widgets import dashboard

        self._check_running()
        return dashboard(self, **kwargs)

    def compare(self, a: Any, b: Any, unit: str | None = "seconds") -> pd.DataFrame:
        """Where did the time go, ``b`` against ``a``? Each names a span of this cluster
        (id or name: the latest of that name) or a stored run (id, or ``name@-1``, the
        latest stored run of that name other than the other side). A DataFrame
        ``function, activity, unit, a, b, delta, ratio`` with per-task and per-second
        columns and the functions' task counts and bytes, sorted by the size of the
        change; ``.attrs["verdict"]`` says it in one line (``kernel_cluster.compare``)."""
        from .runs import compare

        self._check_running()
        table: pd.DataFrame = compare(a, b, self._source, unit=unit)
        return table

    def spans(self) -> SpanTreeView:
        """The span tree as plain data: ``.roots``, ``[span_id]``, ``.to_pandas()``."""
        from ..diagnostics.spans import SpanTreeView

        self._check_running()
        return SpanTreeView(self.diagnostics.spans())
