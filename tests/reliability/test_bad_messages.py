"""A message that is none of ours (an unknown op, a field missing or unknown, no dict
at all) is logged with what is wrong and left out: the engine carries on with the
rest, and nobody loses a worker.

Before the wire codec (engine/wire.py), a malformed message broke the stream that
carried it: the scheduler logged an error and dropped the worker that sent it (its
process restarted, its tasks ran again elsewhere), and a worker process that got
one from the scheduler exited.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kernel_cluster.engine.comm import CommClosedError, connect
from kernel_cluster.engine.execute import unpack_exception
from kernel_cluster.engine.wire import DataReply, GetData, RequestFailed, WireError, decode, encode
from tests.engine.helpers import on_loop, wait_for

# what each bad message makes a process log (TCP: the codec's words; an embedded
# channel hands objects over, and one that is no message is ignored as unknown)
TO_SCHEDULER = [
    ({"op": "no-such-op"}, "unknown message op 'no-such-op'"),
    ({"op": "task-finished", "key": "x"}, "message 'task-finished' lacks fields"),
    ({"op": "worker-paused", "paused": True, "why": 1}, "'worker-paused' has unknown fields 'why'"),
    (42, "a message must be a dict with an 'op', got 42"),
]
TO_WORKER = [
    ({"op": "no-such-op"}, "unknown message op 'no-such-op'"),
    ({"op": "compute-task", "key": "x"}, "message 'compute-task' lacks fields"),
    ({"op": "cluster-busy", "busy": True, "why": 1}, "'cluster-busy' has unknown fields 'why'"),
    ("compute-task", "a message must be a dict with an 'op', got 'compute-task'"),
]


def inc(x: int) -> int:
    return x + 1


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


def _record_warnings(dask_worker: Any) -> None:
    dask_worker._test_warnings = handler = _Warnings()
    logging.getLogger("kernel_cluster").addHandler(handler)


def _recorded_warnings(dask_worker: Any) -> list[str]:
    handler = dask_worker._test_warnings
    return list(handler.texts)


def _stop_recording(dask_worker: Any) -> None:
    logging.getLogger("kernel_cluster").removeHandler(dask_worker._test_warnings)


def _send_raw(channel: Any, msgs: list) -> None:
    """Put ``msgs`` on ``channel`` as they are, past the encoder (a TCP stream), or as
    objects (an embedded LocalChannel)."""
    batched = getattr(channel, "batched", None)
    if batched is not None:
        batched.send(*msgs)
    else:
        channel.send(msgs)


def _send_to_scheduler(msgs: list, dask_worker: Any) -> None:
    _send_raw(dask_worker.scheduler, msgs)


def _expected(cases: list, processes: bool) -> list[str]:
    return [text if processes else repr(raw) for raw, text in cases]


def _engine_works(client: Any, cluster: Any, pids: dict, workers: set) -> None:
    assert client.gather(client.map(inc, range(20))) == list(range(1, 21))
    assert cluster.worker_pids() == pids
    assert set(on_loop(cluster, lambda: set(cluster.scheduler.state.workers))) == workers


def test_bad_messages_from_a_worker_are_logged_and_the_worker_stays(client, caplog):
    cluster = client.cluster
    pids = cluster.worker_pids()
    workers = set(on_loop(cluster, lambda: set(cluster.scheduler.state.workers)))
    with caplog.at_level(logging.WARNING, logger="kernel_cluster"):
        client.run(_send_to_scheduler, [raw for raw, _ in TO_SCHEDULER])
        for text in _expected(TO_SCHEDULER, cluster.processes):
            wait_for(lambda text=text: text in caplog.text, what=f"the scheduler to log {text}")
    _engine_works(client, cluster, pids, workers)


def test_bad_messages_from_the_scheduler_are_logged_and_the_worker_stays(client):
    cluster = client.cluster
    pids = cluster.worker_pids()
    workers = set(on_loop(cluster, lambda: set(cluster.scheduler.state.workers)))
    client.run(_record_warnings)
    try:
        channels = on_loop(cluster, lambda: dict(cluster.scheduler.worker_channels))
        for channel in channels.values():
            on_loop(cluster, _send_raw, channel, [raw for raw, _ in TO_WORKER])

        def logged() -> bool:
            seen = client.run(_recorded_warnings)
            return all(
                any(text in line for line in lines)
                for lines in seen.values()
                for text in _expected(TO_WORKER, cluster.processes)
            )

        wait_for(logged, what="every worker to log every bad message")
        _engine_works(client, cluster, pids, workers)
    finally:
        client.run(_stop_recording)


def test_a_peer_request_that_is_none_of_ours_gets_an_error_reply(cluster):
    if not cluster.processes:
        pytest.skip("embedded workers read each other's data directly, with no requests")
    address = next(iter(cluster.worker_pids()))

    async def ask() -> list:
        comm = await connect(address, secret=cluster.secret)
        try:
            replies = []
            for raw in [{"op": "no-such-op"}, {"op": "get-data"}, encode(GetData(["absent"]))]:
                await comm.write(raw)
                replies.append(decode(await comm.read()))
            return replies
        finally:
            comm.abort()

    unknown, malformed, fine = cluster.loop_thread.run(ask)
    for reply, text in [
        (unknown, "unknown message op 'no-such-op'"),
        (malformed, "message 'get-data' lacks fields 'keys'"),
    ]:
        assert type(reply) is RequestFailed
        exc, _ = unpack_exception(reply.exception, reply.traceback)
        assert type(exc) is WireError and text in str(exc)
    # the connection still serves
    assert fine == DataReply({}, {})


def test_a_malformed_registration_is_refused_and_the_cluster_carries_on(client, caplog):
    cluster = client.cluster
    if not cluster.processes:
        pytest.skip("embedded workers do not register over TCP")
    pids = cluster.worker_pids()
    workers = set(on_loop(cluster, lambda: set(cluster.scheduler.state.workers)))

    async def register() -> None:
        comm = await connect(cluster.server.address, secret=cluster.secret)
        try:
            await comm.write({"op": "register-worker", "address": "tcp://127.0.0.1:9"})
            with pytest.raises(CommClosedError):
                await comm.read()
        finally:
            comm.abort()

    with caplog.at_level(logging.WARNING, logger="kernel_cluster"):
        cluster.loop_thread.run(register)
    assert "did not register as a worker" in caplog.text
    assert "'register-worker' lacks fields 'nthreads', 'memory_limit', 'name'" in caplog.text
    _engine_works(client, cluster, pids, workers)
