"""core/changes.py: what changed since a cursor, fed event by event."""

from __future__ import annotations

import pytest

from kernel_cluster.core.changes import ChangeLog

CPU = ("execute", "s1", "inc", "thread-cpu", "seconds")
NET = ("gather-dep", "network", "bytes")


def test_a_first_read_is_a_resync_then_reads_give_what_changed_since():
    log = ChangeLog()
    log.span_opened("s1")
    log.metric(CPU)
    first = log.since(0)
    assert first.resync and first.cursor == log.seq
    log.metric(NET)
    log.task_moved("s1", "inc")
    log.task_appended(0)
    log.task_appended(1)
    changed = log.since(first.cursor)
    assert not changed.resync
    assert changed.metrics == [NET]
    assert changed.spans == ["s1"] and changed.prefixes == ["inc"]
    assert changed.tasks == (0, 2)
    again = log.since(changed.cursor)  # nothing since
    assert (again.metrics, again.spans, again.prefixes, again.closed) == ([], [], [], [])
    assert again.tasks == (2, 2) and again.cursor == changed.cursor


def test_a_key_touched_many_times_comes_once():
    log = ChangeLog()
    log.metric(NET)
    cursor = log.since(0).cursor
    for _ in range(1000):
        log.metric(CPU)
        log.task_moved("s1", "inc")
    changed = log.since(cursor)
    assert changed.metrics == [CPU] and changed.spans == ["s1"] and changed.prefixes == ["inc"]


def test_each_reader_keeps_its_own_cursor():
    log = ChangeLog()
    log.metric(NET)
    a = b = log.since(0).cursor
    log.metric(CPU)
    a = log.since(a).cursor  # reader a has seen CPU; b has not
    log.span_opened("s2")
    assert log.since(a).metrics == [] and log.since(a).spans == ["s2"]
    changed_b = log.since(b)
    assert changed_b.metrics == [CPU] and changed_b.spans == ["s2"]


def test_closed_spans_are_told_and_leave_the_touched():
    log = ChangeLog()
    log.span_opened("default-1")
    cursor = log.since(0).cursor
    log.span_updated("default-1")
    log.span_closed("default-1")
    log.span_updated("default-folded")
    changed = log.since(cursor)
    assert changed.closed == ["default-1"] and changed.spans == ["default-folded"]


def test_a_reader_that_fell_off_the_log_is_told_to_resync():
    log = ChangeLog(capacity=4)
    log.metric(("m", 0))
    cursor = log.since(0).cursor
    for i in range(1, 5):  # four new rows: the oldest entry (row 0) goes
        log.metric(("m", i))
    behind = log.since(cursor)
    assert not behind.resync  # row 0's entry was before the cursor: nothing missed
    assert sorted(behind.metrics) == [("m", i) for i in range(1, 5)]
    cursor = behind.cursor
    for i in range(5, 10):  # five more: row 5, changed after the cursor, goes too
        log.metric(("m", i))
    fell_off = log.since(cursor)
    assert fell_off.resync and fell_off.metrics == [] and fell_off.cursor == log.seq
    assert not log.since(fell_off.cursor).resync  # reading everything again catches up


def test_task_records_past_the_capacity_make_a_late_reader_resync():
    log = ChangeLog(capacity=4)
    log.task_appended(0)
    cursor = log.since(0).cursor
    for i in range(1, 4):
        log.task_appended(i)
    assert log.since(cursor).tasks == (1, 4)
    for i in range(4, 2000):
        log.task_appended(i)
    assert log.since(cursor).resync
    recent = log.since(log.seq - 2)
    assert not recent.resync and recent.tasks == (1998, 2000)


def test_a_cursor_from_elsewhere_resyncs_and_capacity_is_checked():
    log = ChangeLog()
    log.metric(CPU)
    assert log.since(10**9).resync  # past the end: another log's
    with pytest.raises(ValueError, match="capacity must be at least 1, got 0"):
        ChangeLog(capacity=0)
