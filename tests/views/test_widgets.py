"""The anywidget classes: what they send, what they accept, and their lifetime."""

from __future__ import annotations

import threading

import pytest
import traitlets

pytest.importorskip("anywidget")

from kernel_cluster.diagnostics.source import WouldBlock
from kernel_cluster.jupyter import widgets
from kernel_cluster.jupyter.hub import Hub
from kernel_cluster.jupyter.widgets import Dashboard, FineMetrics, Progress, SpanTree

from ..engine.helpers import wait_for
from .fakes import Clock, CountingSource, FakeSource, span_info
from .test_publisher import Browser

CPU = ("execute", "s1", "inc", "thread-cpu", "seconds")


def capture(w) -> Browser:
    browser = Browser()
    w.publisher._send = browser
    return browser


def test_fine_metrics_widget_sends_metrics_and_spans():
    source = FakeSource()
    source.metrics[CPU] = 1.0
    source.span_list.append(span_info("s1", ("load",)))
    w = FineMetrics(source, autostart=False)
    browser = capture(w)
    assert w.kind == "fine-metrics" and w.unit == "seconds"
    assert w.update(force=True)
    assert [p["feed"] for p in browser.messages[0][0]["parts"]] == ["metrics", "spans"]
    assert browser.metrics.as_dict() == {CPU: 1.0}
    w.close()


def test_state_after_updates_and_throttling():
    source, clock = FakeSource(), Clock()
    w = FineMetrics(source, autostart=False, clock=clock, interval=0.5)
    browser = capture(w)
    w._on_browser_message(w, {"type": "refresh"}, [])
    for i in range(10):  # 1.25 s of changes, every 0.125 s
        source.metrics[CPU] = float(i)
        clock.t += 0.125
        w.update()
    assert len(browser.messages) == 1 + 2  # the refresh, then one per 0.5 s
    clock.t += 1
    w.update()
    assert browser.metrics.as_dict() == {CPU: 9.0}
    n = len(browser.messages)
    clock.t += 1
    assert not w.update()  # nothing changed: nothing sent
    assert len(browser.messages) == n
    w.close()


class LoopSource(FakeSource):
    """A source read on its own event loop's thread would block (an asynchronous
    client's, a widget made in a coroutine): reads there raise WouldBlock."""

    def __init__(self) -> None:
        super().__init__()
        self.loop_thread = threading.current_thread()

    def _check(self) -> None:
        if threading.current_thread() is self.loop_thread:
            raise WouldBlock("read on the loop that must answer it")
        super()._check()


def test_a_widget_made_where_it_cannot_read_gets_its_first_state_from_the_hub(monkeypatch):
    """Made on an asynchronous client's loop, a widget cannot read as it is made; the
    hub's thread sends its whole state at its first tick, with no ``update()`` nor a
    browser's refresh (what a browser already rendering it would draw)."""
    source, clock, browser = LoopSource(), Clock(), Browser()
    source.metrics[CPU] = 1.0
    source.span_list.append(span_info("s1", ("load",)))
    monkeypatch.setattr(FineMetrics, "_send_update", lambda _self, c, b: browser(c, b))
    h = Hub(pause=clock.pause, clock=clock)
    w = FineMetrics(source, clock=clock, hub=h)
    try:
        assert browser.messages == []  # it could not read as it was made
        assert w.updating
        wait_for(lambda: clock.pausing == 1, what="the hub's first pause")
        clock.advance(0.25)  # one tick
        assert len(browser.messages) == 1
        parts = browser.messages[0][0]["parts"]
        assert [p["feed"] for p in parts] == ["metrics", "spans"]
        assert all(p.get("full") for p in parts), parts
        assert browser.metrics.as_dict() == {CPU: 1.0}
        assert browser.spans.records["s1"]["name"] == ["load"]
    finally:
        w.close()
        h.stop()


def test_browser_messages_are_validated():
    source = FakeSource()
    w = Progress(source, autostart=False)
    browser = capture(w)
    for bad in ["refresh", {"type": "exec", "code": "1"}, {"type": "refresh", "x": b"\x80"}, None]:
        w._on_browser_message(w, bad, [b"pickle"] if isinstance(bad, dict) and "x" in bad else [])
    assert browser.messages == []
    w._on_browser_message(w, {"type": "refresh"}, [])
    assert len(browser.messages) == 1 and browser.messages[0][0]["parts"][0]["full"]
    w.close()


def test_close_stops_updates():
    source, clock = CountingSource(), Clock()
    h = Hub(pause=clock.pause, clock=clock)
    w = SpanTree(source, interval=0.25, clock=clock, hub=h)
    assert w.updating
    wait_for(lambda: clock.pausing == 1, what="the hub's first pause")
    reads = source.change_reads
    clock.advance(0.25)  # returns once the hub has read and paused again
    assert source.change_reads == reads + 1
    w.close()
    assert not w.updating
    reads = source.change_reads
    source.span_list.append(span_info("s9", ("late",)))
    clock.advance(0.25, settle=False)
    wait_for(lambda: not h.running, what="the hub's thread to end with its last view")
    clock.advance(10.0, settle=False)  # forty intervals: a hub still running would read
    assert source.change_reads == reads


def test_span_filter_is_checked_and_linked_to_a_tree():
    source = FakeSource()
    fm, tree = FineMetrics(source, autostart=False), SpanTree(source, autostart=False)
    with pytest.raises(traitlets.TraitError):
        fm.span_filter = "load"
    fm.span_filter = "tag:load"
    fm.link(tree)
    tree.selected = "abc"
    assert fm.span_filter == "id:abc"
    tree.selected = ""
    assert fm.span_filter == ""
    fm.close()
    tree.close()


def test_a_missing_bundle_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setattr(widgets, "BUNDLE", tmp_path / "widget.js")
    with pytest.raises(FileNotFoundError, match="npm run build"):
        FineMetrics(FakeSource(), autostart=False)


def test_not_a_source_is_refused():
    with pytest.raises(TypeError, match="DiagnosticsSource"):
        FineMetrics(object(), autostart=False)


def test_client_dashboard_shows_a_real_workload(client):
    def inc(x):
        return x + 1

    w = client.dashboard(interval=0.25)
    try:
        assert isinstance(w, Dashboard) and w.updating
        browser = capture(w)
        w._on_browser_message(w, {"type": "refresh"}, [])
        from kernel_cluster import span

        with span("work"):
            futures = client.map(inc, range(20))
            assert sum(client.gather(futures)) == 210
        wait_for(
            lambda: (
                any(k[2] == "inc" and k[3] == "thread-cpu" for k in browser.metrics.as_dict())
                and browser.progress.records.get("inc", {}).get("memory") == 20
            )
        )
        names = [r["name"] for r in browser.spans.records.values()]
        assert ["work"] in names
        del futures
    finally:
        w.close()
    assert not w.updating
