"""The JupyterLab panels' kernel side (kernel_cluster/jupyter/lab.py): a real
cluster, and comms of the ``comm`` package whose transport records what would go
to the browser (and hands the browser's messages in as Jupyter would)."""

from __future__ import annotations

from typing import Any

import pytest
from comm.base_comm import BaseComm

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.attach import set_default_source
from kernel_cluster.diagnostics.feeds.tables import MetricsReader
from kernel_cluster.jupyter import lab
from tests.engine.helpers import wait_for


class RecordingComm(BaseComm):
    """A comm whose messages land in ``sent`` instead of on a kernel's iopub."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], list[bytes]]] = []
        super().__init__(target_name=lab.TARGET, primary=False)

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:  # type: ignore[override]
        self.sent.append((msg_type, data or {}, list(buffers or [])))

    def from_browser(self, data: Any) -> None:
        self.handle_msg({"content": {"data": data, "comm_id": self.comm_id}})

    def messages(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            d
            for t, d, _ in self.sent
            if t == "comm_msg" and (kind is None or d.get("type") == kind)
        ]

    def updates(self) -> list[tuple[dict[str, Any], list[bytes]]]:
        return [(d, b) for t, d, b in self.sent if t == "comm_msg" and d.get("type") == "update"]


def inc(x: int) -> int:
    return x + 1


@pytest.fixture
def hub(restore_default_source):
    h = lab.Hub()
    yield h
    h.close()


def feeds_in(update: dict[str, Any]) -> dict[str, bool]:
    """feed name -> whether its part is full."""
    return {p["feed"]: p["full"] for p in update["parts"]}


def test_a_new_channel_gets_hello_status_memory_and_everything(restore_default_source):
    with KernelCluster(n_workers=2, threads_per_worker=2) as cluster, Client(cluster) as client:
        with span("etl"):
            client.gather(client.map(inc, range(20)))
        h = lab.Hub()
        try:
            comm = RecordingComm()
            h.opened(comm)
            kinds = [d["type"] for d in comm.messages()]
            assert kinds[:3] == ["hello", "status", "memory"]
            status = comm.messages("status")[0]
            summary = status["cluster"]
            assert summary["kind"] == "embedded"
            assert (summary["workers"], summary["threads"]) == (2, 4)
            assert summary["tasks"]["done"] == 20
            assert status["memory"][1] > 0  # process memory, in bytes
            (update, buffers), *_ = comm.updates()
            assert feeds_in(update) == {"metrics": True, "spans": True, "progress": True}
            reader = MetricsReader()
            part = update["parts"][0]
            reader.apply(part, buffers[: part["nbuffers"]])
            assert any(k[2] == "inc" for k in reader.as_dict())
        finally:
            h.close()


def test_subscribing_adds_the_task_stream_and_the_profile(restore_default_source):
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        client.gather(client.map(inc, range(10)))
        h = lab.Hub()
        try:
            comm = RecordingComm()
            h.opened(comm)
            comm.sent.clear()
            comm.from_browser({"type": "subscribe", "feeds": ["tasks", "profile"]})
            full = {}
            for update, _ in comm.updates():
                full.update(feeds_in(update))
            assert full == {
                "metrics": True,
                "spans": True,
                "progress": True,
                "tasks": True,
                "profile": True,
            }
            comm.sent.clear()
            comm.from_browser({"type": "profile", "prefix": "inc", "start": None, "stop": None})
            (update, _), *_ = comm.updates()
            (part,) = update["parts"]
            assert part["feed"] == "profile" and part["selection"]["prefix"] == "inc"
        finally:
            h.close()


def test_the_hub_thread_pushes_new_work_without_being_asked(restore_default_source):
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        h = lab.Hub()
        try:
            comm = RecordingComm()
            h.opened(comm)
            seen = len(comm.updates())
            client.gather(client.map(inc, range(50)))

            def fifty_done() -> bool:
                return any(
                    d["cluster"] and d["cluster"]["tasks"]["done"] == 50
                    for d in comm.messages("status")
                )

            wait_for(fifty_done, timeout=10, what="a status with 50 tasks done")
            wait_for(lambda: len(comm.updates()) > seen, timeout=10, what="a pushed update")
            assert not comm.updates()[-1][0]["parts"][0]["full"]  # a delta, not everything again
        finally:
            h.close()


def test_a_panel_opened_before_the_cluster_follows_it_when_it_starts(hub):
    set_default_source(None)
    comm = RecordingComm()
    hub.opened(comm)
    assert comm.messages("status")[-1]["cluster"] is None
    assert not comm.updates()
    with KernelCluster(n_workers=1, threads_per_worker=1) as cluster:
        client = Client(cluster)  # becomes the default source: the hub rebinds
        status = comm.messages("status")[-1]
        assert status["cluster"] is not None and status["cluster"]["workers"] == 1
        assert feeds_in(comm.updates()[-1][0]) == {"metrics": True, "spans": True, "progress": True}
        client.close()
        assert comm.messages("status")[-1]["cluster"] is None


def test_a_closed_comm_is_forgotten(hub):
    comm = RecordingComm()
    channel = hub.opened(comm)
    comm.handle_close({"content": {"data": {}, "comm_id": comm.comm_id}})
    assert channel not in hub.channels


@pytest.mark.parametrize(
    "message",
    [
        None,
        "refresh",
        {"type": "exec", "code": "import os"},
        {"type": "subscribe", "feeds": ["pickle"]},
        {"type": "subscribe", "feeds": "tasks"},
        {"type": "profile", "prefix": 3},
        {"type": "profile", "prefix": "", "start": float("nan")},
        {"type": "profile", "prefix": "", "start": True},
    ],
)
def test_browser_messages_are_checked(message):
    with pytest.raises(ValueError):
        lab.check_message(message)


def test_a_bad_message_is_dropped_and_the_channel_goes_on(hub, caplog):
    comm = RecordingComm()
    hub.opened(comm)
    comm.sent.clear()
    comm.from_browser({"type": "exec", "code": "import os"})
    assert not comm.sent
    assert "Ignoring a message from the browser" in caplog.text
    comm.from_browser({"type": "refresh"})
    assert comm.messages()[0]["type"] == "hello"


def test_a_window_brushed_backwards_is_turned_round():
    msg = lab.check_message({"type": "profile", "prefix": "inc", "start": 5, "stop": 2})
    assert (msg["start"], msg["stop"]) == (2.0, 5.0)


def test_show_names_what_is_wrong():
    with pytest.raises(ValueError, match="Unknown view 'nope'"):
        lab.show("nope")
    with pytest.raises(ValueError, match="Unknown mode"):
        lab.show("fine-metrics", mode="floating")
    with pytest.raises(RuntimeError, match="needs a notebook in JupyterLab"):
        lab.show("flame-graph")  # outside a kernel


def test_show_asks_every_browser_for_the_panel(hub):
    comm = RecordingComm()
    hub.opened(comm)
    hub.show("task-stream", "split-bottom")
    assert comm.messages("show") == [
        {"type": "show", "kind": "task-stream", "mode": "split-bottom"}
    ]


def test_status_is_sent_only_when_it_changed(hub):
    comm = RecordingComm()
    channel = hub.opened(comm)
    before = len(comm.messages("status"))
    hub.send_status(channel)
    assert len(comm.messages("status")) == before


def test_the_extension_and_the_python_package_agree_on_the_version():
    import json
    import pathlib

    import kernel_cluster

    root = pathlib.Path(__file__).resolve().parents[2]
    for package in ("labextension/package.json", "widgets/package.json"):
        version = json.loads((root / package).read_text())["version"]
        assert version == kernel_cluster.__version__, package
