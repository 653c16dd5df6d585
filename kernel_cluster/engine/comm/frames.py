"""Sans-I/O framing: messages as length-prefixed groups of frames.

A message is a list of frames (byte buffers): the msgpack body first, then
any out-of-band buffers (see ``serialize``). On the wire::

    b"KCF1"  n (uint32 LE)          8-byte preamble
    len_0 ... len_{n-1} (uint64 LE)  8*n bytes
    frame_0 ... frame_{n-1}         the bytes themselves

``encode_header`` builds the first two parts; the frames follow as they are,
so a large buffer is handed to the socket without being copied into a
bigger one. ``FrameDecoder`` does the reverse and does no I/O at all: feed it
bytes, take complete messages out. Any violation of the format raises
``ProtocolError`` and leaves the decoder unusable (the stream is out of sync:
the only safe reaction is to close the connection).

Limits, and where they belong. Nothing reaches the decoder before the peer
passed the authentication handshake (``auth``), which reads fixed-size
pieces: an unauthenticated peer can make us allocate a few dozen bytes per
connection, no more. After the handshake the peer is trusted (it could send
us a pickle), so the limits only stop a broken stream or a bug from taking
the process down:

- ``max_message_size`` (64 GiB unless ``$KERNEL_CLUSTER_MAX_MESSAGE_SIZE``
  says otherwise) bounds the sum of the announced frame sizes; a sender
  refuses to send more (``MessageTooLargeError``, nothing written).
- ``max_prealloc`` bounds what an *announcement* costs: a frame up to that
  size gets its buffer (a bytearray) at once; a larger one gets an anonymous
  private memory map, whose pages the kernel commits only as the bytes
  arrive. Memory held for a connection is thus at most what the peer really
  sent, plus ``max_prealloc``. A multi-gigabyte array still arrives in one
  contiguous, writable buffer, as numpy needs it, without a copy.

Besides ``feed``, the decoder offers the ``get_buffer`` / ``buffer_updated``
pair of asyncio's BufferedProtocol, so a transport can read large frames
straight into their final buffer instead of copying them out of a chunk.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TypeAlias

from .errors import MAX_MESSAGE_SIZE_ENV, MessageTooLargeError, ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAMES",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_MAX_PREALLOC",
    "MAGIC",
    "MAX_MESSAGE_SIZE_ENV",
    "FrameDecoder",
    "encode_header",
    "max_message_size_setting",
]

MAGIC = b"KCF1"
DEFAULT_MAX_MESSAGE_SIZE = 1 << 36  # 64 GiB, all frames together
DEFAULT_MAX_PREALLOC = 64 << 20  # larger frames are committed as their bytes arrive
DEFAULT_MAX_FRAMES = 16_384
# MAX_MESSAGE_SIZE_ENV (defined in errors, whose message names it) overrides
# DEFAULT_MAX_MESSAGE_SIZE for the comms a process opens from then on (a byte count).
# Worker processes inherit it from the kernel, so both ends agree.

# Anything exposing the buffer protocol; collections.abc.Buffer needs 3.12.
Buffer: TypeAlias = bytes | bytearray | memoryview
# A received frame: writable, contiguous, supports the buffer protocol.
Frame: TypeAlias = bytearray | mmap.mmap

_PREAMBLE = struct.Struct("<4sI")
_LENGTH = struct.Struct("<Q")

# Decoder stages: what the bytes currently being collected are.
_STAGE_PREAMBLE = 0
_STAGE_LENGTHS = 1
_STAGE_BODY = 2


def max_message_size_setting() -> int:
    """The message size limit in force: ``$KERNEL_CLUSTER_MAX_MESSAGE_SIZE`` or the default."""
    value = os.environ.get(MAX_MESSAGE_SIZE_ENV)
    if not value:
        return DEFAULT_MAX_MESSAGE_SIZE
    try:
        limit = int(value)
    except ValueError:
        raise ValueError(
            f"environment variable {MAX_MESSAGE_SIZE_ENV}={value!r} must be a byte count"
        ) from None
    if limit < 1024:
        raise ValueError(f"{MAX_MESSAGE_SIZE_ENV}={limit} is too small; use at least 1024")
    return limit


def _nbytes(frame: Buffer) -> int:
    return memoryview(frame).nbytes


def encode_header(
    frames: Sequence[Buffer],
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    max_frames: int = DEFAULT_MAX_FRAMES,
) -> bytes:
    """The preamble and length table that precede ``frames`` on the wire.

    Raises ``MessageTooLargeError`` (over ``max_message_size``) or ``ValueError``
    (too many frames) when the receiver would reject the message and drop the
    connection; the caller then writes nothing.
    """
    sizes = [_nbytes(f) for f in frames]
    if not 1 <= len(sizes) <= max_frames:
        raise ValueError(f"a message must have between 1 and {max_frames} frames, not {len(sizes)}")
    total = sum(sizes)
    if total > max_message_size:
        raise MessageTooLargeError("the message", total, max_message_size)
    return _PREAMBLE.pack(MAGIC, len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)


class FrameDecoder:
    """Incremental decoder: bytes in, complete messages (lists of frames) out.

    Each frame of a decoded message is its own writable buffer (a
    ``bytearray``, or an ``mmap`` above ``max_prealloc`` bytes), so values
    built on it (a numpy array from an out-of-band buffer) are writable and
    keep only their own frame alive.
    """

    def __init__(
        self,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_frames: int = DEFAULT_MAX_FRAMES,
        max_prealloc: int = DEFAULT_MAX_PREALLOC,
    ) -> None:
        self.max_message_size = max_message_size
        self.max_frames = max_frames
        self.max_prealloc = max_prealloc
        self._ready: deque[list[Frame]] = deque()
        self._error: ProtocolError | None = None
        self._start_message()

    def _start_message(self) -> None:
        self._stage = _STAGE_PREAMBLE
        self._target: Frame = bytearray(_PREAMBLE.size)
        self._filled = 0
        self._lengths: tuple[int, ...] = ()
        self._frames: list[Frame] = []

    # -- input ------------------------------------------------------------------------

    def feed(self, data: Buffer) -> None:
        """Consume ``data``, which may hold any part of any number of messages."""
        view = memoryview(data).cast("B")
        pos, end = 0, len(view)
        while pos < end:
            target = self.get_buffer()
            n = min(len(target), end - pos)
            target[:n] = view[pos : pos + n]
            pos += n
            self.buffer_updated(n)

    def get_buffer(self) -> memoryview:
        """A writable view of the bytes the decoder is waiting for next.

        It is never empty. Write into a prefix of it, then call
        ``buffer_updated`` with the number of bytes written, before calling
        any other method.
        """
        if self._error is not None:
            raise self._error
        return memoryview(self._target)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        """Account for ``nbytes`` written into the last ``get_buffer()`` view."""
        if self._error is not None:
            raise self._error
        self._filled += nbytes
        if self._filled > len(self._target):
            raise ValueError(f"buffer_updated({nbytes}) overflows the buffer handed out")
        if self._filled == len(self._target):
            try:
                self._advance()
            except ProtocolError as exc:
                self._error = exc
                raise

    @property
    def bytes_needed(self) -> int:
        """How many bytes complete the piece being collected (the preamble,
        the length table or one frame). Transports use it to pick a read size."""
        return len(self._target) - self._filled

    @property
    def in_message(self) -> bool:
        """True when part of a message has arrived but not all of it."""
        return self._stage != _STAGE_PREAMBLE or self._filled > 0

    def eof(self) -> None:
        """Tell the decoder the stream ended; raises if it ended mid-message.

        Complete messages already decoded stay available.
        """
        if self._error is None and self.in_message:
            self._error = ProtocolError(
                reason="connection closed in the middle of a message "
                f"(waiting for {self.bytes_needed} more bytes of its "
                f"{('preamble', 'length table', 'frames')[self._stage]})"
            )
        if self._error is not None:
            raise self._error

    # -- output -----------------------------------------------------------------------

    def next_message(self) -> list[Frame] | None:
        """The oldest complete message not yet taken, or None."""
        return self._ready.popleft() if self._ready else None

    def __iter__(self) -> Iterator[list[Frame]]:
        """Take every complete message decoded so far, oldest first."""
        while self._ready:
            yield self._ready.popleft()

    # -- state machine ----------------------------------------------------------------

    def _advance(self) -> None:
        # The current target is full. Move to the next piece; zero-length
        # frames complete at once, hence the loop.
        while self._filled == len(self._target):
            if self._stage == _STAGE_PREAMBLE:
                self._parse_preamble()
            elif self._stage == _STAGE_LENGTHS:
                self._parse_lengths()
            else:
                self._frames.append(self._target)
                if len(self._frames) == len(self._lengths):
                    self._ready.append(self._frames)
                    self._start_message()
                    return
                self._target = self._new_frame(self._lengths[len(self._frames)])
                self._filled = 0

    def _parse_preamble(self) -> None:
        magic, count = _PREAMBLE.unpack(self._target)
        if magic != MAGIC:
            raise ProtocolError(
                reason=f"malformed message header: expected magic {MAGIC!r}, got {magic!r}"
            )
        if not 1 <= count <= self.max_frames:
            raise ProtocolError(
                reason=f"message announces {count} frames; the limit is 1 to {self.max_frames}"
            )
        self._stage = _STAGE_LENGTHS
        self._target = bytearray(count * _LENGTH.size)
        self._filled = 0

    def _parse_lengths(self) -> None:
        count = len(self._target) // _LENGTH.size
        lengths = struct.unpack(f"<{count}Q", self._target)
        total = sum(lengths)
        if total > self.max_message_size:
            raise ProtocolError(
                reason=f"message announces {total} bytes; "
                f"max_message_size is {self.max_message_size}"
            )
        self._stage = _STAGE_BODY
        self._lengths = lengths
        self._target = self._new_frame(lengths[0])
        self._filled = 0

    def _new_frame(self, size: int) -> Frame:
        if size <= self.max_prealloc:
            return bytearray(size)
        try:
            # Private and anonymous: pages are committed as they are written,
            # and given back to the system when the last view of it goes.
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
        except (OSError, ValueError, OverflowError) as exc:
            raise ProtocolError(
                reason=f"cannot reserve {size} bytes for an announced frame: {exc}"
            ) from exc
