"""The views on a Dask cluster started from the command line: ``dask scheduler`` and two
``dask worker`` processes on 127.0.0.1, from this environment's bin directory.

A worker killed mid-run: the work ends on the other one and the views keep
updating. The scheduler killed: every read fails within its timeout with one
clear error, widgets stop with one log line, the JupyterLab panels' status says
so; nothing hangs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytest.importorskip("anywidget")

from distributed import Client as DaskClient
from distributed import wait as dask_wait

from kernel_cluster import MemorySampler, span
from kernel_cluster.diagnostics import attach as source_module
from kernel_cluster.diagnostics.attach import attach, source_of
from kernel_cluster.diagnostics.sources.dask_source import SchedulerUnreachable
from kernel_cluster.jupyter import lab
from kernel_cluster.jupyter.widgets import FineMetrics, TaskStream
from tests.engine.helpers import wait_for
from tests.views.test_publisher import Browser

DASK = Path(sys.executable).parent / "dask"
START_TIMEOUT = 40  # seconds for the scheduler and workers to come up (a busy machine)


def slow(x: int) -> int:
    time.sleep(0.3)
    return x


class CliCluster:
    """A scheduler and workers as command-line processes, each in its own session so
    that ``stop`` reaches whatever they start; ``stop`` always ends them all."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.address = ""

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [str(DASK), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            # the scheduler unpickles task graphs: it must import this module's functions
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            start_new_session=True,
        )
        log.close()  # the child holds its own copy
        self.procs[name] = proc
        return proc

    def start(self, n_workers: int = 2) -> None:
        scheduler_file = self.directory / "scheduler.json"
        self._start(
            "scheduler",
            "scheduler",
            "--host", "127.0.0.1",
            "--port", "0",
            "--no-dashboard",
            "--scheduler-file", str(scheduler_file),
        )  # fmt: skip

        def address() -> str:
            try:
                return str(json.loads(scheduler_file.read_text())["address"])
            except (OSError, ValueError, KeyError):
                return ""

        wait_for(address, START_TIMEOUT, "the scheduler's address file")
        self.address = address()
        for i in range(n_workers):
            self._start(
                f"worker-{i}",
                "worker",
                self.address,
                "--no-nanny",
                "--nthreads", "2",
                "--name", f"worker-{i}",
                "--host", "127.0.0.1",
                "--no-dashboard",
                "--local-directory", str(self.directory / f"worker-{i}"),
                "--death-timeout", "10",  # a worker whose scheduler is gone ends
            )  # fmt: skip

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[tuple[CliCluster, DaskClient]]:
    previous = source_module._default_source
    cluster = CliCluster(tmp_path)
    client = None
    try:
        cluster.start()
        client = DaskClient(cluster.address, timeout=START_TIMEOUT)
        client.wait_for_workers(2, timeout=START_TIMEOUT)
        yield cluster, client
    finally:
        source_module.set_default_source(previous)
        if client is not None:
            client.close(timeout=5)
        cluster.stop()


def capture(widget) -> Browser:
    browser = Browser()
    widget.publisher._send = browser
    return browser


def worker_address(client: DaskClient, name: str) -> str:
    (address,) = [a for a, w in client.scheduler_info()["workers"].items() if w["name"] == name]
    return address


def test_views_keep_working_when_a_worker_is_killed_mid_run(cli) -> None:
    cluster, client = cli
    source = source_of(client)
    assert source.kind == "processes"
    victim = worker_address(client, "worker-1")
    metrics = FineMetrics(client, interval=0.25)
    stream = TaskStream(client, interval=0.25)
    seen_metrics, seen_stream = capture(metrics), capture(stream)
    try:
        with span("survivor") as span_id:
            futures = client.map(slow, range(16))
            wait_for(lambda: source.info().workers[victim].processing > 0, 20, "work on the victim")
            cluster.kill("worker-1")
            _, not_done = dask_wait(futures, timeout=60)
        assert not not_done and client.gather(futures) == list(range(16))
        wait_for(lambda: len(source.info().workers) == 1, 20, "the scheduler to drop the worker")
        key = ("execute", span_id, "slow", "tasks", "count")
        # every task ran (some twice: those running on the killed worker)
        wait_for(lambda: seen_metrics.metrics.as_dict().get(key, 0) >= 16, 20, "the counts")
        wait_for(lambda: len(seen_stream.tasks.keys) >= 16, 20, "the task stream")
        assert metrics.updating and stream.updating
        (survivor,) = source.info().workers
        assert set(source.profiles()) <= {survivor}
        assert set(source.transfer_logs()) == {survivor}
        assert source.memory().process_bytes > 0
        spans = {s.id: s for s in source.spans(refresh=False)}
        assert spans[span_id].done and spans[span_id].states["memory"] == 16
    finally:
        metrics.close()
        stream.close()


def test_views_say_once_that_the_scheduler_is_gone(cli, caplog) -> None:
    cluster, client = cli
    caplog.set_level(logging.INFO, logger="kernel_cluster")
    source = attach(client)
    hub = lab.Hub()  # what the JupyterLab panels read, following the default source
    widget = FineMetrics(client, interval=0.25)
    try:
        assert hub.source is source and widget.updating
        client.gather(client.map(slow, range(4)))
        cluster.kill("scheduler")
        wait_for(lambda: not widget.updating, 20, "the widget to stop")
        for read in (source.progress, source.fine_metrics, source.info, source.memory):
            t0 = time.monotonic()
            with pytest.raises(SchedulerUnreachable, match="scheduler at"):
                read()
            assert time.monotonic() - t0 < source.timeout + 2  # bounded: no hung kernel
        with pytest.raises(SchedulerUnreachable), MemorySampler().sample(client=client):
            pass
        hub._last_status_at = float("-inf")
        hub._refresh_status()
        assert hub.status["cluster"] is None and "scheduler at" in hub.status["error"]
    finally:
        widget.close()
        hub.close()
    ours = [r for r in caplog.records if r.name.startswith("kernel_cluster")]
    assert not [r for r in ours if r.levelno >= logging.WARNING or r.exc_info]
    stopped = [r for r in ours if "updates stopped" in r.getMessage()]
    assert len(stopped) == 1 and "scheduler at" in stopped[0].getMessage()
