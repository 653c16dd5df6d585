"""The history file: SQLite in WAL mode, its schema, its version, and what to do
with a file that is not what it should be.

One file may be written by several kernels at once: WAL lets readers go on while
one writes, writes take the lock up front (``BEGIN IMMEDIATE``) and wait for it
at most ``BUSY_MS``; a kernel that still cannot get it keeps its rows for the
next try (``recorder``). The schema's version is SQLite's ``user_version``; a file
of an older version is migrated in one transaction (``MIGRATIONS``: version n to
n + 1), one of a newer version is left alone with a clear message. A file SQLite
cannot read (not a database, or damaged) is renamed aside, never deleted, and a
new one started.

Tables (times in epoch seconds):

- ``sessions``: one per recorder (a cluster in a kernel, or an attached Dask
  client): its uuid, start and end, the notebook or script, host, pid, working
  directory, the cluster's kind and address, versions (JSON) and git commit.
- ``spans``: one per finished span (a span finished twice, because it was given
  tasks again, is one row with its latest state), keyed (span id, session); ``root``
  is the id of its top-level span: a *run* is a top-level span and its subtree.
  Numbers are columns (wall, tasks, bytes, workers, threads...); tags, task states
  and code are JSON text (SQLite's ``json_each`` reads them). The span's fine
  metrics (``[[function, activity, unit, value], ...]``, its subtree's, as
  ``client.fine_metrics(span=...)`` has them) and its tasks and result bytes per
  task prefix (``{prefix: [{state: n}, bytes]}``) are msgpack: half the size of
  JSON, and a run of 1,000 prefixes (6,000 metrics) decodes in about a millisecond
  where JSON takes ten, which ``compare`` needs.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

SCHEMA_VERSION = 1
BUSY_MS = 2000  # how long a write waits for another kernel's lock before giving up

# why the history cannot be used now (each logged once by the recorder)
Reason = Literal["unwritable", "full", "locked", "corrupt", "newer", "foreign", "io"]

CREATE = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    started REAL NOT NULL,
    ended REAL,
    source TEXT,
    host TEXT,
    pid INTEGER,
    cwd TEXT,
    kind TEXT,
    cluster TEXT,
    versions TEXT,
    git_commit TEXT
);
CREATE TABLE IF NOT EXISTS spans (
    id TEXT NOT NULL,
    session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    root TEXT NOT NULL,
    parent TEXT,
    name TEXT NOT NULL,
    tag TEXT NOT NULL,
    tags TEXT NOT NULL,
    enqueued REAL NOT NULL,
    start REAL NOT NULL,
    stop REAL NOT NULL,
    wall REAL NOT NULL,
    duration REAL NOT NULL,
    thread_seconds REAL NOT NULL,
    active_cpu_seconds REAL NOT NULL,
    tasks INTEGER NOT NULL,
    nbytes INTEGER NOT NULL,
    workers INTEGER NOT NULL,
    threads INTEGER NOT NULL,
    states TEXT NOT NULL,
    prefixes BLOB NOT NULL,
    metrics BLOB NOT NULL,
    code TEXT NOT NULL,
    stored REAL NOT NULL,
    PRIMARY KEY (id, session)
);
CREATE INDEX IF NOT EXISTS spans_by_tag ON spans (tag, stop);
CREATE INDEX IF NOT EXISTS spans_by_root ON spans (root);
CREATE INDEX IF NOT EXISTS runs_by_stop ON spans (stop) WHERE parent IS NULL;
"""

# version n -> the function taking a file from n to n + 1, in the migration's transaction
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


class HistoryUnavailable(Exception):
    """The history file cannot be used now; ``reason`` says why (``Reason``)."""

    def __init__(self, reason: Reason, path: Path, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.path = path


def classify(exc: BaseException, path: Path) -> HistoryUnavailable:
    """An sqlite3 or OS error as a ``HistoryUnavailable`` naming the file and the fix."""
    if isinstance(exc, HistoryUnavailable):
        return exc
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or name.startswith("SQLITE_CORRUPT"):
        return HistoryUnavailable("corrupt", path, f"the history file {path} is damaged ({text})")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return HistoryUnavailable(
            "locked", path, f"the history file {path} is locked by another process ({text})"
        )
    if name == "SQLITE_FULL" or "disk is full" in text:
        return HistoryUnavailable(
            "full", path, f"no room to write the history file {path}: the disk is full ({text})"
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")) or (
        isinstance(exc, PermissionError | NotADirectoryError | IsADirectoryError | FileExistsError)
    ):
        return HistoryUnavailable(
            "unwritable",
            path,
            f"cannot write the history file {path} ({text}); set KERNEL_CLUSTER_HISTORY to a "
            "writable path, or to off",
        )
    return HistoryUnavailable("io", path, f"cannot use the history file {path} ({text})")


def connect(path: Path, create: bool = True) -> sqlite3.Connection:
    """An open connection to the history file at ``path``, created (``create``) or
    migrated as needed. Raises ``HistoryUnavailable``; ``FileNotFoundError`` when the
    file does not exist and ``create`` is False."""
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise classify(exc, path) from exc
    elif not path.exists():
        raise FileNotFoundError(path)
    conn = None
    try:
        # autocommit: transactions are opened explicitly (BEGIN IMMEDIATE for writes)
        conn = sqlite3.connect(
            path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # reads the header
        if version == 0 and create:
            _create(conn, path)
        elif version == 0:
            _check_ours(conn, path)
        elif version > SCHEMA_VERSION:
            raise HistoryUnavailable(
                "newer",
                path,
                f"the history file {path} was written by a newer kernel-cluster (schema "
                f"{version}; this one reads up to {SCHEMA_VERSION}): upgrade kernel-cluster, "
                "or set KERNEL_CLUSTER_HISTORY to another file",
            )
        elif version < SCHEMA_VERSION:
            migrate(conn, path)
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints
        conn.execute("PRAGMA foreign_keys = ON")
        return conn
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.Error | OSError):
            raise classify(exc, path) from exc
        raise


def _check_ours(conn: sqlite3.Connection, path: Path) -> None:
    """A file of version 0 is new (empty) or someone else's SQLite file."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if names:
        raise HistoryUnavailable(
            "foreign",
            path,
            f"{path} is an SQLite file but not a kernel-cluster history (it has the tables "
            f"{', '.join(sorted(names)[:5])}); set KERNEL_CLUSTER_HISTORY to another file",
        )


def _create(conn: sqlite3.Connection, path: Path) -> None:
    _check_ours(conn, path)
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before any table: pruning gives pages back
    conn.execute("PRAGMA journal_mode = WAL")  # kept in the file
    with transaction(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:  # another kernel may have made it meanwhile
            for statement in CREATE.split(";"):  # not executescript: it would commit
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Take the file to ``SCHEMA_VERSION``, one step at a time, in one transaction."""
    with transaction(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        while version < SCHEMA_VERSION:
            step = MIGRATIONS.get(version)
            if step is None:
                raise HistoryUnavailable(
                    "newer" if version > SCHEMA_VERSION else "foreign",
                    path,
                    f"the history file {path} has schema version {version}, which this "
                    f"kernel-cluster cannot migrate (it knows {sorted(MIGRATIONS)} -> "
                    f"{SCHEMA_VERSION}); set KERNEL_CLUSTER_HISTORY to another file",
                )
            step(conn)
            version += 1
            conn.execute(f"PRAGMA user_version = {version}")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction holding the lock from its start (no upgrade deadlock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def set_aside(path: Path) -> Path:
    """Rename a damaged history file (and its WAL files) aside; returns the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target
