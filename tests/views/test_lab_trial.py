"""What the user trial of the JupyterLab panels found on the kernel's side: the
Compare panel's runs never refreshed, and Progress said "No tasks yet" once the
results of the work were released. A real cluster; comms recording what would go
to the browser (``test_lab.RecordingComm``)."""

from __future__ import annotations

import time

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.history import compare as comparing
from kernel_cluster.jupyter import lab
from tests.engine.helpers import wait_for
from tests.views.test_lab import RecordingComm, inc


def dec(x: int) -> int:
    return x - 1


def test_an_open_compare_panel_is_offered_runs_recorded_after_it_opened(
    restore_default_source,
    monkeypatch,
):
    # a pair compared earlier in this process, on a cluster since closed: it is not
    # the default any more (the whole suite's order made this test fail so)
    monkeypatch.setattr(comparing, "last_pair", ("span-of-a-closed-cluster", "another"))
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        h = lab.Hub()
        try:
            comm = RecordingComm()
            h.opened(comm)
            comm.from_browser({"type": "subscribe", "feeds": ["compare"]})
            comm.from_browser({"type": "compare", "a": None, "b": None})
            (first,) = comm.messages("compare")
            assert first["runs"] == [] and first["data"] is None  # nothing to compare yet
            for _ in range(2):
                with span("etl"):
                    client.gather(client.map(inc, range(8), pure=False))

            def two_runs() -> bool:
                return any(len(m["runs"]) == 2 for m in comm.messages("compare"))

            wait_for(two_runs, timeout=10, what="the two runs of etl offered to the panel")
            latest = comm.messages("compare")[-1]
            assert all("etl" in r["label"] for r in latest["runs"])
            # two runs and nothing compared before: the latest two, compared
            assert latest["data"] is not None and latest["b"] == latest["runs"][0]["ref"], latest
            with span("load"):  # a third run: its menus get it, the comparison stays
                client.gather(client.map(inc, range(4), pure=False))
            wait_for(
                lambda: len(comm.messages("compare")[-1]["runs"]) == 3,
                timeout=10,
                what="the third run offered",
            )
            assert set(comm.messages("compare")[-1]) == {"type", "runs"}
            sent = len(comm.messages("compare"))
            time.sleep(2 * lab.RUNS_INTERVAL + lab.INTERVAL)  # no new run: nothing sent
            assert len(comm.messages("compare")) == sent
        finally:
            h.close()


def test_progress_shows_the_last_work_once_its_results_are_released(
    restore_default_source,
):
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        source = client.diagnostics
        assert client.gather(client.map(inc, range(20))) == list(range(1, 21))
        # the futures are gone: every task forgotten; progress still shows the work
        wait_for(
            lambda: source.progress().get("inc", {}).get("forgotten") == 20,
            timeout=10,
            what="inc's 20 tasks shown done after they were forgotten",
        )
        # a lab channel opened now gets them too (a page opened after the work)
        h = lab.Hub()
        try:
            comm = RecordingComm()
            h.opened(comm)
            (update, _), *_ = comm.updates()
            (part,) = [p for p in update["parts"] if p["feed"] == "progress"]
            assert part["records"]["inc"] == {"forgotten": 20}
        finally:
            h.close()
        # new work on the idle cluster: it is the last work now, inc's bars go
        assert client.gather(client.map(dec, range(5))) == list(range(-1, 4))
        wait_for(
            lambda: source.progress().get("dec", {}).get("forgotten") == 5,
            timeout=10,
            what="dec's tasks shown",
        )
        assert sum(source.progress().get("inc", {}).values()) == 0
