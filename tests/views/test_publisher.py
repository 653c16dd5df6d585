"""The publisher: deltas at a bounded rate, nothing when nothing changed."""

from __future__ import annotations

import pytest

from kernel_cluster.diagnostics.feeds.profile import ProfileReader
from kernel_cluster.diagnostics.feeds.tables import MetricsReader, RecordsReader
from kernel_cluster.diagnostics.feeds.task_stream import TaskStreamReader
from kernel_cluster.jupyter.publisher import MIN_INTERVAL, Publisher

from .fakes import Clock, FakeSource, span_info

CPU = ("execute", "s1", "inc", "thread-cpu", "seconds")


class Browser:
    """Applies what the publisher sends, as the front-end's store does."""

    def __init__(self) -> None:
        self.messages: list[tuple[dict, list[bytes]]] = []
        self.metrics = MetricsReader()
        self.spans = RecordsReader()
        self.progress = RecordsReader()
        self.tasks = TaskStreamReader()
        self.profile = ProfileReader()

    def __call__(self, content: dict, buffers: list[bytes]) -> None:
        assert content["type"] == "update"
        self.messages.append((content, buffers))
        at = 0
        for part in content["parts"]:
            own = buffers[at : at + part["nbuffers"]]
            at += part["nbuffers"]
            getattr(self, part["feed"]).apply(part, own)


@pytest.fixture
def setup():
    source, clock, browser = FakeSource(), Clock(), Browser()
    pub = Publisher(
        source, ("metrics", "spans", "progress"), browser, min_interval=0.5, clock=clock
    )
    return source, clock, browser, pub


def test_updates_rebuild_the_sources_state(setup):
    source, _, browser, pub = setup
    source.metrics[CPU] = 1.0
    source.span_list.append(span_info("s1", ("load",)))
    source.prefixes["inc"] = {"memory": 3, "processing": 1, "waiting": 0}
    assert pub.tick()
    assert browser.metrics.as_dict() == {CPU: 1.0}
    assert browser.spans.records["s1"]["name"] == ["load"]
    assert browser.progress.records == {"inc": {"memory": 3, "processing": 1}}


def test_full_updates_until_a_browser_asks_then_deltas(setup):
    source, clock, browser, pub = setup
    source.metrics[CPU] = 1.0
    pub.tick()
    source.metrics[CPU] = 2.0
    clock.t += 1
    pub.tick()
    assert all(p["full"] for p in browser.messages[-1][0]["parts"])  # nobody listening yet
    pub.send_full()  # the front-end's {"type": "refresh"}
    source.metrics[CPU] = 3.0
    clock.t += 1
    assert pub.tick()
    parts = browser.messages[-1][0]["parts"]
    assert [p["feed"] for p in parts] == ["metrics"] and not parts[0]["full"]
    assert browser.metrics.as_dict() == {CPU: 3.0}


def test_nothing_changed_sends_nothing(setup):
    source, clock, browser, pub = setup
    source.metrics[CPU] = 1.0
    pub.send_full()
    n = len(browser.messages)
    for _ in range(5):
        clock.t += 1
        assert not pub.tick()
    assert len(browser.messages) == n


def test_rate_is_bounded_and_skipped_changes_arrive_later(setup):
    source, clock, browser, pub = setup
    pub.send_full()
    sent = 0
    for i in range(40):  # 40 changes in 2 seconds, ticked every 50 ms
        source.metrics[CPU] = float(i)
        clock.t += 0.05
        sent += pub.tick()
    assert sent <= 2 / 0.5 + 1
    clock.t += 1
    pub.tick()
    assert browser.metrics.as_dict() == {CPU: 39.0}


def test_the_rate_bound_has_a_floor():
    pub = Publisher(FakeSource(), ("metrics",), lambda c, b: None, min_interval=0.01)
    assert pub.min_interval == MIN_INTERVAL == 0.25


def test_unknown_feed_is_refused():
    with pytest.raises(ValueError, match="Unknown feeds"):
        Publisher(FakeSource(), ("metrics", "gpu"), lambda c, b: None)
