"""performance_report: one self-contained HTML file with the block's data."""

from __future__ import annotations

import base64
import json
import re
import time

import pytest

from kernel_cluster import performance_report, span
from kernel_cluster.diagnostics.feeds.tables import MetricsReader, RecordsReader
from kernel_cluster.diagnostics.pages import report as report_module

from ..engine.helpers import wait_for
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


def crunch_numbers(x):
    total = 0
    for i in range(400_000):  # pure Python, long enough for the profiler to see it
        total += i * x
    return total


def report_sections(html: str):
    from kernel_cluster.diagnostics.feeds.profile_codec import unflatten
    from kernel_cluster.diagnostics.feeds.task_stream import TaskStreamReader

    data = report_data(html)
    (update,) = data["updates"]
    buffers = [base64.b64decode(b) for b in update["buffers"]]
    tasks = TaskStreamReader()
    at = 0
    for part in update["parts"]:
        own = buffers[at : at + part["nbuffers"]]
        at += part["nbuffers"]
        if part["feed"] == "tasks":
            tasks.apply(part, own)
    trees = {
        prefix: unflatten(t["header"], [base64.b64decode(b) for b in t["buffers"]])
        for prefix, t in (data["sections"].get("profile") or {"trees": {}})["trees"].items()
    }
    return data["sections"], tasks, trees


def test_report_holds_task_stream_profile_memory_and_transfers(client, tmp_path):
    out = tmp_path / "report.html"
    with performance_report(filename=out, client=client, memory_interval=0.02) as rep:
        parts = client.map(crunch_numbers, range(8))
        total = client.submit(sum, parts)  # gathers results from both workers
        total.result()
        wait_for(lambda: len(rep._memory) >= 3, what="three memory samples")
    sections, tasks, trees = report_sections(out.read_text())
    assert len(tasks.keys) == 9
    assert {t["prefix"] for t in tasks.tasks} == {"crunch_numbers", "sum"}
    actions = {r["action"] for r in tasks.rects}
    assert "compute" in actions and "transfer" in actions
    memory = sections["memory"]
    assert len(memory["time"]) >= 3 and min(memory["process"]) > 10_000_000
    bandwidth = sections["bandwidth"]
    assert bandwidth["bytes"] and all(b > 0 for b in bandwidth["bytes"])
    assert len(bandwidth["workers"]) == 2 and bandwidth["window"][0] <= min(bandwidth["start"])
    if trees:  # sampled every 10 ms: a busy machine may still miss a short block
        names = {n["description"]["name"] for n in _nodes(trees[""])}
        assert "crunch_numbers" in names


def _nodes(tree):
    from kernel_cluster.core.profile_tree import iter_nodes

    return [n for _, n in iter_nodes(tree)]


def test_report_without_engine_extras_has_no_such_sections(tmp_path):
    source = FakeSource()  # no task stream, profiles, memory or transfer logs
    with performance_report(filename=tmp_path / "r.html", client=source):
        source.metrics[("execute", "s1", "f", "thread-cpu", "seconds")] = 1.0
    data = report_data((tmp_path / "r.html").read_text())
    assert data["sections"] == {}
    assert [p["feed"] for p in data["updates"][0]["parts"]] == ["metrics", "spans", "progress"]


def inc(x):
    return x + 1


def test_report_says_what_the_blocks_numbers_suggest(client, tmp_path):
    out = tmp_path / "findings.html"
    with performance_report(filename=out, client=client):
        client.gather(client.map(inc, range(2000)))
    findings = report_data(out.read_text())["sections"]["findings"]
    rules = [f["rule"] for f in findings["found"]]
    assert "tasks-too-small" in rules, findings
    found = findings["found"][rules.index("tasks-too-small")]
    assert "median task seconds" in found["evidence"] and found["advice"]
    # a block is no span: no critical path, so idle-bound is said to be unchecked
    assert "idle-bound" in findings["unchecked"] and "gil-contention" in findings["unchecked"]
