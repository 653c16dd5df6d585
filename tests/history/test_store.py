"""The history file on its own: schema, versions, writes, bounds and reads, with no
cluster (real SQLite files in a temporary directory)."""

from __future__ import annotations

import sqlite3

import pytest

from kernel_cluster.diagnostics.history import schema, store
from kernel_cluster.diagnostics.history.schema import HistoryUnavailable, connect
from tests.history.helpers import finished, session


@pytest.fixture
def path(tmp_path):
    return tmp_path / "sub" / "history.sqlite"


def test_a_new_file_is_made_in_wal_mode_with_the_schema_version(path):
    conn = connect(path)
    assert path.exists()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    conn.close()
    connect(path).close()  # opening it again changes nothing


def test_spans_are_stored_and_a_span_stored_again_is_replaced(path):
    conn = connect(path)
    row = store.add_session(conn, session())
    assert store.add_session(conn, session()) == row  # one row per session
    inner = finished("i", ("etl", "load"), parent="o", root="o", stop=101.0)
    outer = finished("o", ("etl",), tasks={"inc": 10, "total": 1}, stop=102.0)
    store.write_spans(conn, row, [inner, outer])
    again = finished("o", ("etl",), tasks={"inc": 10, "total": 2}, stop=103.0)
    store.write_spans(conn, row, [again])
    runs = store.runs(conn)
    assert [(r["id"], r["name"], r["tasks"], r["stop"]) for r in runs] == [("o", "etl", 12, 103.0)]
    assert runs[0]["source"] == "analysis.ipynb" and runs[0]["kind"] == "embedded"
    loaded = store.span_by_id(conn, "i")
    assert loaded is not None
    assert loaded["name"] == "etl / load" and loaded["tag"] == "load" and loaded["root"] == "o"
    assert ["inc", "thread-cpu", "seconds", 1.0] in loaded["metrics"]
    assert loaded["prefixes"] == {"inc": [{"memory": 10}, 80]}
    assert loaded["context"]["versions"] == {"python": "3.11"}
    conn.close()


def test_names_count_back_from_the_latest_skipping_what_is_excluded(path):
    conn = connect(path)
    row = store.add_session(conn, session())
    store.write_spans(conn, row, [finished(f"e{i}", ("etl",), stop=100.0 + i) for i in range(3)])
    store.write_spans(conn, row, [finished("x", ("other", "etl"), parent="p", root="p")])

    def back(name: str, k: int, exclude=()) -> str | None:
        found = store.span_by_name(conn, name, k, exclude)
        return found and found["id"]

    assert back("etl", 1) == "e2" and back("etl", 2) == "x" and back("etl", 3) == "e1"
    assert back("etl / etl", 1) is None and back("other / etl", 1) == "x"
    assert back("etl", 1, exclude=["e2"]) == "x"
    assert back("etl", 9) is None
    conn.close()


def test_the_oldest_runs_go_first_with_their_nested_spans(path):
    conn = connect(path)
    row = store.add_session(conn, session())
    for i in range(5):
        store.write_spans(
            conn,
            row,
            [
                finished(f"c{i}", ("run", "child"), parent=f"r{i}", root=f"r{i}", stop=10.0 + i),
                finished(f"r{i}", ("run",), stop=10.0 + i),
            ],
        )
    assert store.prune(conn, max_runs=3, max_bytes=10**9) == 2
    ids = {r[0] for r in conn.execute("SELECT id FROM spans")}
    assert ids == {"r2", "r3", "r4", "c2", "c3", "c4"}
    conn.close()


def test_the_file_is_kept_under_its_size_bound(path):
    conn = connect(path)
    row = store.add_session(conn, session())
    big = {f"prefix-{i}": 1 for i in range(300)}  # a few kB of metrics per span
    for i in range(200):
        store.write_spans(conn, row, [finished(f"r{i}", ("run",), tasks=big, stop=float(i))])
    size = store.used_bytes(conn)
    assert size > 2_000_000
    bound = size // 4
    gone = store.prune(conn, max_runs=10**6, max_bytes=bound)
    assert gone > 0 and store.used_bytes(conn) <= bound
    kept = [r["id"] for r in store.runs(conn)]
    assert kept == [f"r{i}" for i in range(200 - len(kept), 200)]  # the latest
    # the pages given back: the file itself shrank
    assert path.stat().st_size <= bound + 2 * 4096 * 64
    conn.close()


def test_a_file_of_a_newer_schema_is_left_alone_with_a_clear_reason(path):
    connect(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(HistoryUnavailable, match="newer kernel-cluster") as info:
        connect(path)
    assert info.value.reason == "newer"
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION + 1
    raw.close()


def test_an_older_file_is_migrated_in_one_step_keeping_its_rows(path, monkeypatch):
    conn = connect(path)
    row = store.add_session(conn, session())
    store.write_spans(conn, row, [finished("a", ("etl",))])
    conn.close()

    def add_note(c: sqlite3.Connection) -> None:
        c.execute("ALTER TABLE spans ADD COLUMN note TEXT DEFAULT 'migrated'")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    monkeypatch.setitem(schema.MIGRATIONS, schema.SCHEMA_VERSION - 1, add_note)
    conn = connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT id, note FROM spans").fetchall() == [("a", "migrated")]
    conn.close()


def test_a_version_without_a_migration_says_it_cannot_migrate(path, monkeypatch):
    connect(path).close()
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    with pytest.raises(HistoryUnavailable, match="cannot migrate"):
        connect(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION - 1
    raw.close()


def test_someone_elses_sqlite_file_is_not_touched(path):
    path.parent.mkdir(parents=True)
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE notes (x)")
    raw.commit()
    raw.close()
    with pytest.raises(HistoryUnavailable, match="not a kernel-cluster history") as info:
        connect(path)
    assert info.value.reason == "foreign"


def test_a_damaged_file_is_recognised_and_set_aside_not_deleted(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(HistoryUnavailable) as info:
        connect(path)
    assert info.value.reason == "corrupt"
    moved = schema.set_aside(path)
    assert not path.exists() and moved.read_bytes().startswith(b"this is not a database")
    assert moved.name.startswith("history.sqlite.corrupt-")
    connect(path).close()  # a new one


def test_an_unwritable_place_is_named_as_such(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(HistoryUnavailable, match="KERNEL_CLUSTER_HISTORY") as info:
        connect(blocker / "history.sqlite")
    assert info.value.reason == "unwritable"


def test_tags_code_and_states_shared_by_spans_are_stored_for_each(path, monkeypatch):
    """Spans made in a loop share their tags', code's and states' encoding (a bounded memo):
    each span still reads back its own, and the memo never outgrows its bound."""
    import dataclasses

    monkeypatch.setattr(store, "_ENCODED_MAX", 3)
    monkeypatch.setattr(store, "_encoded", {})
    conn = connect(path)
    row = store.add_session(conn, session())
    frame = ("nb.py", 3, "<module>", "with span('a'):")
    made = {}
    for i in range(8):
        tags = ("loop", f"s{i % 3}") if i % 2 else ("loop",)
        code = ((frame,), (("nb.py", 10 + i % 2, "f", "x = 1"),)) if i < 6 else ()
        states = {"memory": 10 - i % 2, "erred": i % 2, "released": 0}  # two, shared
        record = finished(f"id{i}", tags)
        span = dataclasses.replace(record.span, code=code, states=states)
        store.write_spans(conn, row, [dataclasses.replace(record, span=span)])
        made[f"id{i}"] = (tags, code, {k: v for k, v in states.items() if v})
        assert len(store._encoded) <= 3
    for span_id, (tags, code, states) in made.items():
        loaded = store.span_by_id(conn, span_id)
        assert loaded is not None
        assert tuple(loaded["tags"]) == tags
        assert tuple(tuple(tuple(f) for f in stack) for stack in loaded["code"]) == code
        assert loaded["states"] == states
    conn.close()


def test_a_failed_pack_leaves_the_next_rows_whole():
    """Rows are packed by one msgpack Packer per thread: a value it cannot pack (its
    ``str`` fails) raises, and what is packed next is not mixed with it."""
    import msgpack

    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text")

    with pytest.raises(ValueError, match="no text"):
        store._pack([1, "half a row", Unprintable()])
    assert store._pack({"inc": [1, 2]}) == msgpack.packb({"inc": [1, 2]}, use_bin_type=True)


def test_a_spans_idle_lines_are_no_busy_thread_time():
    """A stored span's busy thread-seconds are its tasks': neither the workers' idle
    filed under it by reason (``idle: ...``, function None) nor its "idle or other
    spans" line count (the idle parts counted as busy after the merge with main)."""
    from kernel_cluster.diagnostics.snapshots import SpanInfo

    metrics = {
        ("execute", "inc", "thread-cpu", "seconds"): 2.0,
        ("execute", "inc", "tasks", "count"): 4,
        ("execute", None, "idle: no-ready-task", "seconds"): 1.5,
        ("execute", None, "idle: waiting-for-data", "seconds"): 0.5,
        ("execute", "N/A", "idle or other spans", "seconds"): 4.0,
    }
    span = SpanInfo("s", ("s",), None, (), 0.0, 0.0, 2.0, 2.0, 0, {}, True, 8.0, metrics)
    rows, busy = store.metrics_rows(span)
    assert busy == 2.0
    assert len(rows) == len(metrics)
