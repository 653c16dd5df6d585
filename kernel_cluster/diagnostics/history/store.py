"""Writing finished spans to the history file, keeping it bounded, and reading it.

Plain functions over an open connection (``schema.connect``); the recorder's
thread calls the writes, readers (``history()``, ``compare``) the reads, each on
its own connection. One batch of spans is one transaction: a batch is stored
whole or not at all.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from ...core.idle_reasons import is_idle
from ...core.span_folding import IDLE
from ..snapshots import FinishedSpan, SpanInfo
from .schema import transaction

SPAN_COLUMNS = (
    "id",
    "session",
    "root",
    "parent",
    "name",
    "tag",
    "tags",
    "enqueued",
    "start",
    "stop",
    "wall",
    "duration",
    "thread_seconds",
    "active_cpu_seconds",
    "tasks",
    "nbytes",
    "workers",
    "threads",
    "states",
    "prefixes",
    "metrics",
    "code",
    "stored",
)
_UPSERT = (
    f"INSERT INTO spans ({', '.join(SPAN_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in SPAN_COLUMNS)}) "
    "ON CONFLICT (id, session) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in SPAN_COLUMNS if c not in ("id", "session"))
)
MAX_CODE = 3  # code stacks kept per span


@dataclass(frozen=True, slots=True)
class Session:
    """What a ``sessions`` row holds (``context.process_context`` and the cluster)."""

    uuid: str
    started: float
    source: str | None
    host: str
    pid: int
    cwd: str | None
    kind: str
    cluster: str
    versions: dict[str, str | None]
    git_commit: str | None


def label(value: object) -> str | None:
    """A metric's function, activity or unit as stored: text (None stays None)."""
    return None if value is None else value if isinstance(value, str) else str(value)


# one encoder for every row (json.dumps with options makes a new one per call)
_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str).encode


# a span's tags and code as JSON, by their tuples: spans made in a loop share both, and
# encoding them was a third of a row's cost. Bounded; shared by recorders' threads
# (a dict's get and set are atomic, and a value is the same whoever computed it).
_ENCODED_MAX = 4096
_encoded: dict[tuple[Any, ...], str] = {}


def _json_of(kind: str, value: tuple[Any, ...], make: Callable[[], object]) -> str:
    key = (kind, value)
    try:
        text = _encoded.get(key)
    except TypeError:  # something unhashable in it
        return _json(make())
    if text is None:
        if len(_encoded) >= _ENCODED_MAX:
            _encoded.clear()
        text = _encoded[key] = _json(make())
    return text


_packers = threading.local()  # a Packer per thread (two recorders' threads may meet): a
# Packer made once packs in half the time packb takes, which makes one per call


def _pack(value: object) -> bytes:
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, default=str)
    return packer.pack(value)  # type: ignore[no-any-return]  # a failed pack empties it


def _unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def metrics_rows(span: SpanInfo) -> tuple[list[list[Any]], float]:
    """``[[function, activity, unit, value], ...]`` of a span's execute metrics, and
    the seconds its tasks kept threads busy (every seconds metric but idle). One pass:
    the recorder's thread does this for every span, beside the workers."""
    rows = []
    busy = 0.0
    for key, value in span.metrics.items():
        if len(key) != 4 or key[0] != "execute":
            continue
        _, f, a, u = key
        if type(a) is not str or type(u) is not str or (f is not None and type(f) is not str):
            f, a, u = label(f), label(a), label(u)
        if key[:3] == IDLE[:3]:  # the span's unused thread time: no function's
            f = None
        rows.append([f, a, u, value])
        # idle is no task's: undivided, split by reason (core/idle_reasons.py), or the
        # span's "idle or other spans"
        if u == "seconds" and not (f is None and (a in ("idle", IDLE[2]) or is_idle(a))):
            busy += value
    return rows, busy


def span_row(record: FinishedSpan, session: int, now: float) -> tuple[Any, ...]:
    span = record.span
    tags = [str(t) for t in span.name]
    begin = span.start or span.enqueued
    prefixes = {p: [states, record.nbytes.get(p, 0)] for p, states in record.tasks.items()}
    metrics, busy = metrics_rows(span)
    states = tuple((k, v) for k, v in span.states.items() if v)  # spans alike share it
    return (
        span.id,
        session,
        record.root,
        span.parent,
        " / ".join(tags),
        tags[-1] if tags else "",
        _json_of("tags", tuple(tags), lambda: tags),
        span.enqueued,
        span.start,
        span.stop,
        max(0.0, span.stop - begin),
        span.duration,
        busy,
        span.active_cpu_seconds,
        sum(span.states.values()),
        span.nbytes_total,
        record.workers,
        record.threads,
        _json_of("states", states, lambda: dict(states)),
        _pack(prefixes),
        _pack(metrics),
        _json_of("code", span.code, lambda: [list(map(list, st)) for st in span.code[:MAX_CODE]]),
        now,
    )


def add_session(conn: sqlite3.Connection, s: Session) -> int:
    """The row id of session ``s`` (stored on first use)."""
    with transaction(conn):
        conn.execute(
            "INSERT OR IGNORE INTO sessions (uuid, started, source, host, pid, cwd, kind, "
            "cluster, versions, git_commit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                s.uuid,
                s.started,
                s.source,
                s.host,
                s.pid,
                s.cwd,
                s.kind,
                s.cluster,
                _json(s.versions),
                s.git_commit,
            ),
        )
        row = conn.execute("SELECT id FROM sessions WHERE uuid = ?", (s.uuid,)).fetchone()
    return int(row[0])


def end_session(conn: sqlite3.Connection, uuid: str, ended: float) -> None:
    with transaction(conn):
        conn.execute("UPDATE sessions SET ended = ? WHERE uuid = ?", (ended, uuid))


def write_spans(
    conn: sqlite3.Connection,
    session: int,
    records: Sequence[FinishedSpan],
    now: float | None = None,
) -> None:
    """Store ``records`` in one transaction (a span stored before is replaced)."""
    now = time.time() if now is None else now
    rows = [span_row(r, session, now) for r in records]
    with transaction(conn):
        conn.executemany(_UPSERT, rows)


# -- bounds ----------------------------------------------------------------------------------


def used_bytes(conn: sqlite3.Connection) -> int:
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int(page * (pages - free))


def run_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM spans WHERE parent IS NULL").fetchone()[0])


def _drop_oldest(conn: sqlite3.Connection, n: int) -> int:
    """Delete the ``n`` oldest runs with their subtrees; returns how many went."""
    oldest = conn.execute(
        "SELECT session, id FROM spans WHERE parent IS NULL ORDER BY stop LIMIT ?", (n,)
    ).fetchall()
    for session, root in oldest:
        conn.execute("DELETE FROM spans WHERE root = ? AND session = ?", (root, session))
    conn.execute(
        "DELETE FROM sessions WHERE ended IS NOT NULL AND id NOT IN (SELECT session FROM spans)"
    )
    return len(oldest)


def prune(conn: sqlite3.Connection, max_runs: int, max_bytes: int) -> int:
    """Keep the latest ``max_runs`` runs and the file under ``max_bytes``: the oldest
    runs go first, with their nested spans. Returns how many runs went."""
    gone = 0
    excess = run_count(conn) - max_runs
    if excess > 0:
        with transaction(conn):
            gone += _drop_oldest(conn, excess)
    while used_bytes(conn) > max_bytes:
        runs = run_count(conn)
        if runs == 0:
            break
        with transaction(conn):
            gone += _drop_oldest(conn, max(1, runs // 20))  # 5% at a time
    if gone:
        # give the freed pages back to the disk (executescript runs the pragma to its end:
        # execute() would step it once, one page), and fold the log into the file, which
        # is only cut at a checkpoint in WAL mode
        conn.executescript("PRAGMA incremental_vacuum;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return gone


# -- reads -----------------------------------------------------------------------------------

_RUN_QUERY = (
    "SELECT s.id, s.name, s.tags, s.start, s.stop, s.wall, s.tasks, s.nbytes, "
    "s.thread_seconds, s.workers, s.threads, x.source, x.kind, x.cluster, x.uuid, "
    "x.git_commit, x.host FROM spans s JOIN sessions x ON x.id = s.session "
)
RUN_FIELDS = (
    "id",
    "name",
    "tags",
    "start",
    "stop",
    "wall",
    "tasks",
    "nbytes",
    "thread_seconds",
    "workers",
    "threads",
    "source",
    "kind",
    "cluster",
    "session",
    "git_commit",
    "host",
)


def runs(
    conn: sqlite3.Connection, limit: int | None = None, name: str | None = None
) -> list[dict[str, Any]]:
    """Stored runs (top-level spans), oldest first; the latest ``limit``; of a
    ``name`` only (its own tag or its full name)."""
    where = "WHERE s.parent IS NULL"
    args: list[Any] = []
    if name is not None:
        where += " AND s.tag = ? AND (s.name = ? OR s.tag = ?)"
        last = name.split(" / ")[-1]
        args += [last, name, name]
    query = f"{_RUN_QUERY}{where} ORDER BY s.stop DESC"
    if limit is not None:
        query += " LIMIT ?"
        args.append(limit)
    rows = [dict(zip(RUN_FIELDS, r)) for r in conn.execute(query, args)]
    for row in rows:
        row["tags"] = tuple(json.loads(row["tags"]))
    rows.reverse()
    return rows


_SPAN_QUERY = (
    f"SELECT {', '.join('s.' + c for c in SPAN_COLUMNS)}, x.uuid, x.source, x.host, x.pid, "
    "x.cwd, x.kind, x.cluster, x.versions, x.git_commit, x.started, x.ended "
    "FROM spans s JOIN sessions x ON x.id = s.session "
)
SESSION_FIELDS = (
    "uuid",
    "source",
    "host",
    "pid",
    "cwd",
    "kind",
    "cluster",
    "versions",
    "git_commit",
    "started",
    "ended",
)


def _span_dicts(rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out = []
    n = len(SPAN_COLUMNS)
    for r in rows:
        d = dict(zip(SPAN_COLUMNS, r[:n]))
        session = dict(zip(SESSION_FIELDS, r[n:]))
        session["versions"] = json.loads(session["versions"] or "{}")
        for key in ("tags", "states", "code"):
            d[key] = json.loads(d[key])
        for key in ("prefixes", "metrics"):
            d[key] = _unpack(d[key])
        d["context"] = session
        out.append(d)
    return out


def span_by_id(conn: sqlite3.Connection, span_id: str) -> dict[str, Any] | None:
    """The stored span with this id (the latest stored, should two sessions share it)."""
    rows = conn.execute(f"{_SPAN_QUERY}WHERE s.id = ? ORDER BY s.stop DESC LIMIT 1", (span_id,))
    found = _span_dicts(rows)
    return found[0] if found else None


def span_by_name(
    conn: sqlite3.Connection, name: str, back: int, exclude: Iterable[str] = ()
) -> dict[str, Any] | None:
    """The ``back``-th latest stored span (1: the latest) whose own tag or full name is
    ``name``, not counting the span ids in ``exclude``."""
    skip = set(exclude)
    last = name.split(" / ")[-1]
    rows = conn.execute(
        "SELECT id, session FROM spans WHERE tag = ? AND (name = ? OR tag = ?) ORDER BY stop DESC",
        (last, name, name),
    )
    seen = 0
    for span_id, session in rows:
        if span_id in skip:
            continue
        seen += 1
        if seen == back:
            found = _span_dicts(
                conn.execute(f"{_SPAN_QUERY}WHERE s.id = ? AND s.session = ?", (span_id, session))
            )
            return found[0] if found else None
    return None


def subtree(conn: sqlite3.Connection, session_uuid: str, root: str) -> list[dict[str, Any]]:
    """Every stored span of the run ``root`` (of one session)."""
    rows = conn.execute(
        f"{_SPAN_QUERY}WHERE s.root = ? AND x.uuid = ? ORDER BY s.enqueued", (root, session_uuid)
    )
    return _span_dicts(rows)


def known_names(conn: sqlite3.Connection, limit: int = 10) -> list[str]:
    """The names of the latest stored spans, for error messages."""
    rows = conn.execute(
        "SELECT name FROM spans GROUP BY name ORDER BY max(stop) DESC LIMIT ?", (limit,)
    )
    return [r[0] for r in rows]
