"""The shells carry out every instruction their state machine returns, and raise on
one they do not know (after carrying out the others), instead of dropping it."""

from __future__ import annotations

import dataclasses

import pytest

from kernel_cluster.core.scheduler_messages import ClientAdded, ReportKey
from kernel_cluster.core.worker_messages import PauseChanged, SendReplicasAdded
from kernel_cluster.engine.cluster import KernelCluster
from kernel_cluster.engine.scheduler import Scheduler

from .helpers import assert_nothing_left, on_loop, running_now


@dataclasses.dataclass(slots=True)
class ShoutAtTheMoon:
    """An instruction no shell knows."""

    stimulus_id: str = "moon"


class NoData:
    async def get_data(self, peer: str, keys: list) -> tuple[dict, dict]:
        raise AssertionError("not read in these tests")

    async def run(self, peer: str, fn: object) -> object:
        raise AssertionError("not run in these tests")


def test_the_scheduler_shell_raises_on_an_unknown_instruction():
    scheduler = Scheduler(data_source=NoData())
    reports: list = []
    scheduler.add_client("c", lambda batch, seq: reports.extend(batch))
    report = ReportKey("c", "x", "finished", stimulus_id="s1")
    scheduler.state.handle_stimulus = lambda *events: [ShoutAtTheMoon(), report]
    with pytest.raises(TypeError, match="does not know the instruction ShoutAtTheMoon"):
        scheduler.handle(ClientAdded("d", "s1"))
    assert reports == [report]  # the instruction it knows went out all the same


class Recorder:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msgs: list) -> None:
        self.sent.extend(msgs)


def test_the_worker_shell_raises_on_an_unknown_instruction():
    before = running_now()
    cluster = KernelCluster(n_workers=1, threads_per_worker=1)
    try:
        (worker,) = cluster.workers.values()
        replicas = SendReplicasAdded([], {}, "s1")

        def handle_an_unknown_instruction() -> list:
            real_state, real_channel = worker.state.handle_stimulus, worker.scheduler
            worker.state.handle_stimulus = lambda *events: [ShoutAtTheMoon(), replicas]
            worker.scheduler = recorder = Recorder()
            try:
                with pytest.raises(TypeError, match="does not know the instruction Shout"):
                    worker.handle(PauseChanged(False, "s1"))
            finally:
                worker.state.handle_stimulus, worker.scheduler = real_state, real_channel
            return recorder.sent

        assert on_loop(cluster, handle_an_unknown_instruction) == [replicas]
    finally:
        cluster.close()
    assert_nothing_left(before)
