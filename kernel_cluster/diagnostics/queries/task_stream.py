"""Reading the task stream: ``client.get_task_stream()`` and its records."""

from __future__ import annotations

from typing import Any

from ..source import DiagnosticsSource


class TaskStreamRecorder:
    """``with client.get_task_stream() as ts: ...`` then ``ts.data``.

    Remembers where the stream stood on entry and collects, on exit, exactly the
    records made in between, as dicts (``TaskStreamRecord.as_dict``).
    """

    def __init__(self, source: DiagnosticsSource):
        self.source = source
        self.data: list[dict[str, Any]] = []
        self._start = 0

    def __enter__(self) -> TaskStreamRecorder:
        self._start = self.source.task_stream_index()
        return self

    def __exit__(self, *exc: object) -> None:
        self.data = [r.as_dict() for r in self.source.task_stream_since(self._start)]

    def to_pandas(self) -> Any:
        """One row per task, with its compute start and stop."""
        import pandas as pd

        rows = []
        for r in self.data:
            compute = [ss for ss in r["startstops"] if ss["action"] == "compute"]
            rows.append(
                {
                    **{k: r[k] for k in ("key", "prefix", "worker", "thread", "status", "nbytes")},
                    "start": compute[0]["start"] if compute else None,
                    "stop": compute[0]["stop"] if compute else None,
                }
            )
        return pd.DataFrame(rows)
