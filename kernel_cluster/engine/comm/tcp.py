"""TCP transport: tornado streams, the auth handshake, then framed messages.

Listeners bind 127.0.0.1 unless an address says otherwise. Every accepted
connection first runs the handshake of ``auth`` within ``handshake_timeout``
seconds; a peer that fails it, sends something else or stays silent is
logged and dropped, and the listener goes on serving others. After the
handshake, bytes go through ``frames.FrameDecoder`` and ``serialize.loads``;
a stream that breaks the format is closed (its later bytes cannot be trusted
to start a message) and the reader gets ``ProtocolError``.

Small reads go through tornado's buffer in chunks; the body of a large frame
is read straight into its final buffer (``read_into``), so an 8 MB array is,
but for its first chunk, copied once: from the kernel into the bytearray it
will live in.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable
from typing import Any

from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets
from tornado.tcpclient import TCPClient
from tornado.tcpserver import TCPServer

from . import serialize
from .auth import HELLO_SIZE, PROOF_SIZE, Handshake, check_secret
from .core import Comm, Handler, ListenerBase
from .errors import AuthenticationError, CommClosedError, ProtocolError
from .frames import (
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_SIZE,
    FrameDecoder,
    encode_header,
    max_message_size_setting,
)

__all__ = ["TcpComm", "TcpListener", "connect", "listen"]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
HANDSHAKE_TIMEOUT = 5.0
_READ_CHUNK = 64 * 1024  # small pieces: one read may hold many messages
_DIRECT_READ_MIN = 64 * 1024  # frame bodies at least this big bypass the chunking
_DIRECT_READ_MAX = 16 * 1024 * 1024  # stays under tornado's max_buffer_size


def parse_location(location: str, *, default_port: int | None) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) to a pair; empty host means 127.0.0.1."""
    if location.startswith("["):
        host, _, rest = location[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, sep, port = location.rpartition(":")
        if not sep:
            host, port = location, ""
    if not port:
        if default_port is None:
            raise ValueError(f"tcp address {location!r} needs a port: 'tcp://HOST:PORT'")
        return host or DEFAULT_HOST, default_port
    try:
        return host or DEFAULT_HOST, int(port)
    except ValueError:
        raise ValueError(f"tcp address {location!r}: port {port!r} is not a number") from None


def format_address(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def _require_secret(secret: bytes | None) -> bytes:
    if secret is None:
        raise ValueError(
            "tcp comms need the cluster secret (kernel_cluster.engine.comm.new_secret()); "
            "use an inproc:// address for a connection inside this process"
        )
    return check_secret(secret)


class TcpComm(Comm):
    """A comm over an authenticated tornado ``IOStream``."""

    def __init__(
        self,
        stream: IOStream,
        local_address: str,
        peer_address: str,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_frames: int = DEFAULT_MAX_FRAMES,
    ) -> None:
        self._stream = stream
        self.local_address = local_address
        self.peer_address = peer_address
        self.max_message_size = max_message_size
        self.max_frames = max_frames
        self._decoder = FrameDecoder(max_message_size=max_message_size, max_frames=max_frames)
        self.bytes_read = 0  # on the wire, so callers can tell compressed sizes
        self._reading = False
        self._closed = False
        self._aborted_locally = False
        self._pending_read: Awaitable[Any] | None = None

    async def read(self) -> Any:
        if self._aborted_locally:
            raise CommClosedError(self.peer_address, "the comm was closed")
        if self._reading:
            raise RuntimeError(f"{self!r}: another task is already reading")
        self._reading = True
        try:
            frames = await self._read_frames()
        finally:
            self._reading = False
        try:
            return serialize.loads(frames)
        except ProtocolError as exc:
            raise self._broken(exc.reason) from exc

    async def _read_frames(self) -> list[bytearray]:
        decoder = self._decoder
        while True:
            frames = decoder.next_message()
            if frames is not None:
                return frames
            if self._closed:
                raise CommClosedError(self.peer_address, "the comm was closed")
            try:
                if self._pending_read is None:
                    if decoder.in_message and decoder.bytes_needed >= _DIRECT_READ_MIN:
                        target = decoder.get_buffer()[:_DIRECT_READ_MAX]
                        self._pending_read = self._stream.read_into(target, partial=True)
                    else:
                        self._pending_read = self._stream.read_bytes(_READ_CHUNK, partial=True)
                # Shielded: if our caller is cancelled (a timeout around read()),
                # the stream read carries on and the next read() collects it.
                # Cancelling it would leave tornado's stream unable to read again.
                data = await asyncio.shield(self._pending_read)
            except StreamClosedError as exc:
                self._pending_read = None
                self._closed = True
                if decoder.in_message and not self._aborted_locally:
                    raise self._broken("connection closed in the middle of a message") from exc
                raise CommClosedError(self.peer_address, self._why_closed(exc)) from exc
            self._pending_read = None
            try:
                if isinstance(data, int):  # read_into: bytes written into the target
                    self.bytes_read += data
                    decoder.buffer_updated(data)
                else:
                    self.bytes_read += len(data)
                    decoder.feed(data)
            except ProtocolError as exc:
                raise self._broken(exc.reason) from exc

    def _why_closed(self, exc: StreamClosedError) -> str:
        if self._aborted_locally:
            return "the comm was closed"
        cause = exc.real_error or self._stream.error
        return (
            f"the peer closed the connection ({cause})"
            if cause
            else "the peer closed the connection"
        )

    def _broken(self, reason: str) -> ProtocolError:
        """Close a comm whose peer broke the format; the error to raise."""
        logger.warning("Closing %s: %s", self, reason)
        self.abort()
        return ProtocolError(self.peer_address, reason)

    async def write(self, msg: Any) -> int:
        if self.closed():
            raise CommClosedError(self.peer_address, "the comm is closed")
        frames = serialize.dumps(msg)
        header = encode_header(
            frames, max_message_size=self.max_message_size, max_frames=self.max_frames
        )
        nbytes = len(header)
        try:
            # No await until every piece is queued: concurrent writers never interleave.
            future = self._stream.write(header)
            for frame in frames:
                size = memoryview(frame).nbytes
                if size:
                    future = self._stream.write(frame)
                    nbytes += size
            # Shielded so that a cancelled write() leaves no cancelled future
            # for tornado to complain about; the bytes are queued either way.
            await asyncio.shield(future)
        except StreamClosedError as exc:
            self._closed = True
            raise CommClosedError(self.peer_address, self._why_closed(exc)) from exc
        return nbytes

    async def close(self) -> None:
        # Writes are awaited until flushed, so nothing of ours is pending here.
        self.abort()

    def abort(self) -> None:
        if not self._closed:
            self._closed = True
            self._aborted_locally = True
        self._stream.close()

    def closed(self) -> bool:
        return self._closed or self._stream.closed()


# -- handshake over a stream ---------------------------------------------------------


async def _client_handshake(stream: IOStream, secret: bytes, address: str) -> None:
    handshake = Handshake(secret, "client")
    stream.write(handshake.hello)
    try:
        handshake.receive_hello(await stream.read_bytes(HELLO_SIZE))
        stream.write(handshake.proof())
        proof = await stream.read_bytes(PROOF_SIZE)
    except StreamClosedError:
        raise AuthenticationError(
            address,
            "the server closed the connection during the handshake: "
            "it does not accept our secret (or is not a kernel-cluster listener)",
        ) from None
    except AuthenticationError as exc:
        raise AuthenticationError(address, exc.reason) from None
    try:
        handshake.check_proof(proof)
    except AuthenticationError as exc:
        raise AuthenticationError(address, exc.reason) from None


async def _server_handshake(stream: IOStream, secret: bytes) -> None:
    handshake = Handshake(secret, "server")
    stream.write(handshake.hello)
    handshake.receive_hello(await stream.read_bytes(HELLO_SIZE))
    handshake.check_proof(await stream.read_bytes(PROOF_SIZE))
    await stream.write(handshake.proof())


# -- connect / listen ----------------------------------------------------------------


def _sockname(stream: IOStream, peer: bool) -> str:
    sock = stream.socket
    host, port = (sock.getpeername() if peer else sock.getsockname())[:2]
    return format_address(host, port)


async def connect(
    location: str,
    *,
    secret: bytes | None,
    timeout: float = 10,
    max_message_size: int | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
) -> TcpComm:
    """Connect to ``HOST:PORT`` and authenticate; see ``core.connect``.

    ``max_message_size`` defaults to ``frames.max_message_size_setting()``.
    """
    secret = _require_secret(secret)
    if max_message_size is None:
        max_message_size = max_message_size_setting()
    host, port = parse_location(location, default_port=None)
    address = format_address(host, port)
    stream: IOStream | None = None
    try:
        async with asyncio.timeout(timeout):
            stream = await TCPClient().connect(host, port)
            stream.set_nodelay(True)
            await _client_handshake(stream, secret, address)
    except AuthenticationError:
        if stream is not None:
            stream.close()
        raise
    except TimeoutError:
        if stream is not None:
            stream.close()
        raise CommClosedError(address, f"could not connect within {timeout} s") from None
    except (OSError, StreamClosedError) as exc:
        if stream is not None:
            stream.close()
        raise CommClosedError(address, f"could not connect: {exc}") from exc
    return TcpComm(
        stream,
        _sockname(stream, peer=False),
        address,
        max_message_size=max_message_size,
        max_frames=max_frames,
    )


class _Server(TCPServer):
    def __init__(self, listener: TcpListener) -> None:
        super().__init__()
        self._listener = listener

    def handle_stream(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        self._listener._accepted(stream, address)


class TcpListener(ListenerBase):
    """Accepts authenticated TCP connections; see ``core.Listener``."""

    def __init__(
        self,
        sock: socket.socket,
        handler: Handler,
        secret: bytes,
        *,
        handshake_timeout: float,
        max_message_size: int,
        max_frames: int,
    ) -> None:
        super().__init__(handler)
        host, port = sock.getsockname()[:2]
        self.address = format_address(host, port)
        self._secret = secret
        self.handshake_timeout = handshake_timeout
        self._limits = {"max_message_size": max_message_size, "max_frames": max_frames}
        self._server = _Server(self)
        self._server.add_sockets([sock])

    def _accepted(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        peer = format_address(*address[:2])
        if self._stopped:
            stream.close()
            return
        self._spawn(self._authenticate_and_serve(stream, peer), name=f"serve {peer}")

    async def _authenticate_and_serve(self, stream: IOStream, peer: str) -> None:
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await _server_handshake(stream, self._secret)
        except (AuthenticationError, StreamClosedError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                reason = f"no complete handshake within {self.handshake_timeout} s"
            elif isinstance(exc, AuthenticationError):
                reason = exc.reason
            else:
                reason = "the peer closed the connection during the handshake"
            logger.warning("Refused connection from %s to %s: %s", peer, self.address, reason)
            stream.close()
            return
        except BaseException:
            stream.close()  # cancelled by stop(), or a bug: never leak the socket
            raise
        stream.set_nodelay(True)
        comm = TcpComm(stream, self.address, peer, **self._limits)
        await self._serve(comm)

    async def stop(self) -> None:
        if not self._stopped:
            self._server.stop()
        await self._stop_serving()


async def listen(
    location: str,
    handler: Handler,
    *,
    secret: bytes | None,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    max_message_size: int | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
) -> TcpListener:
    """Listen on ``HOST:PORT`` (default 127.0.0.1, a free port); see ``core.listen``.

    ``max_message_size`` defaults to ``frames.max_message_size_setting()``.
    """
    secret = _require_secret(secret)
    if max_message_size is None:
        max_message_size = max_message_size_setting()
    host, port = parse_location(location, default_port=0)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock, *extra = bind_sockets(port, address=host, family=family)
    for other in extra:  # a name resolving to several addresses: serve the first
        other.close()
    return TcpListener(
        sock,
        handler,
        secret,
        handshake_timeout=handshake_timeout,
        max_message_size=max_message_size,
        max_frames=max_frames,
    )
