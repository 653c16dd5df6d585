"""The recorder: a thread per cluster that stores the spans that finish.

Every ``interval`` seconds it asks its source for the spans finished since its
cursor (``DiagnosticsSource.finished_spans``: on this engine, a few microseconds
on the loop when nothing finished) and writes what it got to the history file in
one transaction. The engine's loop never waits on the disk, and the user's
thread never does either, except in ``flush`` (called by readers, so that what
just finished is there) and at the cluster's close (the last spans).

Failures never reach a computation. A write that fails (disk full, file
unwritable, locked by another kernel past ``schema.BUSY_MS``) keeps its spans for
the next try, after a growing pause (``BACKOFF``), at most ``MAX_PENDING`` of them
(beyond that the oldest go, said once). Each kind of failure is logged once, as
one warning on the ``kernel_cluster.history`` logger naming the file and the fix;
a recovery is logged too. A damaged file is renamed aside (never deleted) and a
new one started. A file of a newer schema is left alone: nothing is written.

One recorder per cluster (``record``, keyed by the cluster or the Dask client),
one ``sessions`` row per recorder.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ..periodic import Pause, PeriodicThread
from ..snapshots import FinishedSpan
from ..source import DiagnosticsSource
from . import settings as history_settings
from .context import process_context
from .schema import HistoryUnavailable, classify, connect, set_aside
from .store import Session, add_session, end_session, prune, write_spans

logger = logging.getLogger("kernel_cluster.history")

INTERVAL = 1.0  # seconds between two looks for finished spans
MAX_PENDING = 20_000  # spans kept in memory while the file cannot be written
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # seconds before retrying a failed write


class Recorder:
    """Stores the spans of one source that finish (see the module's docstring)."""

    def __init__(
        self,
        source: DiagnosticsSource,
        *,
        kind: str,
        cluster: str,
        interval: float = INTERVAL,
        settings: Callable[[], history_settings.HistorySettings] = history_settings.current,
        pause: Pause | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.kind = kind
        self.cluster = cluster
        self.settings = settings
        self.clock = clock
        self.uuid = uuid.uuid4().hex
        self.started = clock()
        self.cursor = 0
        self.pending: list[FinishedSpan] = []
        self.written = 0  # spans stored
        self.dropped = 0  # spans lost: too many waiting, or missed by a late read
        self.closed = False
        self.source_gone = False
        self.path: Path | None = None  # the file in use
        self._conn: sqlite3.Connection | None = None
        self._session_row = 0
        self._failing: str | None = None  # the failure of the last write, if it failed
        self._logged: set[str] = set()  # failures logged already
        self._failures = 0  # writes failed in a row
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._thread = PeriodicThread(self.step, interval, "kernel-cluster-history", pause)

    def __repr__(self) -> str:
        return f"<Recorder {self.cluster} -> {self.path}: {self.written} spans stored>"

    def start(self) -> Recorder:
        self._thread.start()
        return self

    # -- the thread ----------------------------------------------------------------------

    def step(self) -> bool:
        """One look for finished spans and one write (unless waiting after a failure),
        as the thread does every ``interval``; False once the recorder is done."""
        with self._lock:
            if self.closed:
                return False
            self._poll()
            self._write(force=False)
            if self.source_gone and not self.pending:
                self._finish()
                return False
        return True

    def _poll(self) -> None:
        if self.source_gone:
            return
        try:
            got = self.source.finished_spans(self.cursor)
        except (RuntimeError, TimeoutError, OSError) as exc:  # its cluster closed or went away
            logger.debug("History of %s: the source is gone (%s)", self.cluster, exc)
            self.source_gone = True
            return
        except Exception:
            self._log_once(
                "read", "could not read the finished spans of %s", self.cluster, exc_info=True
            )
            return
        self.cursor = got.cursor
        if got.missed:
            self.dropped += got.missed
            self._log_once(
                "missed",
                "%d spans of %s finished too fast to be read and are not in the history",
                got.missed,
                self.cluster,
            )
        if got.spans:
            self.pending.extend(got.spans)
            excess = len(self.pending) - MAX_PENDING
            if excess > 0:
                del self.pending[:excess]
                self.dropped += excess
                self._log_once(
                    "dropped",
                    "more than %d spans wait to be written; the oldest are dropped",
                    MAX_PENDING,
                )

    def _write(self, force: bool) -> None:
        if not self.pending:
            return
        path = self.settings().path
        if path is None:  # switched off meanwhile
            self.pending.clear()
            return
        if not force and self.clock() < self._retry_at:
            return
        s = self.settings()
        try:
            conn = self._connection(path)
            write_spans(conn, self._session_row, self.pending, self.clock())
            self.written += len(self.pending)
            self.pending = []
            prune(conn, s.max_runs, s.max_bytes)
        except (HistoryUnavailable, sqlite3.Error, OSError) as exc:
            self._failed(classify(exc, path))
            return
        if self._failing is not None:
            logger.info("History writes to %s resumed; nothing was lost.", path)
        self._failing = None
        self._failures = 0

    def _connection(self, path: Path) -> sqlite3.Connection:
        if self._conn is not None and self.path == path:
            return self._conn
        self._close_connection()
        try:
            conn = connect(path)
        except HistoryUnavailable as exc:
            if exc.reason != "corrupt":
                raise
            self._set_aside(path, str(exc))
            conn = connect(path)
        try:
            self._session_row = add_session(conn, self._session())
        except BaseException:
            conn.close()
            raise
        self._conn, self.path = conn, path
        return conn

    def _session(self) -> Session:
        ctx = process_context()
        return Session(
            uuid=self.uuid,
            started=self.started,
            source=ctx["source"],
            host=ctx.get("host") or socket.gethostname(),
            pid=ctx.get("pid") or os.getpid(),
            cwd=ctx.get("cwd"),
            kind=self.kind,
            cluster=self.cluster,
            versions=ctx["versions"],
            git_commit=ctx["git_commit"],
        )

    def _set_aside(self, path: Path, why: str) -> None:
        try:
            moved = set_aside(path)
        except OSError as exc:
            raise classify(exc, path) from exc
        logger.warning(
            "kernel-cluster's history: %s; it was renamed %s (not deleted) and a new history "
            "started. Computations are not affected.",
            why,
            moved,
        )

    def _failed(self, exc: HistoryUnavailable) -> None:
        if exc.reason == "corrupt" and self._conn is not None:
            # damaged under an open connection: put it aside, start again next time
            path = self.path
            self._close_connection()
            if path is not None:
                try:
                    self._set_aside(path, str(exc))
                    return
                except HistoryUnavailable as again:
                    exc = again
        if exc.reason in ("corrupt", "newer", "foreign", "unwritable"):
            self._close_connection()
        self._failures += 1
        wait = BACKOFF[min(self._failures - 1, len(BACKOFF) - 1)]
        self._retry_at = self.clock() + wait
        self._failing = exc.reason
        self._log_once(
            exc.reason,
            "kernel-cluster's history: %s. Computations are not affected; %d finished spans "
            "wait in memory and writing is retried (every %g s at most).",
            exc,
            len(self.pending),
            BACKOFF[-1],
        )

    def _log_once(self, what: str, message: str, *args: object, exc_info: bool = False) -> None:
        if what in self._logged:
            logger.debug(message, *args)
            return
        self._logged.add(what)
        logger.warning(message, *args, exc_info=exc_info)

    def _close_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn = None

    def _finish(self) -> None:
        """The last write is done: note the session's end and let the file go."""
        self.closed = True
        if self._conn is not None:
            try:
                end_session(self._conn, self.uuid, self.clock())
            except sqlite3.Error:
                pass
        self._close_connection()
        _forget(self)

    # -- from other threads -------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Read and write now what finished (readers call it, so that the spans that just
        finished are there). False if another write held on longer than ``timeout``,
        or this write failed."""
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            if self.closed:
                return True
            self._poll()
            self._write(force=True)
            return not self.pending
        finally:
            self._lock.release()

    def close(self, timeout: float = 5.0) -> None:
        """Write the last finished spans and stop (the cluster is closing: its loop must
        still run)."""
        self._thread.request_stop()
        if self._lock.acquire(timeout=timeout):
            try:
                if not self.closed:
                    self._poll()
                    self._write(force=True)
                    self._finish()
            finally:
                self._lock.release()
        self._thread.join(timeout)


# -- one recorder per cluster -----------------------------------------------------------------

_recorders: dict[int, tuple[object, Recorder]] = {}  # id(key) -> (key, recorder)
_registry_lock = threading.Lock()


def record(
    source: DiagnosticsSource, key: object, kind: str, cluster: str, **options: object
) -> Recorder | None:
    """Start recording ``source``'s finished spans, once per ``key`` (the cluster);
    None when the history is off."""
    if history_settings.current().path is None:
        return None
    with _registry_lock:
        entry = _recorders.get(id(key))
        if entry is not None and entry[0] is key and not entry[1].closed:
            return entry[1]
        recorder = Recorder(source, kind=kind, cluster=cluster, **options)  # type: ignore[arg-type]
        _recorders[id(key)] = (key, recorder)
    return recorder.start()


def recorder_of(key: object) -> Recorder | None:
    with _registry_lock:
        entry = _recorders.get(id(key))
    return entry[1] if entry is not None and entry[0] is key else None


def stop(key: object, timeout: float = 5.0) -> None:
    """Write ``key``'s last spans and stop its recorder (its cluster is closing)."""
    recorder = recorder_of(key)
    if recorder is not None:
        recorder.close(timeout)


def _forget(recorder: Recorder) -> None:
    with _registry_lock:
        for k, (_, r) in list(_recorders.items()):
            if r is recorder:
                del _recorders[k]


def active() -> list[Recorder]:
    with _registry_lock:
        return [r for _, r in _recorders.values() if not r.closed]


def flush_all(timeout: float = 5.0) -> None:
    """Every recorder writes what finished (before a read of the history)."""
    for recorder in active():
        recorder.flush(timeout)


@atexit.register
def _close_all() -> None:  # before the clusters close (atexit runs in reverse order)
    for recorder in active():
        try:
            recorder.close(timeout=2.0)
        except Exception:  # interpreter shutdown: best effort
            pass
