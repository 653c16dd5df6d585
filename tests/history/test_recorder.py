"""The recorder against a source made of plain data: what it writes, when, and what
it does when the file cannot be written (no cluster; real files)."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest

from kernel_cluster.diagnostics.history import recorder as recorders
from kernel_cluster.diagnostics.history import schema, store
from kernel_cluster.diagnostics.history.recorder import Recorder
from kernel_cluster.diagnostics.history.settings import HistorySettings
from tests.engine.helpers import wait_for
from tests.history.helpers import finished
from tests.views.fakes import FakeSource


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def setup(tmp_path):
    source = FakeSource()
    clock = Clock()
    box = {"settings": HistorySettings(tmp_path / "history.sqlite")}
    rec = Recorder(
        source, kind="embedded", cluster="test", settings=lambda: box["settings"], clock=clock
    )
    yield source, rec, box, clock
    rec.close(timeout=5)


def stored_ids(path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in conn.execute("SELECT id FROM spans"))
    finally:
        conn.close()


def warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kernel_cluster.history" and r.levelno >= logging.WARNING
    ]


def test_what_finished_since_the_last_look_is_written_in_one_transaction(setup, monkeypatch):
    source, rec, box, _ = setup
    calls = []
    real = recorders.write_spans

    def counting(conn, session, records, now=None):
        calls.append(len(records))
        return real(conn, session, records, now)

    monkeypatch.setattr(recorders, "write_spans", counting)
    assert rec.step()  # nothing finished: nothing written, no file yet
    assert calls == [] and not box["settings"].path.exists()
    source.finished += [finished(f"s{i}", ("loop",)) for i in range(50)]
    assert rec.step()
    assert calls == [50] and rec.written == 50 and rec.pending == []
    assert stored_ids(box["settings"].path) == sorted(f"s{i}" for i in range(50))
    assert rec.step() and calls == [50]  # the cursor moved on: nothing again


def test_an_unwritable_file_is_logged_once_and_nothing_is_lost(setup, caplog, tmp_path):
    source, rec, box, clock = setup
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should be")
    box["settings"] = HistorySettings(blocker / "history.sqlite")
    caplog.set_level(logging.INFO, logger="kernel_cluster.history")
    for i in range(5):
        source.finished.append(finished(f"s{i}", ("x",)))
        rec.flush()  # a forced try each time
        clock.t += 100
        rec.step()
    logged = warnings(caplog)
    assert len(logged) == 1, logged
    assert "cannot write the history file" in logged[0] and str(blocker) in logged[0]
    assert len(rec.pending) == 5 and rec.written == 0
    blocker.unlink()  # the place becomes writable
    assert rec.flush()
    assert stored_ids(blocker / "history.sqlite") == [f"s{i}" for i in range(5)]
    assert any("resumed" in r.getMessage() for r in caplog.records)


def test_after_a_failure_the_thread_waits_before_trying_again(setup, tmp_path):
    source, rec, box, clock = setup
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    box["settings"] = HistorySettings(blocker / "history.sqlite")
    source.finished.append(finished("a", ("x",)))
    rec.step()
    assert rec.pending and rec._failures == 1
    blocker.unlink()
    rec.step()  # within the pause: not tried
    assert rec.pending and rec._failures == 1
    clock.t += recorders.BACKOFF[0] + 0.01
    rec.step()
    assert not rec.pending and stored_ids(blocker / "history.sqlite") == ["a"]


def test_a_damaged_file_is_set_aside_and_a_new_one_started(setup, caplog):
    source, rec, box, _ = setup
    path = box["settings"].path
    path.write_bytes(b"garbage " * 1000)
    source.finished.append(finished("a", ("x",)))
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    assert rec.flush()
    aside = [p for p in path.parent.iterdir() if p.name.startswith("history.sqlite.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"garbage " * 1000
    assert stored_ids(path) == ["a"]
    logged = warnings(caplog)
    assert len(logged) == 1 and str(aside[0]) in logged[0] and "not deleted" in logged[0]


def test_a_file_damaged_past_its_header_is_set_aside_when_a_write_finds_it(setup, caplog):
    """The header reads fine, so the file opens; the damage shows in the write."""
    source, rec, box, _ = setup
    path = box["settings"].path
    source.finished.append(finished("a", ("x",)))
    assert rec.flush()
    rec.close()
    with open(path, "r+b") as f:  # keep the header, wreck every page after it
        f.seek(100)
        f.write(b"\xff" * (path.stat().st_size - 100))
    source2 = FakeSource()
    rec2 = Recorder(source2, kind="embedded", cluster="next", settings=lambda: box["settings"])
    source2.finished.append(finished("b", ("x",)))
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    rec2.flush()
    rec2.flush()
    rec2.close()
    aside = [p for p in path.parent.iterdir() if p.name.startswith("history.sqlite.corrupt-")]
    assert len(aside) == 1
    assert stored_ids(path) == ["b"]
    logged = warnings(caplog)
    assert len(logged) == 1 and "damaged" in logged[0], logged


def test_a_newer_file_is_left_alone(setup, caplog):
    source, rec, box, _ = setup
    path = box["settings"].path
    schema.connect(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 5}")
    raw.close()
    source.finished.append(finished("a", ("x",)))
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    assert not rec.flush() and not rec.flush()
    logged = warnings(caplog)
    assert len(logged) == 1 and "newer kernel-cluster" in logged[0]
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM spans").fetchone()[0] == 0
    raw.close()


def test_a_file_locked_by_another_kernel_is_written_once_it_is_free(setup, caplog, monkeypatch):
    monkeypatch.setattr(schema, "BUSY_MS", 50)
    source, rec, box, _ = setup
    path = box["settings"].path
    source.finished.append(finished("a", ("x",)))
    assert rec.flush()  # the file exists, the connection is open
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA busy_timeout = 50")
    other.execute("BEGIN IMMEDIATE")  # another kernel writing (for longer than a write waits)
    rec._conn.execute("PRAGMA busy_timeout = 50")
    source.finished.append(finished("b", ("x",)))
    caplog.set_level(logging.INFO, logger="kernel_cluster.history")
    assert not rec.flush()
    logged = warnings(caplog)
    assert len(logged) == 1 and "locked by another process" in logged[0]
    other.execute("COMMIT")
    other.close()
    assert rec.flush()
    assert stored_ids(path) == ["a", "b"]


def test_what_waits_in_memory_is_bounded(setup, caplog, monkeypatch, tmp_path):
    monkeypatch.setattr(recorders, "MAX_PENDING", 5)
    source, rec, box, _ = setup
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    box["settings"] = HistorySettings(blocker / "history.sqlite")
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    source.finished += [finished(f"s{i}", ("x",)) for i in range(8)]
    rec.flush()
    assert [r.span.id for r in rec.pending] == [f"s{i}" for i in range(3, 8)]
    assert rec.dropped == 3
    assert sum("oldest are dropped" in m for m in warnings(caplog)) == 1


def test_the_thread_ends_when_its_source_is_gone(tmp_path):
    source = FakeSource()
    settings = HistorySettings(tmp_path / "history.sqlite")

    def pause(stop: threading.Event, seconds: float) -> bool:
        return stop.wait(0.01)

    rec = Recorder(source, kind="embedded", cluster="c", settings=lambda: settings, pause=pause)
    rec.start()
    source.finished.append(finished("last", ("x",)))
    wait_for(lambda: rec.written == 1, timeout=10)
    source.closed = True  # reads fail from now on, as a closed cluster's do
    wait_for(lambda: not rec._thread.running, timeout=10)
    assert rec.closed and stored_ids(settings.path) == ["last"]
    assert recorders.recorder_of(source) is None
    conn = sqlite3.connect(settings.path)
    assert conn.execute("SELECT ended FROM sessions").fetchone()[0] is not None  # noted
    conn.close()


def test_one_recorder_per_cluster_and_none_when_off(tmp_path, monkeypatch):
    from kernel_cluster.diagnostics.history import settings as history_settings

    monkeypatch.setattr(history_settings, "_override", {"path": tmp_path / "h.sqlite"})
    source, key = FakeSource(), object()
    first = recorders.record(source, key, kind="embedded", cluster="c")
    try:
        assert first is not None and recorders.record(source, key, "embedded", "c") is first
        assert recorders.recorder_of(key) is first
    finally:
        recorders.stop(key)
    assert first.closed and recorders.recorder_of(key) is None
    monkeypatch.setattr(history_settings, "_override", {"path": None})
    assert recorders.record(source, object(), kind="embedded", cluster="c") is None


def test_sessions_say_where_the_runs_came_from(setup):
    source, rec, box, _ = setup
    source.finished.append(finished("a", ("x",)))
    rec.flush()
    conn = schema.connect(box["settings"].path)
    (run,) = store.runs(conn)
    conn.close()
    assert run["kind"] == "embedded" and run["cluster"] == "test" and run["session"] == rec.uuid
