"""Shared test plumbing: running coroutines and comm pairs (polling: ``tests.engine.helpers``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from kernel_cluster.engine.comm import Comm, Listener, connect, listen, new_secret
from kernel_cluster.engine.comm.auth import HELLO_SIZE, PROOF_SIZE, Handshake

T = TypeVar("T")

TRANSPORTS = ["inproc", "tcp"]


def run(coro: Coroutine[Any, Any, T], timeout: float = 20) -> T:
    """Run ``coro`` in a fresh event loop, failing after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@dataclass
class Pair:
    listener: Listener
    client: Comm
    server: Comm
    secret: bytes


@contextlib.asynccontextmanager
async def open_pair(transport: str, **listen_options: Any) -> AsyncIterator[Pair]:
    """A listener and one connected comm pair over ``transport``."""
    accepted: asyncio.Queue[Comm] = asyncio.Queue()

    async def handler(comm: Comm) -> None:
        await accepted.put(comm)  # the test takes ownership of the comm

    secret = new_secret()
    listener = await listen(f"{transport}://", handler, secret=secret, **listen_options)
    client = None
    try:
        client = await connect(listener.address, secret=secret)
        server = await asyncio.wait_for(accepted.get(), 5)
        yield Pair(listener, client, server, secret)
    finally:
        if client is not None:
            await client.close()
        await listener.stop()


# -- raw sockets, for talking to a TCP listener without our client code --------


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    return host, int(port)


async def raw_connect(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, host_port(address))
    return sock


async def recv_exactly(sock: socket.socket, n: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


async def recv_until_closed(sock: socket.socket, timeout: float = 5) -> bytes:
    """Everything the peer sends until it closes; fails if it never does."""
    loop = asyncio.get_running_loop()
    data = b""
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await loop.sock_recv(sock, 65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk


async def raw_authenticate(sock: socket.socket, secret: bytes) -> None:
    """Run the client side of the handshake by hand."""
    loop = asyncio.get_running_loop()
    handshake = Handshake(secret, "client")
    await loop.sock_sendall(sock, handshake.hello)
    handshake.receive_hello(await recv_exactly(sock, HELLO_SIZE))
    await loop.sock_sendall(sock, handshake.proof())
    handshake.check_proof(await recv_exactly(sock, PROOF_SIZE))
