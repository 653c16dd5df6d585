"""performance_report: one self-contained HTML file with the block's data."""

from __future__ import annotations

import base64
import json
import re
import time

import pytest

from kernel_cluster import performance_report, span
from kernel_cluster.diagnostics import report as report_module
from kernel_cluster.diagnostics.feeds import MetricsReader, RecordsReader

from .fakes import FakeSource, span_info


def report_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="kc-report-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def decode(data: dict) -> tuple[dict, dict]:
    (update,) = data["updates"]
    buffers = [base64.b64decode(b) for b in update["buffers"]]
    metrics, spans = MetricsReader(), RecordsReader()
    at = 0
    for part in update["parts"]:
        own = buffers[at : at + part["nbuffers"]]
        at += part["nbuffers"]
        if part["feed"] == "metrics":
            metrics.apply(part, own)
        elif part["feed"] == "spans":
            spans.apply(part, own)
    return metrics.as_dict(), spans.records


def slow_inc(x):
    time.sleep(0.01)
    return x + 1


def test_report_records_the_block_and_opens_offline(client, tmp_path):
    client.gather(client.map(slow_inc, range(100, 105)))  # before the block: not in it
    out = tmp_path / "report.html"
    with performance_report(filename=out, client=client) as rep, span("etl", "load"):
        futures = client.map(slow_inc, range(10))
        client.gather(futures)
    html = out.read_text()
    assert rep.html == html
    # self-contained: nothing to fetch (no script or style from elsewhere)
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    assert "</script" not in report_data(html)["summary"]["code"]
    data = report_data(html)
    s = data["summary"]
    assert s["tasks"] == 10 and s["workers"] == 2 and s["threads"] == 4
    assert "with performance_report" in s["code"] and "client.map(slow_inc" in s["code"]
    assert s["versions"]["kernel-cluster"]
    metrics, spans = decode(data)
    cpu = {k: v for k, v in metrics.items() if k[2] == "slow_inc" and k[3] == "thread-noncpu"}
    assert cpu and sum(cpu.values()) >= 0.05
    assert sorted(r["name"] for r in spans.values()) == [["etl"], ["etl", "load"]]


def test_report_escapes_data_that_looks_like_html(tmp_path):
    source = FakeSource()
    with performance_report(filename=tmp_path / "r.html", client=source):
        source.span_list.append(span_info("s1", ("</script><script>alert(1)</script>",)))
        source.metrics[("execute", "s1", "f</script>", "thread-cpu", "seconds")] = 1.0
    html = (tmp_path / "r.html").read_text()
    assert html.count("</script>") == 2  # the data's and the code's own closing tags
    data = report_data(html)
    _, spans = decode(data)
    assert spans["s1"]["name"] == ["</script><script>alert(1)</script>"]


def test_report_without_bundle_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setattr(report_module, "STATIC", tmp_path)
    with (
        pytest.raises(FileNotFoundError, match="npm run build"),
        performance_report(filename=tmp_path / "r.html", client=FakeSource()),
    ):
        pass
