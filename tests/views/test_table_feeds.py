"""Feeds: snapshots become deltas that rebuild the snapshot exactly."""

from __future__ import annotations

import json
import random

from kernel_cluster.diagnostics.feeds.tables import (
    MetricsFeed,
    MetricsReader,
    RecordsFeed,
    RecordsReader,
    metric_key,
)
from kernel_cluster.jupyter.publisher import message_size, pack

BASE = {
    ("execute", "s1", "inc", "thread-cpu", "seconds"): 1.5,
    ("execute", "s1", "inc", "thread-noncpu", "seconds"): 0.25,
    ("execute", None, None, "idle", "seconds"): 3.0,
    ("get-data", "network", "bytes"): 1000,
    ("gather-dep", "network", "seconds"): 0.1,
}


def test_metric_keys_take_five_fields():
    assert metric_key(("get-data", "network", "bytes")) == (
        "get-data",
        None,
        None,
        "network",
        "bytes",
    )
    assert metric_key(("execute", "s", "f", 42, "count")) == ("execute", "s", "f", "42", "count")
    assert metric_key("not-a-tuple") is None
    assert metric_key(("a", "b")) is None


def test_full_then_deltas_rebuild_the_snapshot():
    feed, reader = MetricsFeed(), MetricsReader()
    reader.apply(*feed.update(BASE))
    assert reader.as_dict() == {metric_key(k): v for k, v in BASE.items()}

    changed = dict(BASE)
    changed[("execute", "s1", "inc", "thread-cpu", "seconds")] = 2.0
    changed[("execute", "s2", "load", "disk-read", "bytes")] = 77
    content, buffers = feed.update(changed)
    assert not content["full"]
    assert content["strings"] == ["s2", "load", "disk-read"]  # only new strings travel
    assert content["first_row"] == len(BASE)
    assert len(buffers[0]) == 5 * 4  # one new row key
    assert len(buffers[1]) == 2 * 4  # two rows changed
    reader.apply(content, buffers)
    assert reader.as_dict() == {metric_key(k): v for k, v in changed.items()}


def test_nothing_changed_sends_nothing():
    feed = MetricsFeed()
    assert feed.update(BASE) is not None
    assert feed.update(dict(BASE)) is None
    assert feed.update({}) is None  # rows never disappear: totals only grow


def test_full_message_restates_everything_for_a_new_reader():
    feed = MetricsFeed()
    feed.update(BASE)
    feed.update({**BASE, ("execute", "s1", "inc", "output", "bytes"): 8})
    late = MetricsReader()
    late.apply(*feed.full())
    assert len(late.as_dict()) == len(BASE) + 1


def test_random_sequences_rebuild_exactly():
    rng = random.Random(7)
    feed, reader = MetricsFeed(), MetricsReader()
    current: dict[tuple, float] = {}
    for _ in range(50):
        for _ in range(rng.randint(0, 20)):
            key = (
                "execute",
                f"s{rng.randint(0, 3)}",
                f"f{rng.randint(0, 9)}",
                f"a{rng.randint(0, 5)}",
                "seconds",
            )
            current[key] = current.get(key, 0) + rng.random()
        msg = feed.update(current)
        if msg is not None:
            reader.apply(*msg)
        assert reader.as_dict() == {metric_key(k): v for k, v in current.items()}


def test_records_feed_sends_changed_and_removed():
    feed, reader = RecordsFeed("progress"), RecordsReader()
    reader.apply(*feed.update({"inc": {"memory": 1}, "add": {"waiting": 2}}))
    content, _ = feed.update({"inc": {"memory": 2}, "add": {"waiting": 2}})
    assert content["records"] == {"inc": {"memory": 2}} and content["removed"] == []
    reader.apply(content, [])
    content, _ = feed.update({"inc": {"memory": 2}})
    assert content["removed"] == ["add"]
    reader.apply(content, [])
    assert reader.records == {"inc": {"memory": 2}}
    assert feed.update({"inc": {"memory": 2}}) is None


def size_per_update(n_functions: int = 100, n_activities: int = 12) -> dict[str, int]:
    """Bytes on the wire for one widget update at this size (JSON content + buffers)."""
    feed = MetricsFeed()
    acts = [f"activity-{i}" for i in range(n_activities)]
    metrics = {
        ("execute", "span-0000-0000", f"function-{f:03d}", a, "seconds"): 1.0 + f + i
        for f in range(n_functions)
        for i, a in enumerate(acts)
    }
    first = message_size(*pack([feed.update(metrics)]))
    every = {k: v + 0.5 for k, v in metrics.items()}
    all_changed = message_size(*pack([feed.update(every)]))
    tenth = dict(every)
    for k in list(tenth)[::10]:
        tenth[k] += 0.25
    some_changed = message_size(*pack([feed.update(tenth)]))
    none = feed.update(tenth)
    return {
        "rows": len(metrics),
        "first_update": first,
        "all_rows_changed": all_changed,
        "tenth_changed": some_changed,
        "unchanged": 0 if none is None else -1,
        "json_equivalent": len(json.dumps([[*k, v] for k, v in every.items()])),
    }


def test_bytes_per_update_for_100_functions_by_12_activities():
    sizes = size_per_update()
    print(sizes)
    assert sizes["rows"] == 1200
    # a changed row costs 12 bytes (uint32 row number, float64 value)
    assert sizes["all_rows_changed"] < 1200 * 12 + 200
    assert sizes["tenth_changed"] < 120 * 12 + 200
    # the first update also carries strings and row keys: still well under plain JSON
    assert sizes["first_update"] < sizes["json_equivalent"] / 2
    assert sizes["unchanged"] == 0
