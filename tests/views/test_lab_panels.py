"""Issue 28, kernel side: the sidebar's cluster controls (started, scaled and stopped
in the kernel, through the panels' comm), the worker table's rows, what the sidebar
says of an attached cluster, channels whose page is gone, and the comm's messages
kept on the subshell the browser chose."""

from __future__ import annotations

from typing import Any

import pytest

from kernel_cluster import Client, KernelCluster, get_client
from kernel_cluster.client.lab_controls import LabControls
from kernel_cluster.diagnostics.attach import set_default_source
from kernel_cluster.jupyter import lab
from tests.engine.helpers import wait_for
from tests.views.test_lab import RecordingComm as _RecordingComm
from tests.views.test_lab import inc


class RecordingComm(_RecordingComm):
    """A recording comm whose 'browser' may send on a kernel subshell."""

    def from_browser(self, data: Any, subshell: str | None = None) -> None:
        header = {"msg_type": "comm_msg", "subshell_id": subshell}
        self.handle_msg({"header": header, "content": {"data": data, "comm_id": self.comm_id}})


@pytest.fixture
def controlled_hub(restore_default_source):
    set_default_source(None)
    h = lab.Hub(LabControls())
    yield h
    h.close()
    try:
        client = get_client()
    except ValueError:
        return
    cluster = client.cluster
    client.close()
    cluster.close()


def start(memory_limit: str = "", n_workers: int = 1, threads: int = 1) -> dict[str, Any]:
    return {
        "type": "start",
        "processes": False,
        "n_workers": n_workers,
        "threads_per_worker": threads,
        "memory_limit": memory_limit,
    }


def control(comm: RecordingComm, request: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """Send a control from the 'browser' and wait for the kernel's answer."""
    before = len(comm.messages("control"))
    comm.from_browser(request)
    wait_for(lambda: len(comm.messages("control")) > before, timeout=timeout, what="an answer")
    return comm.messages("control")[-1]


@pytest.mark.parametrize(
    "message",
    [
        {**start(), "n_workers": 10**400},
        {**start(), "threads_per_worker": 0},
        {**start(), "processes": "yes"},
        {**start(), "n_workers": 2.5},
        {**start(), "n_workers": True},
        {**start(), "memory_limit": 4},
        {**start(), "memory_limit": "x" * 100},
        {"type": "scale", "n_workers": -1},
        {"type": "scale", "n_workers": 10**9},
        {"type": "scale"},
    ],
)
def test_controls_from_the_browser_are_checked(message):
    with pytest.raises(ValueError) as info:
        lab.check_message(message)
    assert "must be" in str(info.value)


def test_the_sidebar_starts_scales_and_stops_the_kernels_cluster(controlled_hub):
    comm = RecordingComm()
    controlled_hub.opened(comm)
    assert comm.messages("status")[-1]["cluster"] is None
    answer = control(comm, start("1 GiB", threads=2))
    assert answer["ok"], answer
    client = get_client()  # the kernel's default client is the sidebar's
    assert client.cluster.n_workers == 1
    status = comm.messages("status")[-1]
    assert status["cluster"]["workers"] == 1
    assert status["cluster"]["controls"] == {"scale": True, "stop": True}
    assert "get_client()" in status["cluster"]["client_code"]
    assert status["cluster"]["memory_limit"] == 2**30

    # a second start is refused, and says why
    again = control(comm, start())
    assert not again["ok"] and "has a cluster already" in again["message"]

    assert control(comm, {"type": "scale", "n_workers": 2})["ok"]
    assert client.cluster.n_workers == 2
    wait_for(
        lambda: comm.messages("status")[-1]["cluster"]["workers"] == 2, timeout=10, what="2 workers"
    )

    assert control(comm, {"type": "stop"})["ok"]
    assert client.status == "closed" and client.cluster.status == "closed"
    wait_for(lambda: comm.messages("status")[-1]["cluster"] is None, timeout=10, what="no cluster")
    with pytest.raises(ValueError):
        get_client()


def test_a_bad_memory_limit_is_told_to_the_user_and_nothing_starts(controlled_hub):
    comm = RecordingComm()
    controlled_hub.opened(comm)
    answer = control(comm, start("lots"))
    assert not answer["ok"]
    assert "lots" in answer["message"]
    with pytest.raises(ValueError):
        get_client()


def test_without_controls_the_kernel_says_it_cannot(restore_default_source):
    h = lab.Hub()
    try:
        comm = RecordingComm()
        h.opened(comm)
        answer = control(comm, {"type": "stop"})
        assert not answer["ok"] and "cannot" in answer["message"]
    finally:
        h.close()


def test_the_sidebar_controls_only_the_cluster_of_the_kernels_default_client(controlled_hub):
    with KernelCluster(n_workers=1, threads_per_worker=1) as cluster:
        comm = RecordingComm()
        controlled_hub.opened(comm)
        other = Client(cluster, set_as_default=False)
        try:
            # the views show no cluster (no default client), so nothing to control
            assert controlled_hub.controls.abilities(other.diagnostics)["stop"] is False
        finally:
            other.close()


def test_the_worker_table_rows_come_with_the_status_of_who_asks(restore_default_source):
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, memory_limit="1 GiB") as cluster,
        Client(cluster) as client,
    ):
        client.gather(client.map(inc, range(10)))
        h = lab.Hub()
        try:
            table, other = RecordingComm(), RecordingComm()
            h.opened(table)
            h.opened(other)
            table.from_browser({"type": "subscribe", "feeds": ["workers"]})
            wait_for(lambda: "workers" in table.messages("status")[-1], timeout=10, what="rows")
            rows = table.messages("status")[-1]["workers"]
            assert len(rows) == 2
            row = rows[0]
            assert row["memory_limit"] == 2**30 and row["nthreads"] == 1
            assert row["paused"] is False and row["executing"] >= 0 and row["ready"] >= 0
            assert row["memory"] > 0 and row["cpu"] is not None
            assert all("workers" not in m for m in other.messages("status"))
            summary = table.messages("status")[-1]["cluster"]
            assert summary["engine"] == "kernel-cluster" and summary["address"] is None
        finally:
            h.close()


def test_a_channel_whose_page_went_silent_is_closed(restore_default_source):
    set_default_source(None)
    h = lab.Hub()
    try:
        old, live, gone = RecordingComm(), RecordingComm(), RecordingComm()
        channels = [h.opened(c) for c in (old, live, gone)]
        for comm in (old, live, gone):
            comm.from_browser({"type": "ping"}, subshell="sub")
        channels[0].last_heard -= lab.STALE_SECONDS + 1  # its page stopped pinging
        channels[2].last_heard -= lab.STALE_SECONDS - 1  # not long enough yet
        h._close_stale()
        assert channels[0] not in h.channels and channels[0].closed
        assert channels[1] in h.channels and channels[2] in h.channels
        assert old.sent[-1][0] == "comm_close"
        # a page reloaded before its first ping: its comm's opening was the last word
        never = RecordingComm()
        quiet = h.opened(never)
        quiet.last_heard -= lab.STALE_SECONDS + 1
        h._close_stale()
        assert quiet not in h.channels
    finally:
        h.close()


def test_on_the_main_shell_silence_counts_only_while_other_pages_were_heard(restore_default_source):
    set_default_source(None)
    h = lab.Hub()
    try:
        a, b = RecordingComm(), RecordingComm()
        ca, cb = h.opened(a), h.opened(b)
        for comm in (a, b):
            comm.from_browser({"type": "ping"})  # no subshell: they queue behind cells
        # a long cell: nobody was heard for a while, nobody is stale
        ca.last_heard -= 100
        cb.last_heard -= 100
        h._close_stale()
        assert ca in h.channels and cb in h.channels
        # the cell ended, b's pings arrived, a's did not: a's page is gone
        b.from_browser({"type": "ping"})
        h._close_stale()
        assert ca not in h.channels and cb in h.channels
    finally:
        h.close()


def test_browser_messages_stay_on_the_subshell_the_browser_chose():
    """ipykernel 7 would send them to the subshell under which the kernel last sent on
    the comm: the main shell, behind a running cell, after ``announce`` from a cell."""
    from ipykernel.comm.comm import BaseComm as IpykernelComm

    class Recording(IpykernelComm):
        def publish_msg(self, *args: Any, **kwargs: Any) -> None:
            self._reply_subshell_id = None  # as when sent from a cell on the main shell

    comm = Recording(target_name=lab.TARGET, primary=False)
    comm.publish_msg("comm_msg", {"type": "status"})
    assert comm._reply_subshell_for({"type": "ping"}, "subshell-1") is None  # the trap
    h = lab.Hub()
    try:
        h.opened(comm)
        assert comm._reply_subshell_for({"type": "ping"}, "subshell-1") == "subshell-1"
    finally:
        h.close()


def test_an_absurd_number_is_refused_cleanly_and_the_channel_goes_on(controlled_hub, caplog):
    comm = RecordingComm()
    controlled_hub.opened(comm)
    comm.sent.clear()
    comm.from_browser({"type": "scale", "n_workers": 10**400})
    comm.from_browser({"type": "profile", "prefix": "", "start": 10**400, "stop": None})
    assert not comm.messages("control")
    assert "Ignoring a message from the browser" in caplog.text
    comm.from_browser({"type": "refresh"})
    assert comm.messages()[0]["type"] == "hello"
    assert controlled_hub.runner._busy is None  # no control ran
