"""Fixtures for end-to-end tests: a real embedded cluster and a client attached to it.

Nothing here is autouse: the synchronous core tests start no engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from kernel_cluster.client import Client
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import assert_no_new_threads, check_engine_state, is_idle, wait_for


class _ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def cluster() -> Iterator[KernelCluster]:
    """Two embedded workers with two threads each.

    At teardown (once every client is closed) the engine must validate, forget every
    task and free every value, and closing it must end every thread it started.
    The engine must not have logged an error (handlers that fail are only logged).
    """
    before = set(threading.enumerate())
    errors = _ErrorRecords()
    engine_logger = logging.getLogger("kernel_cluster")
    engine_logger.addHandler(errors)
    try:
        cluster = KernelCluster(n_workers=2, threads_per_worker=2)
        try:
            yield cluster
            if cluster.status == "running":
                check_engine_state(cluster)
                wait_for(lambda: is_idle(cluster), what="the engine to forget every task")
                check_engine_state(cluster)
        finally:
            cluster.close()
    finally:
        engine_logger.removeHandler(errors)
    assert not errors.records, [errors.format(r) for r in errors.records]
    assert_no_new_threads(before)


@pytest.fixture
def client(cluster: KernelCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        yield c
        if cluster.status == "running":
            check_engine_state(cluster)


@pytest.fixture
def new_event(cluster: KernelCluster) -> Iterator[Callable[[], threading.Event]]:
    """Make events that tasks block on; all are set before the cluster is torn down,
    so a failing test cannot leave a task thread blocked."""
    events: list[threading.Event] = []

    def make() -> threading.Event:
        event = threading.Event()
        events.append(event)
        return event

    yield make
    for event in events:
        event.set()
