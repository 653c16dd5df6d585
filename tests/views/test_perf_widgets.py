"""TaskStream and ProfileFlameGraph: what they send, when, and their lifetime."""

from __future__ import annotations

import pytest

pytest.importorskip("anywidget")

from kernel_cluster.core.profile_tree import add_stack, describe, new_tree, validate
from kernel_cluster.diagnostics.feeds.profile_codec import flatten, unflatten
from kernel_cluster.jupyter.hub import Hub
from kernel_cluster.jupyter.widgets import ProfileFlameGraph, TaskStream

from ..engine.helpers import wait_for
from .fakes import Clock, StreamSource
from .test_publisher import Browser

F = describe("app.py", "main", 3, "run()")
G = describe("work.py", "crunch", 10, "x * x")
H = describe("io.py", "read", 7, "f.read()")


def capture(w) -> Browser:
    browser = Browser()
    w.publisher._send = browser
    w._on_browser_message(w, {"type": "refresh"}, [])
    return browser


# -- task stream -------------------------------------------------------------------------


def test_task_stream_sends_new_records_as_deltas():
    source, clock = StreamSource(), Clock()
    source.add("inc-1", "inc-2")
    w = TaskStream(source, autostart=False, clock=clock)
    browser = capture(w)
    assert w.kind == "task-stream"
    assert browser.tasks.keys == ["inc-1", "inc-2"]
    source.add("dec-3", start=5.0, thread=2)
    clock.t += 1
    assert w.update()
    content, buffers = browser.messages[-1]
    (part,) = content["parts"]
    assert not part["full"] and part["keys"] == ["dec-3"] and len(buffers) == 8
    assert browser.tasks.startstops()["dec-3"] == [("compute", 5.0, 6.0)]
    w.close()


def test_task_stream_throttles_and_skips_when_nothing_changed():
    source, clock = StreamSource(), Clock()
    w = TaskStream(source, autostart=False, clock=clock, interval=0.1)  # raised to 0.25
    browser = capture(w)
    for i in range(20):  # 2.5 s of new tasks, every 0.125 s
        source.add(f"inc-{i}", start=float(i))
        clock.t += 0.125
        w.update()
    assert len(browser.messages) == 1 + 10  # the refresh, then four a second
    clock.t += 1
    w.update()
    assert len(browser.tasks.keys) == 20
    reads = source.stream_reads
    clock.t += 1
    assert not w.update()  # nothing new: nothing sent, and the history was not copied
    assert source.stream_reads == reads
    w.close()


def test_task_stream_keeps_max_tasks():
    source, clock = StreamSource(), Clock()
    w = TaskStream(source, autostart=False, clock=clock, max_tasks=10)
    browser = capture(w)
    for i in range(40):
        source.add(f"t-{i}")
    clock.t += 1
    w.update()
    assert 10 <= len(browser.tasks.keys) <= 12 and browser.tasks.keys[-1] == "t-39"
    w.close()


def test_task_stream_close_stops_updates():
    source, clock = StreamSource(), Clock()
    h = Hub(pause=clock.pause, clock=clock)
    w = TaskStream(source, interval=0.25, clock=clock, hub=h)
    assert w.updating
    wait_for(lambda: clock.pausing == 1, what="the hub's first pause")
    source.add("inc-1")
    reads = source.reads
    clock.advance(0.25)  # returns once the hub has read and paused again
    assert source.reads > reads
    w.close()
    assert not w.updating
    reads = source.reads
    source.add("late-1")
    clock.advance(0.25, settle=False)
    wait_for(lambda: not h.running, what="the hub's thread to end with its last view")
    clock.advance(10.0, settle=False)  # forty intervals: a hub still running would read
    assert source.reads == reads


# -- flame graph -------------------------------------------------------------------------


def tree_of(*stacks):
    tree = new_tree()
    for stack in stacks:
        add_stack(tree, stack)
    return tree


def test_flatten_round_trips_and_prunes():
    tree = tree_of([F, G], [F, G], [F, H], [F])
    back = unflatten(*flatten(tree))
    validate(back)
    assert back == tree
    pruned = unflatten(*flatten(tree, min_fraction=0.3))
    assert [c["description"]["name"] for c in pruned["children"][F[0]]["children"].values()] == [
        "crunch"
    ]
    content, _ = flatten(tree, max_frames=2)
    assert content["nframes"] == 2


def test_flame_graph_sends_profile_and_timeline_and_follows_selection():
    source, clock = StreamSource(), Clock()
    source.trees[None] = tree_of([F, G], [F, H])
    source.trees["crunch"] = tree_of([F, G])
    source.meta = {
        "counts": [(10.0, 2)],
        "keys": {"crunch": [(10.0, 1)], "read": [(10.0, 1)]},
        "cycle_interval": 1.0,
    }
    w = ProfileFlameGraph(source, autostart=False, clock=clock)
    browser = capture(w)
    assert browser.profile.tree["count"] == 2
    assert browser.profile.timeline["keys"] == {"crunch": [[10.0, 1]], "read": [[10.0, 1]]}
    reads = source.profile_reads
    clock.t += 5
    assert not w.update()  # no new samples: the tree is not even read again
    assert source.profile_reads == reads
    w.prefix = "crunch"  # from the browser's selector, or from Python
    assert browser.profile.tree["count"] == 1
    assert browser.profile.selection == {"prefix": "crunch", "start": None, "stop": None}
    w.start, w.stop = 11.0, 9.0  # a brushed window, set backwards: taken in order
    assert browser.profile.selection == {"prefix": "crunch", "start": 9.0, "stop": 11.0}
    # new samples in the window: the tree is read and sent again, at the rate bound
    source.trees["crunch"] = tree_of([F, G], [F, G])
    source.meta["keys"]["crunch"] = [(10.0, 2)]
    n = len(browser.messages)
    assert not w.update()  # too soon after the selection's message
    clock.t += 1
    assert w.update()
    assert len(browser.messages) == n + 1 and browser.profile.tree["count"] == 2
    w.close()


def test_flame_graph_close():
    source = StreamSource()
    w = ProfileFlameGraph(source, interval=1.0)
    assert w.updating
    w.close()
    assert not w.updating
    reads = source.profile_reads
    w.prefix = "other"  # closed: a late change reads and sends nothing
    assert source.profile_reads == reads
