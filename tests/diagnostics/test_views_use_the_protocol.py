"""Views reach an engine through DiagnosticsSource alone.

Each view reads from a source that forwards the protocol's members and nothing
else, and notes any other attribute asked for: a view that probed the engine (or
an undeclared method of EngineSource) would be caught here, even where it would
swallow the AttributeError and quietly leave a section out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

from kernel_cluster import Client, span
from kernel_cluster.diagnostics.attach import source_of
from kernel_cluster.diagnostics.history import compare as comparing
from kernel_cluster.diagnostics.history.recorder import Recorder
from kernel_cluster.diagnostics.history.settings import HistorySettings
from kernel_cluster.diagnostics.pages.report import performance_report
from kernel_cluster.diagnostics.queries.critical_path import span_critical_path
from kernel_cluster.diagnostics.queries.findings import diagnose
from kernel_cluster.diagnostics.queries.memory_sampler import PlainMemorySampler
from kernel_cluster.diagnostics.queries.profile import profile, profile_metadata
from kernel_cluster.diagnostics.queries.progress_text import TextProgress
from kernel_cluster.diagnostics.queries.task_stream import TaskStreamRecorder
from kernel_cluster.diagnostics.source import DiagnosticsSource
from kernel_cluster.jupyter.publisher import FEEDS, Publisher

MEMBERS = {
    name
    for name in vars(DiagnosticsSource)
    if not name.startswith("_") and callable(getattr(DiagnosticsSource, name, None))
} | {"kind", "changes_since"}  # changes_since: optional (diagnostics/changes.ChangeSource)


class OnlyTheProtocol:
    """Forwards the protocol's members of ``inner``; notes what was read (called) and
    anything else asked for."""

    def __init__(self, inner: DiagnosticsSource) -> None:
        self._inner = inner
        self.used: set[str] = set()
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in MEMBERS:
            self.refused.append(name)
            raise AttributeError(f"{name!r} is not part of DiagnosticsSource")
        value = getattr(self._inner, name)
        if not callable(value):  # kind
            self.used.add(name)
            return value

        def read(*args: Any, **kwargs: Any) -> Any:
            self.used.add(name)
            return value(*args, **kwargs)

        return read


def work(x: int) -> int:
    total = 0
    for i in range(50_000):
        total += i * x
    return total


def report_sections(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="kc-report-data">(.*?)</script>', html, re.S)
    assert m is not None
    sections: dict[str, Any] = json.loads(m.group(1))["sections"]
    return sections


def test_views_read_through_the_protocol_alone(client: Client, tmp_path: Path) -> None:
    assert {"fine_metrics", "task_stream_since", "transfer_logs", "memory", "now"} <= MEMBERS
    proxy = OnlyTheProtocol(client.diagnostics)
    src = cast(DiagnosticsSource, proxy)
    assert source_of(src) is src
    sent: list[dict[str, Any]] = []
    publisher = Publisher(src, FEEDS, lambda content, buffers: sent.append(content))
    ms = PlainMemorySampler()
    recorder = TaskStreamRecorder(src)
    report = performance_report(filename=tmp_path / "r.html", client=src, memory_interval=0.02)
    with (
        report,
        ms.sample("block", client=src, interval=0.02),
        recorder,
        span("through the protocol"),
    ):
        parts = client.map(work, range(8))
        assert client.submit(sum, parts).result() > 0
    publisher.send_full()
    # the run history: its recorder, and a comparison of two live spans
    history = Recorder(
        src, kind="embedded", cluster="c", settings=lambda: HistorySettings(tmp_path / "h.db")
    )
    assert history.flush() and history.written >= 1
    history.close()
    table = comparing.compare("through the protocol", "through the protocol", src)
    assert "work" in set(table.function) and (table.delta == 0).all()
    worker_name = next(iter(client.scheduler_info()["workers"].values()))["name"]
    profile(src, start="1h")
    profile_metadata(src, workers=[worker_name])
    text = TextProgress(src, timeout=5).run()
    # a span explained: its critical path and the findings
    assert span_critical_path(src, "through the protocol").steps
    diagnose(src, "through the protocol")

    assert not proxy.refused, proxy.refused
    assert proxy.used >= MEMBERS - {"kind", "span_metrics", "task_stream"}
    # nothing was left out for want of a read
    assert report.html is not None
    assert {"memory", "bandwidth"} <= set(report_sections(report.html))
    assert len(recorder.data) == 9 and len(ms.samples["block"]) >= 2
    assert {p["feed"] for p in sent[-1]["parts"]} == set(FEEDS)
    assert "work" in text
