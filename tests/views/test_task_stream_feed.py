"""The task stream feed: columns and deltas that rebuild the records exactly."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernel_cluster.diagnostics.feeds.task_stream import TaskStreamFeed, TaskStreamReader
from kernel_cluster.diagnostics.snapshots import StartStop, TaskStreamRecord

from .fakes import record


def stream(n: int, first: int = 0) -> list[TaskStreamRecord]:
    out = []
    for i in range(first, first + n):
        compute = StartStop("compute", float(i), i + 1.0)
        if i % 4 == 0:  # a transfer before the compute
            startstops = (StartStop("transfer", i - 0.5, i - 0.1, "w9"), compute)
        else:
            startstops = (compute,)
        out.append(
            record(i, f"inc-{i}", worker=f"w{i % 2}", thread=10 + i % 3, startstops=startstops)
        )
    return out


def expected(records: list[TaskStreamRecord]) -> dict:
    return {r.key: [(ss.action, ss.start, ss.stop) for ss in r.startstops] for r in records}


def test_deltas_rebuild_the_records():
    feed, reader = TaskStreamFeed(), TaskStreamReader()
    records = stream(10)
    reader.apply(*feed.update(records[:3]))
    msg = feed.update(records[3:])
    content, buffers = msg
    assert content["first_task"] == 3 and len(content["keys"]) == 7
    assert content["strings"] == []  # "inc", "w0", "w1": sent with the first message
    reader.apply(content, buffers)
    assert reader.startstops() == expected(records)
    assert reader.tasks[0] == {"prefix": "inc", "status": "OK", "nbytes": 8.0}
    assert feed.next_index == 10
    # rows: one per worker thread, numbered per worker in order of appearance
    assert sorted(reader.rows) == [("w0", 0), ("w0", 1), ("w0", 2), ("w1", 0), ("w1", 1), ("w1", 2)]


def test_nothing_new_sends_nothing_and_full_restates():
    feed = TaskStreamFeed()
    feed.update(stream(5))
    assert feed.update([]) is None
    reader = TaskStreamReader()
    reader.apply(*feed.full())
    assert reader.startstops() == expected(stream(5))


def test_a_lost_message_is_noticed():
    feed, reader = TaskStreamFeed(), TaskStreamReader()
    reader.apply(*feed.update(stream(2)))
    feed.update(stream(2, first=2))  # lost
    with pytest.raises(ValueError, match="lost"):
        reader.apply(*feed.update(stream(2, first=4)))


def test_oldest_tasks_go_past_max_tasks():
    feed, reader = TaskStreamFeed(max_tasks=8), TaskStreamReader()
    records = stream(30)
    for i in range(0, 30, 3):
        reader.apply(*feed.update(records[i : i + 3]))
    assert 8 <= feed.ntasks <= 10
    assert reader.keys == feed.keys
    assert reader.startstops() == expected(records[-feed.ntasks :])
    # a browser that starts over gets what the feed holds, numbered as before
    late = TaskStreamReader()
    late.apply(*feed.full())
    assert late.first_task == reader.first_task and late.startstops() == reader.startstops()


def test_error_status_tuple_keys_and_unknown_actions():
    feed, reader = TaskStreamFeed(), TaskStreamReader()
    r = replace(
        record(0, "x", status="error"),
        key=("x", 1),
        startstops=(StartStop("compute", 0.0, 1.0), StartStop("something-new", 0, 1)),
    )
    reader.apply(*feed.update([r]))
    assert reader.keys == ["('x', 1)"]
    assert reader.tasks[0]["status"] == "error"
    assert [x["action"] for x in reader.rects] == ["compute"]


def test_a_hundred_thousand_tasks_in_compact_messages():
    feed = TaskStreamFeed()
    content, buffers = feed.update(stream(100_000))
    numbers = sum(len(b) for b in buffers)
    assert numbers == 100_000 * (4 + 1 + 8) + 125_000 * (4 + 4 + 1 + 8 + 8)
    assert len(content["keys"]) == 100_000
