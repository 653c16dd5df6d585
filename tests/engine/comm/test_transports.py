"""Behaviour particular to one transport, and address handling."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from kernel_cluster.engine.comm import (
    CommClosedError,
    SerializationError,
    connect,
    listen,
    parse_address,
)

from .helpers import TRANSPORTS, open_pair, run

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_read_cancelled_by_a_timeout_loses_nothing(transport):
    async def main():
        async with open_pair(transport) as pair:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pair.server.read(), 0.05)
            await pair.client.write("after the timeout")
            assert await pair.server.read() == "after the timeout"

    run(main())


def test_tcp_unserialisable_message_leaves_the_comm_usable():
    async def main():
        async with open_pair("tcp") as pair:
            with pytest.raises(SerializationError, match="lock"):
                await pair.client.write({"op": "x", "arg": threading.Lock()})
            await pair.client.write("fine")
            assert await pair.server.read() == "fine"

    run(main())


class FailsToLoad:
    def __reduce__(self):
        return (_fail, ())


def _fail():
    raise ModuleNotFoundError("No module named 'only_on_the_client'")


def test_tcp_unloadable_pickle_is_reported_and_the_stream_goes_on():
    async def main():
        async with open_pair("tcp") as pair:
            await pair.client.write({"value": FailsToLoad()})
            await pair.client.write("next")
            with pytest.raises(SerializationError, match="only_on_the_client"):
                await pair.server.read()
            assert await pair.server.read() == "next"

    run(main())


def test_tcp_message_over_the_limit_is_refused_before_sending():
    async def main():
        async with open_pair("tcp") as pair:
            pair.client.max_message_size = 1000
            with pytest.raises(ValueError, match="max_message_size"):
                await pair.client.write(np.zeros(1000))
            await pair.client.write("small")
            assert await pair.server.read() == "small"

    run(main())


def test_tcp_lists_arrive_as_tuples_inproc_passes_objects_as_they_are():
    async def main():
        msg = {"keys": ["a", "b"]}
        async with open_pair("tcp") as pair:
            await pair.client.write(msg)
            assert (await pair.server.read())["keys"] == ("a", "b")
        async with open_pair("inproc") as pair:
            await pair.client.write(msg)
            assert await pair.server.read() is msg

    run(main())


def test_tcp_connect_to_nobody_fails_fast():
    async def main():
        async with open_pair("tcp") as pair:
            address = pair.listener.address
        with pytest.raises(CommClosedError, match="could not connect"):
            await connect(address, secret=pair.secret, timeout=5)

    run(main())


def test_inproc_connect_to_an_unknown_name():
    async def main():
        with pytest.raises(CommClosedError, match="no inproc listener"):
            await connect("inproc://nobody-here", secret=None)

    run(main())


def test_inproc_names_are_unique():
    async def handler(comm):
        pass

    async def main():
        listener = await listen("inproc://taken", handler, secret=None)
        try:
            with pytest.raises(OSError, match="already in use"):
                await listen("inproc://taken", handler, secret=None)
        finally:
            await listener.stop()
        again = await listen("inproc://taken", handler, secret=None)  # free after stop
        await again.stop()

    run(main())


def test_inproc_needs_both_ends_on_one_loop():
    async def handler(comm):
        pass

    listener = run(listen("inproc://loop-a", handler, secret=None))
    try:

        async def from_another_loop():
            await connect("inproc://loop-a", secret=None)

        with pytest.raises(RuntimeError, match="same loop"):
            run(from_another_loop())
    finally:
        run(listener.stop())


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("tcp://127.0.0.1:8786", ("tcp", "127.0.0.1:8786")),
        ("tcp://", ("tcp", "")),
        ("inproc://worker-1", ("inproc", "worker-1")),
    ],
)
def test_parse_address(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1:8786", "udp://x:1", "://x"])
def test_parse_address_rejects(address):
    with pytest.raises(ValueError):
        parse_address(address)


def test_tcp_listen_on_an_explicit_port_and_ipv4_default():
    async def handler(comm):
        await comm.close()

    async def main():
        first = await listen("tcp://127.0.0.1:0", handler, secret=b"k" * 32)
        port = int(first.address.rsplit(":", 1)[1])
        await first.stop()
        second = await listen(f"tcp://:{port}", handler, secret=b"k" * 32)
        assert second.address == f"tcp://127.0.0.1:{port}"
        await second.stop()

    run(main())
