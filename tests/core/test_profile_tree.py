"""Profile trees and a worker's profile log: pure data, scripted times, no engine."""

from __future__ import annotations

import base64
import datetime
import json
import pickle
import re
import sys

import pytest

from kernel_cluster.core.profile_tree import (
    ProfileError,
    ProfileLog,
    add_stack,
    depth,
    describe,
    from_flat,
    inclusive_counts,
    iter_nodes,
    merge,
    merge_into,
    merge_metadata,
    new_tree,
    to_flat,
    validate,
)
from kernel_cluster.diagnostics.feeds.profile_codec import unflatten
from kernel_cluster.diagnostics.pages.profile_page import flame_graph_html
from kernel_cluster.diagnostics.queries.timewindow import parse_duration, resolve_window

F = describe("work.py", "f", 3, "g()")
G = describe("work.py", "g", 10, "time.sleep(2)")
H = describe("work.py", "h", 20, "time.sleep(1)")
F_OTHER_LINE = describe("work.py", "f", 4, "h()")


def child(tree: dict, *frames) -> dict:
    node = tree
    for identifier, _ in frames:
        node = node["children"][identifier]
    return node


def test_add_counts_every_frame_and_the_innermost_line():
    tree = new_tree()
    add_stack(tree, [F, G])
    add_stack(tree, [F, G])
    add_stack(tree, [F_OTHER_LINE, H])
    add_stack(tree, [F])
    validate(tree)
    assert tree["count"] == 4
    assert child(tree, F)["count"] == 3
    assert child(tree, F)["own"] == 1  # the sample that stopped in f itself
    leaf = child(tree, F, G)
    assert (leaf["count"], leaf["own"], leaf["children"]) == (2, 2, {})
    assert leaf["description"] == {
        "filename": "work.py",
        "name": "g",
        "line_number": 10,
        "line": "time.sleep(2)",
    }
    assert leaf["identifier"] == G[0]
    # one function at two lines is two call sites
    assert child(tree, F_OTHER_LINE, H)["count"] == 1
    assert inclusive_counts(tree) == {("work.py", "f"): 4, ("work.py", "g"): 2, ("work.py", "h"): 1}


def test_a_sample_without_frames_counts_at_the_root():
    tree = new_tree()
    add_stack(tree, [])
    validate(tree)
    assert (tree["count"], tree["own"], tree["children"]) == (1, 1, {})


def test_merge_sums_shared_paths_and_keeps_the_rest():
    a, b = new_tree(), new_tree()
    for _ in range(3):
        add_stack(a, [F, G])
    add_stack(a, [F])
    add_stack(b, [F, G])
    add_stack(b, [F_OTHER_LINE, H])
    before = to_flat(a), to_flat(b)
    merged = merge(a, b)
    validate(merged)
    assert (to_flat(a), to_flat(b)) == before  # inputs untouched
    assert merged["count"] == 6
    assert child(merged, F)["count"] == 5
    assert child(merged, F)["own"] == 1
    assert child(merged, F, G)["count"] == 4
    assert child(merged, F_OTHER_LINE, H)["count"] == 1
    assert merge()["count"] == 0
    assert to_flat(merge(a, new_tree())) == to_flat(a)
    assert merge_into(new_tree(), a, b)["count"] == 6
    with pytest.raises(ValueError, match="into itself"):
        merge_into(a, a)


def test_validate_names_the_broken_node():
    tree = new_tree()
    add_stack(tree, [F, G])
    child(tree, F, G)["count"] = 5
    with pytest.raises(ProfileError, match="count 1") as info:
        validate(tree)
    assert info.value.path == ("root", F[0])
    assert pickle.loads(pickle.dumps(info.value)).path == info.value.path

    tree = new_tree()
    add_stack(tree, [F])
    tree["children"]["elsewhere"] = tree["children"].pop(F[0])
    with pytest.raises(ProfileError, match="files child"):
        validate(tree)
    with pytest.raises(ProfileError, match="lacks"):
        validate({"count": 0})


def test_stacks_deeper_than_the_recursion_limit():
    n = sys.getrecursionlimit() * 5
    stack = [describe("deep.py", "recurse", 7, "return recurse(n - 1)")] * n
    leaf = describe("deep.py", "recurse", 6, "time.sleep(1)")
    a = new_tree()
    add_stack(a, [*stack, leaf])
    add_stack(a, stack)
    b = merge(a, a)
    validate(b)
    assert depth(b) == n + 1
    assert b["count"] == 4
    assert inclusive_counts(b) == {("deep.py", "recurse"): 4}
    rows = pickle.loads(pickle.dumps(to_flat(b)))  # the form profiles travel in
    back = from_flat(rows)
    validate(back)
    assert to_flat(back) == to_flat(b)
    assert sum(1 for _ in iter_nodes(back)) == n + 2
    page = flame_graph_html(back)
    assert page_tree(page)["count"] == 4
    assert page_data(page)["profiles"]["trees"][""]["header"]["nframes"] == n + 2


def test_flat_form_round_trips():
    tree = new_tree()
    add_stack(tree, [F, G])
    add_stack(tree, [F_OTHER_LINE, H])
    rows = to_flat(tree)
    assert rows[0][0] == -1
    assert all(parent < i for i, (parent, *_) in enumerate(rows))
    assert from_flat(rows) == tree
    assert from_flat([]) == new_tree()


# -- a worker's log over (scripted) time ---------------------------------------------------


def scripted_log() -> ProfileLog:
    """Cycles (100, 101], (101, 102], (102, 103]; then samples in the current one."""
    log = ProfileLog(now=100.0, max_cycles=10)
    log.add([F, G], "f")
    log.add([F, G], "f")
    log.cycle(101.0)
    log.add([H], "h")
    log.cycle(102.0)
    log.cycle(103.0)  # an idle second
    log.add([F, G], "f")
    return log


def test_windows_select_whole_cycles():
    log = scripted_log()
    assert log.get()["count"] == 4  # all time, the current cycle included
    assert log.get(now=103.5)["count"] == 4
    assert log.get(start=100.5, stop=100.7)["count"] == 2
    assert log.get(start=101.0, stop=101.5)["count"] == 1  # (100, 101] ends at start
    assert log.get(start=101.5, stop=102.5)["count"] == 1
    assert log.get(start=102.5, stop=102.9)["count"] == 0
    assert log.get(start=102.5, now=103.5)["count"] == 1  # the current cycle
    assert log.get(stop=101.5, now=103.5)["count"] == 3


def test_a_window_in_the_future_is_empty():
    log = scripted_log()
    tree = log.get(start=200.0, now=103.5)
    assert tree == new_tree()
    assert log.metadata(start=200.0, now=103.5) == {"counts": [], "keys": {}}


def test_prefixes_are_kept_apart():
    log = scripted_log()
    f = log.get(prefix="f")
    assert f["count"] == 3
    assert set(f["children"]) == {F[0]}
    h = log.get(prefix="h", start=101.5, stop=102.0)
    assert h["count"] == 1 and set(h["children"]) == {H[0]}
    assert log.get(prefix="nothing")["count"] == 0


def test_totals_outlive_the_bounded_history():
    log = ProfileLog(now=0.0, max_cycles=3)
    for t in range(1, 11):
        log.add([F], "f")
        log.cycle(float(t))
    assert len(log.cycles) == 3
    assert log.get()["count"] == 10
    assert log.get(start=0.0, stop=10.0)["count"] == 3
    validate(log.totals["f"])


def test_metadata_counts_over_time():
    log = scripted_log()
    meta = log.metadata(now=103.5)
    assert meta["counts"] == [(101.0, 2), (102.0, 1), (103.0, 0), (103.5, 1)]
    assert meta["keys"] == {"f": [(101.0, 2), (103.5, 1)], "h": [(102.0, 1)]}
    assert log.metadata()["counts"][-1] == (103.0, 0)  # without now: closed cycles only
    assert log.metadata(start=101.5, stop=102.5)["counts"] == [(102.0, 1), (103.0, 0)]


def test_metadata_of_workers_is_summed_per_cycle():
    a = {"counts": [(100.2, 3), (101.2, 4)], "keys": {"f": [(100.2, 3), (101.2, 4)]}}
    b = {"counts": [(100.7, 1), (101.7, 2)], "keys": {"g": [(101.7, 2)]}}
    merged = merge_metadata([a, b], resolution=1.0)
    assert merged == {
        "counts": [(100.0, 4), (101.0, 6)],
        "keys": {"f": [(100.0, 3), (101.0, 4)], "g": [(101.0, 2)]},
    }
    with pytest.raises(ValueError):
        merge_metadata([a], resolution=0)


# -- the diagnostics' pure helpers ----------------------------------------------------------


def test_time_windows_as_users_write_them():
    now = 1_000.0
    assert parse_duration("10s") == 10
    assert parse_duration("2min") == 120
    assert parse_duration("500ms") == 0.5
    assert resolve_window("10s", None, now) == (990.0, None)
    assert resolve_window(900, "1min", now) == (900.0, 940.0)
    moment = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
    assert resolve_window(moment, None, now)[0] == moment.timestamp()
    with pytest.raises(ValueError, match="duration"):
        resolve_window("soon", None, now)


def page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="kc-report-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def page_tree(page: str, prefix: str = "") -> dict:
    entry = page_data(page)["profiles"]["trees"][prefix]
    return unflatten(entry["header"], [base64.b64decode(b) for b in entry["buffers"]])


def test_flame_graph_page_is_self_contained():
    tree = new_tree()
    add_stack(tree, [F, G])
    add_stack(tree, [F, describe("<b>&.py", "h</script><i>", 1, "x < y")])
    page = flame_graph_html(tree, title="t</title>")
    back = page_tree(page)
    assert back == tree
    assert page_data(page)["title"] == "t</title>"
    assert "<i>" not in page and "</script><i>" not in page and "t</title>" not in page
    for attr in ("src=", "href="):
        assert f'{attr}"http' not in page and f"{attr}'http" not in page
    # nothing fetched: no element loads from elsewhere (XML namespace names are not fetches)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "2 samples" in page
    assert "No samples" in flame_graph_html(new_tree())
