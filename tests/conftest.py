"""Fixtures for end-to-end tests: a real cluster and a client attached to it.

Every engine test that takes ``cluster`` (or ``processes``) runs twice: against
embedded workers and against worker subprocesses. Nothing here is autouse: the
synchronous core tests start no engine.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from kernel_cluster.client.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine import helpers
from tests.engine.helpers import (
    ErrorRecords,
    FileEvent,
    assert_nothing_left,
    check_engine_state,
    is_idle,
    on_loop,
    record_worker_errors,
    running_now,
    wait_for,
    worker_errors,
)

# the run history stays off in tests (and in the kernels and processes they start), so
# that no test writes to the user's history; tests/history/ turns it on, in a temporary file
os.environ["KERNEL_CLUSTER_HISTORY"] = "off"

# property tests check behaviour, not speed: a busy machine must not fail them (each
# test still has pytest's per-test timeout)
settings.register_profile("kernel-cluster", deadline=None)
settings.load_profile("kernel-cluster")


@pytest.fixture(params=[False, True], ids=["embedded", "processes"])
def processes(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Whether the test's cluster runs its workers in subprocesses.

    There, functions of the test module (and of helpers) are pickled by value, as a
    notebook's are: the workers need not import ``tests`` (nor pytest).
    A test marked ``embedded_only("reason")`` is skipped in process mode.
    """
    if not request.param:
        yield False
        return
    marker = request.node.get_closest_marker("embedded_only")
    if marker is not None:
        pytest.skip(f"embedded only: {marker.args[0] if marker.args else ''}")
    with helpers.pickled_by_value(sys.modules[request.module.__name__]):
        yield True


class SharedProcessCluster:
    """One process cluster per test module, lent to one test at a time.

    Starting two worker processes costs about 0.2 s of CPU each, more than most
    tests take: the processes are kept from test to test. A cluster is lent only
    when the scheduler has no task, client or queue left, every worker is idle, and
    the workers are the processes it started with; after a test where that is not
    so (it failed, closed or scaled the cluster, a worker died) it is discarded.

    Each test also gets a scheduler that has learned nothing from the tests before
    it: task durations (which steer how deep workers' queues are) are forgotten.
    Diagnostics histories (spans, task stream, metrics) do carry over: a test that
    reads them should look at what changed, or run with --fresh-process-clusters.
    """

    def __init__(self) -> None:
        self.cluster: KernelCluster | None = None
        self.workers: dict[str, int] = {}

    def lend(self) -> KernelCluster:
        cluster = self.cluster
        if cluster is not None and cluster.worker_pids() != self.workers:
            # replaced between two tests: on a machine busy enough that the scheduler
            # heard no heartbeat for death_timeout. Not this test's business: start afresh
            self.discard()
            cluster = None
        if cluster is None or cluster.status != "running":
            cluster = self.cluster = KernelCluster(
                n_workers=2, threads_per_worker=2, processes=True
            )
            self.workers = cluster.worker_pids()
            record_worker_errors(cluster)
        assert cluster.worker_pids() == self.workers
        assert is_idle(cluster)
        on_loop(cluster, forget_task_statistics, cluster)
        return cluster

    def intact(self) -> bool:
        cluster = self.cluster
        return (
            cluster is not None
            and cluster.status == "running"
            and cluster.worker_pids() == self.workers
            and set(on_loop(cluster, lambda: set(cluster.scheduler.state.workers)))
            == set(self.workers)
        )

    def discard(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


def forget_task_statistics(cluster: KernelCluster) -> None:
    """An idle scheduler forgets its task prefixes, as a new one would not have them."""
    scheduler = cluster.scheduler
    state = scheduler.state
    assert not (state.tasks or state.clients or state.queued or state.unrunnable), "not idle"
    assert not state.task_groups and not scheduler.client_handlers
    state.task_prefixes.clear()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fresh-process-clusters",
        action="store_true",
        help="start a new process cluster for every test instead of one per module",
    )


@pytest.fixture(scope="module")
def shared_process_cluster() -> Iterator[SharedProcessCluster]:
    before = running_now()
    shared = SharedProcessCluster()
    try:
        yield shared
    finally:
        shared.discard()
    assert_nothing_left(before)


@pytest.fixture
def cluster(processes: bool, request: pytest.FixtureRequest) -> Iterator[KernelCluster]:
    """Two workers with two threads each, embedded or in subprocesses.

    At teardown (once every client is closed) the engine must validate, forget every
    task and free every value, and what the test started (threads, worker processes)
    must have ended. The engine must not have logged an error, in this process or in
    a worker's (handlers that fail are only logged).

    An embedded cluster is made for each test and closed after it; a process cluster
    is lent by the module's SharedProcessCluster (unless --fresh-process-clusters).
    """
    shared: SharedProcessCluster | None = None
    if processes and not request.config.getoption("--fresh-process-clusters"):
        shared = request.getfixturevalue("shared_process_cluster")
    errors = ErrorRecords()
    engine_logger = logging.getLogger("kernel_cluster")
    engine_logger.addHandler(errors)
    in_workers: dict[str, list[str]] = {}
    intact = False
    try:
        if shared is not None:
            cluster = shared.lend()
            before = running_now()
        else:
            before = running_now()
            cluster = KernelCluster(n_workers=2, threads_per_worker=2, processes=processes)
            if processes:
                record_worker_errors(cluster)
        try:
            yield cluster
            if cluster.status == "running":
                check_engine_state(cluster)
                wait_for(lambda: is_idle(cluster), what="the engine to forget every task")
                check_engine_state(cluster)
                if processes:
                    in_workers = worker_errors(cluster, clear=True)
                if shared is not None:
                    intact = shared.intact()
        finally:
            if shared is None:
                cluster.close()
            elif not intact:
                shared.discard()
    finally:
        engine_logger.removeHandler(errors)
    assert not errors.records, errors.texts()
    assert not in_workers, in_workers
    if shared is not None and intact:
        # the loop's default executor (it resolves addresses to connect to) keeps its
        # threads until the cluster closes: the module's teardown sees them end
        threads = {t for t in threading.enumerate() if t.name.startswith("asyncio_")}
        before = (before[0] | threads, before[1])
    assert_nothing_left(before)


@pytest.fixture
def client(cluster: KernelCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        yield c
        if cluster.status == "running":
            check_engine_state(cluster)


@pytest.fixture
def new_event(cluster: KernelCluster, tmp_path: Path) -> Iterator[Callable[[], FileEvent]]:
    """Make events that tasks block on, in any process; all are set before the cluster
    is torn down, so a failing test cannot leave a task blocked."""
    events: list[FileEvent] = []

    def make() -> FileEvent:
        event = FileEvent(tmp_path / f"event-{len(events)}")
        events.append(event)
        return event

    yield make
    for event in events:
        event.set()


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, with SIGINT unblocked, for a test that sends one.

    Whole-suite runs (never a file alone) saw Ctrl-C tests get no KeyboardInterrupt:
    an earlier test left SIGINT handled or blocked otherwise. The warning names what
    was left, so that its source can be found."""
    before = signal.getsignal(signal.SIGINT)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if before is not signal.default_int_handler or signal.SIGINT in mask:
        warnings.warn(
            f"an earlier test left SIGINT's handler {before!r}, blocked: {signal.SIGINT in mask}",
            stacklevel=1,
        )
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture
def restore_default_source() -> Iterator[None]:
    """The default source (the latest Client's, or attach's) as it was before the test."""
    from kernel_cluster.diagnostics.attach import default_source, set_default_source

    try:
        before = default_source()
    except ValueError:
        before = None
    yield
    set_default_source(before)
