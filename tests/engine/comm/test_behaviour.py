"""One behaviour suite, run over every transport (inproc and tcp)."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from kernel_cluster.engine.comm import (
    BatchedSend,
    Comm,
    CommClosedError,
    connect,
    listen,
)

from ..helpers import wait_for_async
from .helpers import TRANSPORTS, open_pair, run

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


def test_nested_message_round_trip(transport):
    msg = {
        "op": "compute",
        "key": ("x-abc", 0),
        "deps": {("x-abc", 1): b"\x00bytes", "y": None},
        "value": 1.25,
        "priority": (-1, 0, 3),
    }

    async def main():
        async with open_pair(transport) as pair:
            await pair.client.write(msg)
            assert await pair.server.read() == msg
            await pair.server.write({"reply": msg["deps"]})
            out = await pair.client.read()
            assert out == {"reply": msg["deps"]}
            assert type(out["reply"][("x-abc", 1)]) is bytes

    run(main())


def test_many_messages_in_order_both_ways(transport):
    async def main():
        async with open_pair(transport) as pair:
            for i in range(500):
                await pair.client.write({"i": i, "key": ("k", i)})
            for i in range(500):
                assert await pair.server.read() == {"i": i, "key": ("k", i)}
            writer = asyncio.create_task(_write_range(pair.server, 500))
            got = [await pair.client.read() for _ in range(500)]
            await writer
            assert got == list(range(500))

    run(main())


async def _write_range(comm: Comm, n: int) -> None:
    for i in range(n):
        await comm.write(i)


def test_large_numpy_array(transport):
    array = np.random.default_rng(1).random(1_000_000)  # 8 MB

    async def main():
        async with open_pair(transport) as pair:
            # A TCP write returns once the OS took the bytes: read concurrently.
            writing = asyncio.create_task(pair.client.write({"op": "data", "x": array}))
            out = await pair.server.read()
            np.testing.assert_array_equal(out["x"], array)
            nbytes = await writing
            assert nbytes > array.nbytes if transport == "tcp" else nbytes == 0

    run(main())


def test_concurrent_writers_do_not_interleave(transport):
    blob = np.arange(50_000)  # large enough to go out of band

    async def main():
        async with open_pair(transport) as pair:

            async def writer(name: str) -> None:
                for i in range(30):
                    await pair.client.write({"from": name, "i": i, "blob": blob})

            tasks = [asyncio.create_task(writer(name)) for name in "ab"]
            got = [await pair.server.read() for _ in range(60)]
            await asyncio.gather(*tasks)
            for name in "ab":
                assert [m["i"] for m in got if m["from"] == name] == list(range(30))
            assert all(np.array_equal(m["blob"], blob) for m in got)

    run(main())


@pytest.mark.parametrize("closing", ["client", "server"])
def test_closing_one_end_fails_the_other_read(transport, closing):
    async def main():
        async with open_pair(transport) as pair:
            this, other = (
                (pair.client, pair.server) if closing == "client" else (pair.server, pair.client)
            )
            pending = asyncio.create_task(other.read())
            await this.write("last words")
            await this.close()
            assert this.closed()
            assert await pending == "last words"  # sent before closing: delivered
            with pytest.raises(CommClosedError):
                await other.read()
            assert other.closed()
            with pytest.raises(CommClosedError):
                await this.read()
            with pytest.raises(CommClosedError):
                await this.write("after close")

    run(main())


def test_abort_wakes_a_pending_local_read(transport):
    async def main():
        async with open_pair(transport) as pair:
            pending = asyncio.create_task(pair.client.read())
            await asyncio.sleep(0)  # let the read start waiting
            pair.client.abort()
            with pytest.raises(CommClosedError):
                await pending

    run(main())


def test_writing_to_a_closed_peer_eventually_fails(transport):
    async def main():
        async with open_pair(transport) as pair:
            await pair.server.close()
            with pytest.raises(CommClosedError):
                # TCP may accept a write or two into the kernel buffer first.
                for _ in range(1000):
                    await pair.client.write(b"x" * 100_000)
                    await asyncio.sleep(0)

    run(main())


def test_listener_stop_closes_accepted_comms(transport):
    async def main():
        async with open_pair(transport) as pair:
            pending = asyncio.create_task(pair.client.read())
            await pair.listener.stop()
            assert pair.server.closed()
            with pytest.raises(CommClosedError):
                await pending
            with pytest.raises(CommClosedError):
                await connect(pair.listener.address, secret=pair.secret, timeout=2)

    run(main())


def test_listener_stop_cancels_running_handlers(transport):
    async def main():
        ended = []
        started = asyncio.Event()

        async def handler(comm: Comm) -> None:
            try:
                while True:
                    await comm.read()
                    started.set()
            except (CommClosedError, asyncio.CancelledError) as exc:
                ended.append(type(exc))
                raise

        listener = await listen(f"{transport}://", handler, secret=b"s" * 32)
        comm = await connect(listener.address, secret=b"s" * 32)
        await comm.write("hello")
        await asyncio.wait_for(started.wait(), 5)
        await listener.stop()
        assert len(ended) == 1
        with pytest.raises(CommClosedError):
            await comm.read()

    run(main())


def test_handler_error_is_logged_and_closes_its_comm(transport, caplog):
    async def handler(comm: Comm) -> None:
        await comm.read()
        raise RuntimeError("handler bug")

    async def main():
        listener = await listen(f"{transport}://", handler, secret=b"s" * 32)
        try:
            comm = await connect(listener.address, secret=b"s" * 32)
            await comm.write("go")
            with pytest.raises(CommClosedError):
                await comm.read()
            # The listener survives its handler's bug.
            other = await connect(listener.address, secret=b"s" * 32)
            await other.close()
        finally:
            await listener.stop()

    with caplog.at_level(logging.ERROR, logger="kernel_cluster.engine.comm"):
        run(main())
    assert "handler bug" in caplog.text


def test_addresses(transport):
    async def main():
        async with open_pair(transport) as pair:
            assert pair.listener.address.startswith(f"{transport}://")
            assert pair.client.peer_address == pair.listener.address
            assert pair.server.peer_address == pair.client.local_address
            if transport == "tcp":
                assert pair.listener.address.startswith("tcp://127.0.0.1:")
                assert not pair.listener.address.endswith(":0")

    run(main())


# -- BatchedSend ---------------------------------------------------------------


def test_batched_send_delivers_in_order_and_batches(transport):
    async def main():
        async with open_pair(transport) as pair:
            batched = BatchedSend(pair.client, interval=0.01)
            for i in range(300):
                batched.send({"op": "task-finished", "key": ("x", i)})
                if i % 50 == 0:
                    await asyncio.sleep(0)  # let a flush start mid-stream
            batched.send("a", "b")
            received = []
            while len(received) < 302:
                batch = await pair.server.read()
                assert isinstance(batch, list | tuple)
                received.extend(batch)
            assert received[:300] == [{"op": "task-finished", "key": ("x", i)} for i in range(300)]
            assert received[300:] == ["a", "b"]
            assert batched.message_count == 302
            assert 1 <= batched.batch_count < 302 // 10
            await batched.close()
            assert pair.client.closed()
            with pytest.raises(CommClosedError):
                batched.send("too late")

    run(main())


def test_batched_close_flushes_what_is_queued(transport):
    async def main():
        async with open_pair(transport) as pair:
            batched = BatchedSend(pair.client, interval=10)  # never flushes on its own
            batched.send(1)
            await wait_for_async(lambda: batched.batch_count == 1, what="the first flush")
            batched.send(2, 3)  # waits out the long interval...
            await batched.close()  # ...unless closing flushes it
            assert await pair.server.read() in ([1], (1,))
            assert await pair.server.read() in ([2, 3], (2, 3))
            with pytest.raises(CommClosedError):
                await pair.server.read()

    run(main())


def test_batched_send_raises_once_the_comm_broke(transport):
    async def main():
        async with open_pair(transport) as pair:
            batched = BatchedSend(pair.client, interval=0)
            await pair.server.close()

            def broken() -> bool:
                try:
                    batched.send(b"x" * 100_000)
                except CommClosedError:
                    return True
                return False

            await wait_for_async(broken, what="send() to notice the broken comm")
            await batched.close()

    run(main())


def test_a_handler_may_stop_its_own_listener(transport):
    async def main():
        stopped = asyncio.Event()

        async def handler(comm: Comm) -> None:
            if await comm.read() == "terminate":
                await listener.stop()
                stopped.set()

        listener = await listen(f"{transport}://", handler, secret=b"s" * 32)
        comm = await connect(listener.address, secret=b"s" * 32)
        await comm.write("terminate")
        await asyncio.wait_for(stopped.wait(), 5)
        with pytest.raises(CommClosedError):
            await comm.read()

    run(main())
