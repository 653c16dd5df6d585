"""A TCP listener facing hostile or broken peers, driven with raw sockets.

Every case checks that the offending connection alone is closed, with a
warning, and that the listener goes on serving authenticated clients.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from pathlib import Path

import pytest

from kernel_cluster.engine.comm import (
    AuthenticationError,
    Comm,
    CommClosedError,
    ProtocolError,
    connect,
    dumps,
    listen,
    loads,
    new_secret,
)
from kernel_cluster.engine.comm.auth import HELLO_SIZE, Handshake
from kernel_cluster.engine.comm.frames import MAGIC, encode_header

from ..helpers import wait_for_async
from .helpers import (
    raw_authenticate,
    raw_connect,
    recv_until_closed,
    run,
)

pytestmark = pytest.mark.timeout(30)

LOGGER = "kernel_cluster.engine.comm"


class TouchFile:
    """Unpickling this creates a file: proof that a payload was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def framed(frames) -> bytes:
    return encode_header(frames) + b"".join(bytes(f) for f in frames)


class EchoServer:
    """A listener whose handler echoes messages and records how comms ended."""

    def __init__(self) -> None:
        self.secret = new_secret()
        self.accepted: list[Comm] = []
        self.errors: list[BaseException] = []

    async def handler(self, comm: Comm) -> None:
        self.accepted.append(comm)
        try:
            while True:
                await comm.write(("echo", await comm.read()))
        except CommClosedError as exc:
            self.errors.append(exc)

    async def start(self, **options):
        self.listener = await listen("tcp://", self.handler, secret=self.secret, **options)
        return self.listener

    async def check_still_serving(self) -> None:
        comm = await connect(self.listener.address, secret=self.secret, timeout=5)
        await comm.write({"ping": ("x", 1)})
        assert await comm.read() == ("echo", {"ping": ("x", 1)})
        await comm.close()


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return caplog


@pytest.mark.parametrize("after_hello", [False, True], ids=["instead-of-hello", "after-hello"])
def test_pickle_before_authentication_is_never_loaded(tmp_path, warnings, after_hello):
    marker = tmp_path / "pwned"
    payload = framed(dumps({"op": "run", "x": TouchFile(marker)}))

    # The payload is live: a peer that skipped authentication would be owned.
    control = tmp_path / "control"
    loads([bytearray(f) for f in dumps(TouchFile(control))]).close()
    assert control.exists()

    async def main():
        server = EchoServer()
        listener = await server.start()
        loop = asyncio.get_running_loop()
        sock = await raw_connect(listener.address)
        try:
            if after_hello:  # a well-formed hello, then the pickle instead of a proof
                await loop.sock_sendall(sock, Handshake(new_secret(), "client").hello)
            await loop.sock_sendall(sock, payload)
            received = await recv_until_closed(sock)
        finally:
            sock.close()
        assert len(received) == HELLO_SIZE  # the server's hello, never its proof
        await wait_for_async(lambda: "Refused connection" in warnings.text, what="a warning")
        assert server.accepted == []  # the handler never saw this peer
        await server.check_still_serving()
        await listener.stop()
        assert not marker.exists()

    run(main())
    assert not marker.exists()


def test_silent_peer_is_dropped_after_the_handshake_timeout(warnings):
    async def main():
        server = EchoServer()
        listener = await server.start(handshake_timeout=0.2)
        sock = await raw_connect(listener.address)
        try:
            assert len(await recv_until_closed(sock, timeout=5)) == HELLO_SIZE
        finally:
            sock.close()
        await wait_for_async(lambda: "no complete handshake" in warnings.text, what="a warning")
        await server.check_still_serving()
        await listener.stop()

    run(main())


def test_wrong_secret_is_refused(warnings):
    async def main():
        server = EchoServer()
        listener = await server.start()
        with pytest.raises(AuthenticationError, match="does not accept our secret") as info:
            await connect(listener.address, secret=new_secret())
        assert info.value.address == listener.address
        await wait_for_async(lambda: "does not hold the cluster secret" in warnings.text)
        assert server.accepted == []
        await server.check_still_serving()
        await listener.stop()

    run(main())


def test_tcp_refuses_to_run_without_a_secret():
    async def main():
        with pytest.raises(ValueError, match="secret"):
            await listen("tcp://", EchoServer().handler, secret=None)
        with pytest.raises(ValueError, match="secret"):
            await connect("tcp://127.0.0.1:1", secret=None)

    run(main())


@pytest.mark.parametrize("impostor", ["garbage", "no-secret"])
def test_client_refuses_a_server_without_the_secret(impostor):
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if impostor == "garbage":
            writer.write(b"HTTP/1.1 200 OK\r\n" * 4)
        else:  # speaks the protocol, but does not know the secret
            handshake = Handshake(new_secret(), "server")
            writer.write(handshake.hello)
            handshake.receive_hello(await reader.readexactly(HELLO_SIZE))
            await reader.readexactly(32)
            writer.write(b"\x00" * 32)
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.close()

    async def main():
        fake = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = fake.sockets[0].getsockname()[1]
        try:
            with pytest.raises(AuthenticationError):
                await connect(f"tcp://127.0.0.1:{port}", secret=new_secret(), timeout=5)
        finally:
            fake.close()
            await fake.wait_closed()

    run(main())


@pytest.mark.parametrize(
    "data",
    [b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * 3, b"\x00" * 7],
    ids=["garbage", "truncated-hello"],
)
def test_garbage_before_authentication_closes_that_connection_only(warnings, data):
    async def main():
        server = EchoServer()
        listener = await server.start()
        good = await connect(listener.address, secret=server.secret)
        sock = await raw_connect(listener.address)
        try:
            await asyncio.get_running_loop().sock_sendall(sock, data)
            sock.shutdown(socket.SHUT_WR)
            assert len(await recv_until_closed(sock)) == HELLO_SIZE
        finally:
            sock.close()
        await wait_for_async(lambda: "Refused connection" in warnings.text, what="a warning")
        await good.write("still here")
        assert await good.read() == ("echo", "still here")
        await server.check_still_serving()
        await good.close()
        await listener.stop()

    run(main())


BAD_STREAMS = {
    "bad-magic": b"XXXX" + b"\x00" * 60,
    "too-many-frames": struct.pack("<4sI", MAGIC, 1 << 30),
    "oversize-frame": struct.pack("<4sIQ", MAGIC, 1, 1 << 40),
    "truncated-frame": struct.pack("<4sIQ", MAGIC, 1, 100) + b"x" * 10,
    "bad-msgpack": framed([b"\xc1"]),
}


@pytest.mark.parametrize("data", BAD_STREAMS.values(), ids=BAD_STREAMS.keys())
def test_broken_frames_after_authentication_close_that_comm_only(warnings, data):
    async def main():
        server = EchoServer()
        listener = await server.start()
        good = await connect(listener.address, secret=server.secret)
        sock = await raw_connect(listener.address)
        raw_address = "tcp://{}:{}".format(*sock.getsockname())
        try:
            await raw_authenticate(sock, server.secret)
            await asyncio.get_running_loop().sock_sendall(sock, data)
            sock.shutdown(socket.SHUT_WR)  # a truncated frame ends with the stream
            assert await recv_until_closed(sock) == b""
        finally:
            sock.close()
        await wait_for_async(lambda: len(server.errors) == 1, what="the handler to fail")
        assert isinstance(server.errors[0], ProtocolError)
        (raw_comm,) = [c for c in server.accepted if c.peer_address == raw_address]
        assert raw_comm.closed()
        assert "Closing" in warnings.text
        await good.write("still here")
        assert await good.read() == ("echo", "still here")
        await server.check_still_serving()
        await good.close()
        await listener.stop()

    run(main())
