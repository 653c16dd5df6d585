"""TCP transport: tornado streams, the auth handshake, then framed messages.

Listeners bind 127.0.0.1 unless an address says otherwise. Every accepted
connection first runs the handshake of ``auth`` within ``handshake_timeout``
seconds; a peer that fails it, sends something else or stays silent is
logged and dropped, and the listener goes on serving others. After the
handshake, bytes go through ``frames.FrameDecoder`` and ``serialize.loads``;
a stream that breaks the format is closed (its later bytes cannot be trusted
to start a message) and the reader gets ``ProtocolError``.

A flood of connections must not take the listener (or its event loop) down:
at most ``max_handshakes`` connections may be in the handshake at once, and
those beyond are closed as soon as they are accepted (their client gets a
retryable ``CommClosedError``); when accepting fails for want of file
descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), the listener stops
watching its socket for a while (backing off up to a second) instead of
being woken again at once; such events are logged at most every few
seconds, with a count.

Small reads go through tornado's buffer in chunks; the body of a large frame
is read straight into its final buffer (``read_into``), so an 8 MB array is,
but for its first chunk, copied once: from the kernel into the bytearray it
will live in.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Awaitable
from typing import Any

from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets
from tornado.tcpclient import TCPClient

from . import serialize
from .auth import HELLO_SIZE, PROOF_SIZE, Handshake, check_secret
from .core import Comm, Handler, ListenerBase
from .errors import AuthenticationError, CommClosedError, ProtocolError
from .frames import (
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_SIZE,
    Frame,
    FrameDecoder,
    encode_header,
    max_message_size_setting,
)

__all__ = ["TcpComm", "TcpListener", "connect", "listen"]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
HANDSHAKE_TIMEOUT = 5.0
MAX_HANDSHAKES = 128  # connections in the handshake at once, per listener
_ACCEPT_BATCH = 64  # accepts per wake-up, so that other work gets its turn
_BACKOFF_MIN = 0.05  # seconds without accepting after EMFILE & co, doubling
_BACKOFF_MAX = 1.0
_LOG_EVERY = 5.0  # seconds between two warnings about refused connections
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
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

    async def _read_frames(self) -> list[Frame]:
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
                        # tornado types the buffer as bytearray; any writable buffer will do
                        self._pending_read = self._stream.read_into(target, partial=True)  # type: ignore[arg-type]
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

    async def write(self, msg: Any, *, max_message_size: int | None = None) -> int:
        """See ``Comm.write``; ``max_message_size`` lowers this comm's limit for
        this message (to the peer's own limit, when it said what that is)."""
        if self.closed():
            raise CommClosedError(self.peer_address, "the comm is closed")
        limit = self.max_message_size
        if max_message_size is not None:
            limit = min(limit, max_message_size)
        frames = serialize.dumps(msg)
        header = encode_header(frames, max_message_size=limit, max_frames=self.max_frames)
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
        hello = await stream.read_bytes(HELLO_SIZE)
    except StreamClosedError:
        # Closed before the server even said hello: it is refusing connections
        # for now (too many in the handshake), which a retry may get past.
        raise CommClosedError(
            address,
            "the server closed the connection before its handshake: it is refusing "
            "connections for now (too many connecting at once); retry later",
        ) from None
    try:
        handshake.receive_hello(hello)
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


class TcpListener(ListenerBase):
    """Accepts authenticated TCP connections; see ``core.Listener``.

    Accepting is done here rather than by tornado's TCPServer, which on EMFILE
    raises out of its callback and is woken again at once, for as long as the
    descriptors stay exhausted: a busy loop and a log line per turn.
    """

    def __init__(
        self,
        sock: socket.socket,
        handler: Handler,
        secret: bytes,
        *,
        handshake_timeout: float,
        max_message_size: int,
        max_frames: int,
        max_handshakes: int = MAX_HANDSHAKES,
    ) -> None:
        super().__init__(handler)
        host, port = sock.getsockname()[:2]
        self.address = format_address(host, port)
        self._secret = secret
        self.handshake_timeout = handshake_timeout
        self.max_handshakes = max_handshakes
        self._limits = {"max_message_size": max_message_size, "max_frames": max_frames}
        self._sock = sock
        sock.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._handshaking = 0
        self._backoff = 0.0
        self._resume: asyncio.TimerHandle | None = None
        self.refused = 0  # connections closed at once: too many in the handshake
        self.accept_errors = 0  # EMFILE and the like
        self._last_log = float("-inf")
        self._unlogged = 0
        self._loop.add_reader(sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._pause(exc)
                return
            self._backoff = 0.0
            self._accepted(conn, address)

    def _pause(self, exc: OSError) -> None:
        """Stop accepting for a while: the error will not clear by retrying now."""
        self.accept_errors += 1
        if exc.errno not in _RESOURCE_ERRORS:
            logger.error("Accepting on %s failed: %s", self.address, exc)
        self._backoff = min(max(2 * self._backoff, _BACKOFF_MIN), _BACKOFF_MAX)
        self._log_rate_limited(
            "Cannot accept connections on %s (%s); retrying in %.2f s",
            self.address,
            exc.strerror or exc,
            self._backoff,
        )
        self._loop.remove_reader(self._sock.fileno())
        self._resume = self._loop.call_later(self._backoff, self._resume_accepting)

    def _resume_accepting(self) -> None:
        self._resume = None
        if not self._stopped:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def _log_rate_limited(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last_log < _LOG_EVERY:
            self._unlogged += 1
            return
        if self._unlogged:
            fmt += " (and %d similar events since the last warning)"
            args = (*args, self._unlogged)
        logger.warning(fmt, *args)
        self._last_log = now
        self._unlogged = 0

    def _accepted(self, conn: socket.socket, address: tuple[Any, ...]) -> None:
        if self._stopped:
            conn.close()
            return
        peer = format_address(*address[:2])
        if self._handshaking >= self.max_handshakes:
            conn.close()  # before a byte is read or written: costs nothing to keep
            self.refused += 1
            self._log_rate_limited(
                "Closed a connection from %s to %s at once: %d connections are "
                "already in the handshake (max_handshakes)",
                peer,
                self.address,
                self._handshaking,
            )
            return
        try:
            stream = IOStream(conn)
        except Exception:
            conn.close()
            raise
        self._handshaking += 1
        self._spawn(self._authenticate_and_serve(stream, peer), name=f"serve {peer}")

    async def _authenticate_and_serve(self, stream: IOStream, peer: str) -> None:
        try:
            async with asyncio.timeout(self.handshake_timeout):
                await _server_handshake(stream, self._secret)
        except (AuthenticationError, StreamClosedError, TimeoutError) as exc:
            self._handshaking -= 1
            if isinstance(exc, TimeoutError):
                reason = f"no complete handshake within {self.handshake_timeout} s"
            elif isinstance(exc, AuthenticationError):
                reason = exc.reason
            else:
                reason = "the peer closed the connection during the handshake"
            self._log_rate_limited(
                "Refused connection from %s to %s: %s", peer, self.address, reason
            )
            stream.close()
            return
        except BaseException:
            self._handshaking -= 1
            stream.close()  # cancelled by stop(), or a bug: never leak the socket
            raise
        self._handshaking -= 1
        stream.set_nodelay(True)
        comm = TcpComm(stream, self.address, peer, **self._limits)
        await self._serve(comm)

    async def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            if self._resume is not None:
                self._resume.cancel()
            else:
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
        await self._stop_serving()


async def listen(
    location: str,
    handler: Handler,
    *,
    secret: bytes | None,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    max_message_size: int | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    max_handshakes: int = MAX_HANDSHAKES,
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
        max_handshakes=max_handshakes,
    )
