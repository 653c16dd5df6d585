"""In-process transport: two asyncio queues, no sockets, no serialisation.

For the embedded engine, where scheduler and workers share the kernel
process: a message is handed to the peer as the very Python object written,
so the writer must not mutate it afterwards, and lists stay lists (unlike
TCP, where they arrive as tuples; code above must accept both).

Both ends must run on the same asyncio event loop: the listener's loop is
recorded when it starts, and connecting or using a comm from another loop
raises ``RuntimeError`` (asyncio queues are not thread-safe). Cross-thread
callers go through the loop (``run_coroutine_threadsafe``), as with TCP.

No secret is involved: only code in this process can reach a listener.
Connecting to a name nobody listens on raises ``CommClosedError`` at once.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import threading
from typing import Any

from .core import Comm, Handler, ListenerBase
from .errors import CommClosedError

__all__ = ["InprocComm", "InprocListener", "connect", "listen"]

_CLOSED = object()  # queued to wake a reader: the comm or its peer closed

_listeners: dict[str, InprocListener] = {}
_listeners_lock = threading.Lock()  # listeners on other loops may register concurrently
_ids = itertools.count(1)


def _check_loop(loop: asyncio.AbstractEventLoop, what: str) -> None:
    if asyncio.get_running_loop() is not loop:
        raise RuntimeError(
            f"{what} belongs to another event loop; inproc comms need both ends on the "
            "same loop (use a tcp:// address across loops or threads)"
        )


class InprocComm(Comm):
    """One end of an in-process pair."""

    def __init__(self, local_address: str, peer_address: str) -> None:
        self.local_address = local_address
        self.peer_address = peer_address
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()  # messages for us
        self._peer: InprocComm | None = None
        self._closed = False
        self._reason = ""
        self._reading = False

    @staticmethod
    def pair(address_a: str, address_b: str) -> tuple[InprocComm, InprocComm]:
        a, b = InprocComm(address_a, address_b), InprocComm(address_b, address_a)
        a._peer, b._peer = b, a
        return a, b

    async def read(self) -> Any:
        if self._closed:
            raise CommClosedError(self.peer_address, self._reason)
        _check_loop(self._loop, repr(self))
        if self._reading:
            raise RuntimeError(f"{self!r}: another task is already reading")
        self._reading = True
        try:
            msg = await self._queue.get()
        finally:
            self._reading = False
        if msg is _CLOSED:
            if not self._closed:
                self._closed = True
                self._reason = "the peer closed the comm"
            raise CommClosedError(self.peer_address, self._reason)
        return msg

    async def write(self, msg: Any) -> int:
        peer = self._peer
        if self._closed or peer is None:
            raise CommClosedError(self.peer_address, self._reason or "the comm is closed")
        if peer._closed:
            self._closed = True
            self._reason = "the peer closed the comm"
            raise CommClosedError(self.peer_address, self._reason)
        _check_loop(self._loop, repr(self))
        peer._queue.put_nowait(msg)
        return 0

    async def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reason = "the comm was closed"
        # Wake our own pending reader, and let the peer read what we sent,
        # then learn that we are gone.
        self._queue.put_nowait(_CLOSED)
        if self._peer is not None:
            self._peer._queue.put_nowait(_CLOSED)

    def closed(self) -> bool:
        return self._closed


class InprocListener(ListenerBase):
    """Serves ``inproc://NAME`` on the loop that created it."""

    def __init__(self, name: str, handler: Handler) -> None:
        super().__init__(handler)
        self.name = name
        self.address = f"inproc://{name}"
        self._loop = asyncio.get_running_loop()

    def _accept(self) -> InprocComm:
        _check_loop(self._loop, repr(self))
        client, server = InprocComm.pair(f"{self.address}/{next(_ids)}", self.address)
        self._spawn(self._serve(server), name=f"serve {client.local_address}")
        return client

    async def stop(self) -> None:
        with _listeners_lock:
            if _listeners.get(self.name) is self:
                del _listeners[self.name]
        await self._stop_serving()


async def connect(
    location: str, *, max_message_size: int | None = None, max_frames: int | None = None
) -> InprocComm:
    """Connect to ``inproc://NAME``. The size limits are accepted, so callers
    can pass the same options to every transport, and ignored: nothing is
    framed."""
    with _listeners_lock:
        listener = _listeners.get(location)
    if listener is None or listener._stopped:
        raise CommClosedError(
            f"inproc://{location}", "no inproc listener with this name in this process"
        )
    return listener._accept()


async def listen(
    location: str,
    handler: Handler,
    *,
    handshake_timeout: float | None = None,
    max_message_size: int | None = None,
    max_frames: int | None = None,
) -> InprocListener:
    """Listen on ``inproc://NAME``; an empty name picks a unique one. The TCP
    options are accepted for symmetry and ignored."""
    name = location or f"{os.getpid()}-{next(_ids)}"
    listener = InprocListener(name, handler)
    with _listeners_lock:
        if name in _listeners:
            raise OSError(errno.EADDRINUSE, f"inproc://{name} is already in use")
        _listeners[name] = listener
    return listener
