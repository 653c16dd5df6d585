"""A span explained on request from a view (kernel_cluster/jupyter/explain.py): over
a lab channel of a real cluster, the answer carries the critical path (the slow
chain), the idle by reason and the findings; bad requests get an error naming what
was wrong, and the channel goes on answering. Answers come from explain's thread, a
moment after the request: each test waits for them (``answers``), with a bound."""

from __future__ import annotations

import time

import pytest

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.jupyter import explain, lab
from tests.engine.helpers import wait_for
from tests.views.test_lab import RecordingComm


def answers(comm, kind, n=1):
    """The first ``n`` answers of this kind, once they have come (within 30 s)."""
    wait_for(lambda: len(comm.messages(kind)) >= n, 30, f"{n} '{kind}' answer(s)")
    return comm.messages(kind)[:n]


def link(seconds, *inputs):
    time.sleep(seconds)
    return 1 + sum(inputs)


@pytest.fixture
def channel(restore_default_source):
    with KernelCluster(n_workers=2, threads_per_worker=2, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        graph: dict = {}
        for i in range(4):  # the slow chain: 4 x 0.1 s, one after the other
            graph[f"chain-{i}"] = (link, 0.1, *([f"chain-{i - 1}"] if i else []))
        for i in range(20):  # quick work beside it
            graph[f"quick-{i}"] = (link, 0.002)
        with span("slow chain") as span_id:
            client.get(graph, sorted(graph))
        h = lab.Hub()
        comm = RecordingComm()
        try:
            h.opened(comm)
            yield client, comm, span_id
        finally:
            h.close()


def test_a_span_is_explained_once_asked(channel):
    client, comm, span_id = channel
    comm.from_browser({"type": "explain", "span": span_id})
    (answer,) = answers(comm, "explain")
    assert answer["span"] == span_id and "error" not in answer
    assert answer["done"] is True
    path = answer["path"]
    assert [s["key"] for s in path["steps"]][-4:] == [f"chain-{i}" for i in range(4)]
    assert path["length"] == pytest.approx(client.critical_path(span=span_id).length)
    assert set(path["totals"]) == {"scheduler", "transfer", "queued", "compute"}
    # idle by reason, and the span's "idle or other spans", as the span's metrics have them
    assert all(k == "idle or other spans" or k.startswith("idle") for k in answer["idle"])
    assert [f["rule"] for f in answer["findings"]["found"]] == client.diagnose(span=span_id).rules
    # nothing else was sent for it: no update carries paths or findings
    assert not any("path" in d for d in comm.messages("update"))


def test_a_finished_span_is_answered_from_the_cache(channel, monkeypatch):
    _client, comm, span_id = channel
    comm.from_browser({"type": "explain", "span": span_id})
    answers(comm, "explain")
    calls = []
    monkeypatch.setattr(explain, "explain", lambda *a: calls.append(a) or {})
    comm.from_browser({"type": "explain", "span": span_id})
    first, second = answers(comm, "explain", 2)
    assert calls == [] and first == second


def test_path_lengths_of_finished_spans(channel):
    client, comm, span_id = channel
    comm.from_browser({"type": "paths", "spans": [span_id, "no-such-span"]})
    (answer,) = answers(comm, "paths")
    assert answer["paths"]["no-such-span"] is None
    length = answer["paths"][span_id]
    assert length["length"] == pytest.approx(client.critical_path(span=span_id).length)
    assert length["wall"] > 0


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"type": "explain", "span": "no-such-span"}, "span='no-such-span': no span has this id"),
        ({"type": "explain", "span": 3}, "'span' must be a span's id"),
        ({"type": "explain"}, "'span' must be a span's id"),
        ({"type": "explain", "span": "x" * 1000}, "a string of 1 to 200 characters"),
        ({"type": "paths", "spans": "abc"}, "'spans' must be a list of at most 200 span ids"),
        ({"type": "paths", "spans": [1, 2]}, "'spans' must be a list"),
        ({"type": "paths", "spans": ["a"] * 201}, "at most 200"),
    ],
)
def test_a_bad_request_gets_an_error_back_and_the_channel_goes_on(channel, message, says):
    _client, comm, span_id = channel
    comm.from_browser(message)
    (answer,) = answers(comm, message["type"])
    assert says in answer["error"]
    # the kernel keeps answering
    comm.from_browser({"type": "explain", "span": span_id})
    n = 2 if message["type"] == "explain" else 1
    assert "error" not in answers(comm, "explain", n)[-1]


def test_no_cluster_says_so():
    answer = explain.answer(None, explain.check_explain({"type": "explain", "span": "abc"}))
    assert answer == {
        "type": "explain",
        "span": "abc",
        "error": "No cluster in this kernel: nothing to explain.",
    }


def test_the_dashboard_widget_answers_on_its_own_comm(restore_default_source, monkeypatch):
    pytest.importorskip("anywidget")
    from kernel_cluster.jupyter.widgets import Dashboard

    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        with span("etl") as span_id:
            client.gather(client.map(link, [0.001] * 10))
        w = Dashboard(client, autostart=False)
        sent: list = []
        monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append(content))
        w._on_browser_message(w, {"type": "explain", "span": span_id}, [])
        w._on_browser_message(w, {"type": "explain", "span": ["a list"]}, [])
        w._on_browser_message(w, {"type": "paths", "spans": [span_id]}, [])
        wait_for(lambda: len(sent) == 3, 30, "three answers")
        w.close()
    by_kind = {(m["type"], "error" in m): m for m in sent}  # the bad one came back first
    good, bad, paths = (
        by_kind[k] for k in [("explain", False), ("explain", True), ("paths", False)]
    )
    assert good["span"] == span_id and good["path"]["ntasks"] >= 1
    assert "'span' must be a span's id" in bad["error"]
    assert paths["paths"][span_id]["length"] > 0


def test_path_lengths_of_many_spans_from_one_read_then_kept(restore_default_source, monkeypatch):
    """A reload asks for every finished span's length at once: all come back (no cap
    of a few per request, the others blank), from one read of the task stream, each
    as client.critical_path walks it alone; asked again, nothing is read."""
    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        ids = []
        for i in range(12):
            with span(f"step-{i}") as span_id:
                graph = {"a": (link, 0.001), "b": (link, 0.002, "a")}
                client.get(graph, ["b"])
            ids.append(span_id)
        h = lab.Hub()
        comm = RecordingComm()
        try:
            h.opened(comm)
            source = h.source
            reads = []
            read = source.task_stream
            monkeypatch.setattr(
                source, "task_stream", lambda *a, **k: reads.append(1) or read(*a, **k)
            )
            comm.from_browser({"type": "paths", "spans": ids})
            (first,) = answers(comm, "paths")
            assert len(reads) == 1
            for span_id in ids:
                expected = client.critical_path(span=span_id).length
                assert first["paths"][span_id]["length"] == pytest.approx(expected)
            reads.clear()
            comm.from_browser({"type": "paths", "spans": ids})
            _, second = answers(comm, "paths", 2)
            assert reads == [] and second == first
        finally:
            h.close()
