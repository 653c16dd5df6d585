"""The Compare widget and the kernel's side of the JupyterLab Compare panel, on a real
cluster with a history file (the front-end's own tests are in widgets/test/)."""

from __future__ import annotations

import time

import pytest

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.attach import default_source, set_default_source
from kernel_cluster.diagnostics.history import compare as comparing
from kernel_cluster.jupyter import lab
from kernel_cluster.jupyter.compare import Compare
from tests.views.test_lab import RecordingComm


def work(x: int, slow: float = 0.0) -> int:
    time.sleep(slow)
    return x


@pytest.fixture
def two_runs(history_file, monkeypatch):
    """Two runs of "etl", the second slower; the cluster's client is the default."""
    monkeypatch.setattr(comparing, "last_pair", None)
    try:
        before = default_source()
    except ValueError:
        before = None
    cluster = KernelCluster(n_workers=1, threads_per_worker=1)
    client = Client(cluster)
    ids = []
    for slow in (0.0, 0.03):
        with span("etl") as span_id:
            client.gather(client.map(work, range(4), slow=slow, pure=False))
        ids.append(span_id)
    try:
        yield ids
    finally:
        client.close()
        cluster.close()
        set_default_source(before)


def test_the_widget_holds_the_comparison_and_the_runs_to_choose(two_runs):
    first, second = two_runs
    w = Compare("etl@-1", "etl")
    assert w.kind == "compare" and w.error == ""
    assert (w.data["a"]["id"], w.data["b"]["id"]) == (first, second)
    assert w.data["verdict"].startswith("wall +") and "`work` thread-noncpu" in w.data["verdict"]
    rows = {(r[0], r[1], r[2]): r for r in w.data["rows"]}
    assert rows[("work", "thread-noncpu", "seconds")][4] > 0.1
    refs = [r["ref"] for r in w.runs]
    assert refs[:2] == [second, first] and all("(live)" in r["label"] for r in w.runs[:2])
    table = w.table()
    assert table.iloc[0].function == "work"
    w.b = "no-such-run"  # the view's choice, or Python's: compared again
    assert w.data is None and "No run 'no-such-run'" in w.error
    w.b = second
    assert w.error == "" and w.data["b"]["id"] == second
    assert Compare().data["a"]["id"] == first  # nothing chosen: the last pair compared


def test_the_lab_panel_asks_and_gets_the_comparison(two_runs):
    first, second = two_runs
    hub = lab.Hub()
    try:
        comm = RecordingComm()
        hub.opened(comm)
        comm.sent.clear()
        comm.from_browser({"type": "compare", "a": None, "b": None})
        (answer,) = comm.messages("compare")
        # nothing compared in this kernel yet: the two latest runs
        assert (answer["a"], answer["b"]) == (first, second)
        assert answer["data"]["verdict"].startswith("wall +") and answer["error"] == ""
        comm.from_browser({"type": "compare", "a": second, "b": "nope@-1"})
        last = comm.messages("compare")[-1]
        assert last["data"] is None and "Cannot compare" in last["error"]
    finally:
        hub.close()


@pytest.mark.parametrize(
    "message",
    [{"type": "compare", "a": 3, "b": None}, {"type": "compare", "a": "x" * 5000, "b": "y"}],
)
def test_compare_messages_are_checked(message):
    with pytest.raises(ValueError):
        lab.check_message(message)
    assert lab.check_message({"type": "compare", "a": "", "b": "etl@-1"}) == {
        "type": "compare",
        "a": None,
        "b": "etl@-1",
    }


def test_a_performance_report_compares_its_block_with_a_stored_run(two_runs, tmp_path):
    from kernel_cluster import performance_report
    from kernel_cluster.client.client import get_client
    from tests.views.test_report import report_data

    first, _ = two_runs
    client = default_source()
    path = tmp_path / "report.html"
    with performance_report(filename=path, client=client, compare_to=first), span("etl"):
        from kernel_cluster.client.client import get_client

        c = get_client()
        c.gather(c.map(work, range(4), slow=0.06, pure=False))
    html = path.read_text()
    data = report_data(html)
    compared = data["sections"]["compare"]
    assert (
        compared["a"]["id"] == first
        and compared["b"]["name"] == "kernel-cluster performance report"
    )
    rows = {(r[0], r[1], r[2]): r for r in compared["rows"]}
    a, b = rows[("work", "thread-noncpu", "seconds")][3:5]
    assert b - a > 0.2 and compared["verdict"].startswith("wall +")
    assert "`work` thread-noncpu" in compared["verdict"]
    assert "<script src" not in html  # still one self-contained file


def test_a_report_compared_with_nothing_fails_before_its_block(two_runs, tmp_path):
    from kernel_cluster import performance_report

    ran = []
    report = performance_report(filename=tmp_path / "r.html", compare_to="no-such-run@-1")
    with pytest.raises(KeyError, match="no-such-run"), report:
        ran.append(True)
    assert not ran and not (tmp_path / "r.html").exists()
