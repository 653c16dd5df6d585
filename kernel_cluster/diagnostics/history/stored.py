"""Runs read back from the history file: ``StoredRun`` and what names one.

A stored span reads like a live client's: ``fine_metrics()`` returns the table
``client.fine_metrics(span=...)`` would have, ``spans()`` the stored subtree as
``client.spans()`` shows a live one. References, as ``load`` and ``compare`` take
them: a span id, ``name@-k`` (the k-th latest stored span of that name: ``@-1``
the latest), or a name (the latest). A name is a span's own tag (``"load"``) or
its full name (``"etl / load"``).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from ..queries.fine_metrics import span_frame
from ..snapshots import Metrics, SpanInfo
from ..spans import SpanTreeView
from . import recorder as recorders
from . import settings as history_settings
from .schema import HistoryUnavailable, connect
from .store import known_names, runs, span_by_id, span_by_name, subtree

_BACK = re.compile(r"^(?P<name>.*)@(?P<back>-?\d+)$")


class HistoryOff(ValueError):
    """The history is off, so there is nothing stored to read."""


def parse_back(ref: str) -> tuple[str, int] | None:
    """``"etl@-2"`` -> ``("etl", 2)``; None for a reference without ``@``. A count that
    is not negative raises, saying how to count back."""
    m = _BACK.match(ref)
    if m is None:
        return None
    back = int(m.group("back"))
    if back >= 0 or not m.group("name"):
        raise ValueError(
            f"{ref!r}: after '@' count back from the latest stored run of that name: "
            f"'{m.group('name') or 'name'}@-1' is the latest, '@-2' the one before."
        )
    return m.group("name"), -back


def history_path() -> Path:
    path = history_settings.current().path
    if path is None:
        raise HistoryOff(
            "The run history is off (KERNEL_CLUSTER_HISTORY=off, or configure(path=False)): "
            "nothing is stored to read. Unset it, or give a file, to keep runs."
        )
    return path


@contextlib.contextmanager
def reading(flush: bool = True) -> Iterator[sqlite3.Connection | None]:
    """A connection to the history file for reading (None: no file yet), after the
    running recorders wrote what just finished."""
    path = history_path()
    if flush:
        recorders.flush_all()
    try:
        conn = connect(path, create=False)
    except FileNotFoundError:
        yield None
        return
    except HistoryUnavailable as exc:
        raise RuntimeError(f"Cannot read the run history: {exc}.") from exc
    try:
        yield conn
    finally:
        conn.close()


def metrics_of(rows: Iterable[list[Any]]) -> Metrics:
    """Stored ``[[function, activity, unit, value]]`` as ``("execute", f, a, u) -> v``."""
    return {("execute", f, a, u): v for f, a, u, v in rows}


def span_info(row: dict[str, Any], children: tuple[str, ...] = ()) -> SpanInfo:
    states = {str(k): int(v) for k, v in row["states"].items()}
    return SpanInfo(
        id=row["id"],
        name=tuple(row["tags"]),
        parent=row["parent"],
        children=children,
        enqueued=row["enqueued"],
        start=row["start"],
        stop=row["stop"],
        duration=row["duration"],
        nbytes_total=row["nbytes"],
        states=states,
        done=True,
        active_cpu_seconds=row["active_cpu_seconds"],
        metrics=metrics_of(row["metrics"]),
        code=tuple(tuple(tuple(frame) for frame in stack) for stack in row["code"]),
    )


class StoredRun:
    """A span read back from the history (a run, if it is a top-level span).

    ``id``, ``name`` (tags joined by `` / ``), ``tags``, ``start``, ``stop``, ``wall``
    (seconds from its first task's start to its last task's end), ``tasks``,
    ``nbytes``, ``workers`` and ``threads`` (the cluster's then), ``context`` (the
    notebook or script, host, versions, git commit, the cluster's kind),
    ``prefixes`` (tasks per state and result bytes, by task prefix)."""

    def __init__(self, row: dict[str, Any], path: Path) -> None:
        self._row = row
        self.path = path
        self.id: str = row["id"]
        self.tags: tuple[str, ...] = tuple(row["tags"])
        self.name: str = row["name"]
        self.parent: str | None = row["parent"]
        self.root: str = row["root"]
        self.start: float = row["start"]
        self.stop: float = row["stop"]
        self.wall: float = row["wall"]
        self.tasks: int = row["tasks"]
        self.nbytes: int = row["nbytes"]
        self.workers: int = row["workers"]
        self.threads: int = row["threads"]
        self.thread_seconds: float = row["thread_seconds"]
        self.context: dict[str, Any] = dict(row["context"])
        self.prefixes: dict[str, dict[str, Any]] = {
            p: {"states": states, "nbytes": nbytes}
            for p, (states, nbytes) in row["prefixes"].items()
        }

    @property
    def metrics(self) -> Metrics:
        """Its fine metrics, keyed ``("execute", function, activity, unit)``."""
        return metrics_of(self._row["metrics"])

    def keyed_metrics(self) -> dict[tuple[str | None, str, str], float]:
        """Its fine metrics keyed ``(function, activity, unit)`` (as stored: text)."""
        return {(f, a, u): v for f, a, u, v in self._row["metrics"]}

    def __repr__(self) -> str:
        source = self.context.get("source") or self.context.get("host")
        return (
            f"<StoredRun {self.name!r} ({self.id[:8]}): {self.wall:.3g} s wall, {self.tasks} "
            f"tasks, from {source}>"
        )

    def fine_metrics(self, unit: str | None = "seconds") -> pd.DataFrame:
        """Its fine metrics, as ``client.fine_metrics(span=...)`` gives a live span's."""
        return span_frame(self.metrics, self.name, unit=unit)

    def span_info(self) -> SpanInfo:
        return span_info(self._row)

    def spans(self) -> SpanTreeView:
        """This span and the stored spans under it, as ``client.spans()`` shows them."""
        conn = connect(self.path, create=False)
        try:
            rows = subtree(conn, self.context["uuid"], self.root)
        finally:
            conn.close()
        children: dict[str, list[str]] = {}
        for r in rows:
            if r["parent"] is not None:
                children.setdefault(r["parent"], []).append(r["id"])
        by_id = {r["id"]: r for r in rows}
        keep, stack = [], [self.id]
        while stack:
            span_id = stack.pop()
            if span_id in by_id:
                keep.append(span_info(by_id[span_id], tuple(children.get(span_id, ()))))
                stack.extend(children.get(span_id, ()))
        return SpanTreeView(keep)


def find(conn: sqlite3.Connection, ref: str, exclude: Iterable[str] = ()) -> dict[str, Any] | None:
    """The stored span ``ref`` names (see the module's docstring), or None."""
    back = parse_back(ref)
    if back is not None:
        return span_by_name(conn, back[0], back[1], exclude)
    return span_by_id(conn, ref) or span_by_name(conn, ref, 1, exclude)


def load(ref: str, exclude: Iterable[str] = ()) -> StoredRun:
    """The stored span ``ref`` names; KeyError naming the stored names if none."""
    if not isinstance(ref, str) or not ref:
        raise TypeError(f"Give a stored run's id, name or name@-k, not {ref!r}.")
    with reading() as conn:
        row = find(conn, ref, exclude) if conn is not None else None
        if row is None:
            known = known_names(conn) if conn is not None else []
            raise KeyError(not_found(ref, known, history_path()))
    return StoredRun(row, history_path())


def not_found(ref: str, known: list[str], path: Path) -> str:
    where = f"the history ({path})"
    if not known:
        return f"No run {ref!r} in {where}: it holds no run yet."
    return f"No run {ref!r} in {where}; the latest names stored: {', '.join(map(repr, known))}."


def stored_runs(limit: int | None = None, name: str | None = None) -> list[dict[str, Any]]:
    """The stored runs as dicts (``store.RUN_FIELDS``), oldest first."""
    with reading() as conn:
        return runs(conn, limit, name) if conn is not None else []


def runs_frame(limit: int | None = None, name: str | None = None) -> pd.DataFrame:
    """The stored runs, oldest first (see ``kernel_cluster.history``)."""
    columns = [
        "id",
        "name",
        "start",
        "stop",
        "wall",
        "tasks",
        "nbytes",
        "thread_seconds",
        "source",
        "cluster",
        "kind",
        "workers",
        "threads",
        "git_commit",
        "session",
    ]
    rows = stored_runs(limit, name)
    frame = pd.DataFrame(rows, columns=[*columns, "tags", "host"])
    for col in ("start", "stop"):
        frame[col] = pd.to_datetime(frame[col], unit="s", utc=True)
    return frame[columns]
