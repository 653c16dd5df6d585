"""Messages to frames and back: msgpack for structure, cloudpickle for the rest.

A message is built from dicts, lists, tuples, str, bytes, int, float, bool
and None; those are encoded by msgpack. Any other value (a function, an
exception, a numpy array, a set, an int beyond 64 bits, a subclass of a
builtin) is pickled with cloudpickle, protocol 5, and embedded as a msgpack
extension. Large buffers (pickle's out-of-band buffers and bytes-like values
of at least ``threshold`` bytes) leave the msgpack body and become frames of
their own, as memoryviews over the sender's memory: nothing is copied on the
sending side. The caller must not mutate such a buffer until the write that
carries it has completed.

Conventions the receiver sees:

- Lists and tuples are both msgpack arrays and **both decode as tuples**
  (``use_list=False``), so a task key ``("x-abc", 0)`` comes back equal and
  hashable, also as a dict key. Code must not rely on getting a list back.
- bytes stay bytes; bytearray and memoryview keep their type (a memoryview
  arrives as a flat view of bytes, whatever its format was).
- Map keys may be any decoded value that is hashable (str, int, tuple, ...).

Failing to build a message raises ``SerializationError`` before anything is
written. On the receiving side, bytes that are not valid msgpack or refer to
frames that do not exist raise ``ProtocolError`` (the stream cannot be
trusted any more); a pickle that fails to load (say, a module missing in this
process) raises ``SerializationError`` and the stream stays usable.

A value can also travel pickled on its own, as a ``Pickled`` (``pickle_value``):
the receiver's ``loads`` then gives the ``Pickled`` back, still packed, and unpickles
it when and where it chooses (``unpickle``): values a peer sends (which run the
user's code as they load, and may be large) are unpickled off the event loop, one by
one, each failing alone.

Unpickling runs arbitrary code: ``loads`` must only ever see frames from a
peer that passed the authentication handshake (``auth``).
"""

from __future__ import annotations

import mmap
import pickle
import struct
from collections.abc import Sequence
from typing import Any

import cloudpickle
import lz4.block
import msgpack

from ..process_meter import context_meter
from .errors import ProtocolError, SerializationError

__all__ = [
    "OUT_OF_BAND_THRESHOLD",
    "Pickled",
    "check_serializable",
    "dumps",
    "loads",
    "pickle_value",
    "unpickle",
]

OUT_OF_BAND_THRESHOLD = 64 * 1024

# msgpack extension type codes.
_EXT_FRAME = 1  # a bytes-like value sent as its own frame: kind, frame index
_EXT_INLINE = 2  # a small bytearray / memoryview: kind, then the bytes
_EXT_PICKLE = 3  # first buffer frame, number of buffers, then the pickle
_EXT_PICKLE_Z = 4  # as _EXT_PICKLE, then per buffer: codec and original size
_EXT_PICKLED = 5  # a Pickled: as _EXT_PICKLE_Z, with a flag: the pickle is a frame too

_KIND_BYTES, _KIND_BYTEARRAY, _KIND_MEMORYVIEW = 0, 1, 2
_KINDS = {bytes: _KIND_BYTES, bytearray: _KIND_BYTEARRAY, memoryview: _KIND_MEMORYVIEW}

_FRAME_REF = struct.Struct("<BI")
_PICKLE_REF = struct.Struct("<II")
_PICKLED_REF = struct.Struct("<IIB")  # first buffer frame, buffers, pickle in a frame
_CODEC_REF = struct.Struct("<BQ")
# per buffer: none (one frame), lz4 (one frame), lz4 in chunks (a frame per chunk)
_CODEC_NONE, _CODEC_LZ4, _CODEC_LZ4_CHUNKS = 0, 1, 2
# Large buffers are lz4-compressed when a sample shrinks to this fraction or less:
# random floats do not, so they go as they are; repetitive data (zeros, text, ids) does.
_COMPRESS_SAMPLE = 10_000
_COMPRESS_RATIO = 0.9
# lz4's block format takes at most this much input; bigger buffers go as they are.
_LZ4_MAX_INPUT = 0x7E000000
# A buffer over this is compressed in chunks of it, each a frame: python-lz4 copies
# what it decompressed while holding the GIL, and one 1.5 GB block held it for 10 s
# on a busy machine, long enough for the receiving worker to be taken for dead.
_LZ4_CHUNK = 8 << 20
# lz4 cannot expand data more than about 255 times: a larger announced size is a
# broken message, refused before the decompressor reserves it.
_LZ4_MAX_RATIO = 256

_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def _type_name(obj: object) -> str:
    cls = type(obj)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


class Pickled:
    """One value pickled on its own (``pickle_value``), for a receiver to ``unpickle``.

    ``data``: the pickle; ``buffers``: the frames of its out-of-band buffers, as
    ``codecs`` says (per buffer: codec, size before compression; a buffer compressed
    in chunks takes a frame per chunk). A message carries it whole, and a receiver
    gets it back as it was sent, unpickled by nobody yet.
    """

    __slots__ = ("buffers", "codecs", "data")

    def __init__(self, data: Any, buffers: list[Any], codecs: list[tuple[int, int]]) -> None:
        self.data = data
        self.buffers = buffers
        self.codecs = codecs

    @property
    def nbytes(self) -> int:
        """Bytes it takes in a message (the pickle and its buffers, as sent)."""
        return memoryview(self.data).nbytes + sum(memoryview(b).nbytes for b in self.buffers)


def pickle_value(
    obj: Any,
    what: str = "a value in the message",
    *,
    threshold: int = OUT_OF_BAND_THRESHOLD,
    compress: bool = True,
) -> Pickled:
    """``obj`` pickled with cloudpickle (protocol 5): buffers of ``threshold`` bytes
    or more out of band, lz4-compressed when that makes them notably smaller (with
    ``compress``). ``SerializationError`` naming ``what`` if it will not pickle."""
    with context_meter.meter("serialize"):
        return _pickle_value(obj, what, threshold, compress)


def _pickle_value(obj: Any, what: str, threshold: int, compress: bool) -> Pickled:
    buffers: list[memoryview] = []

    def keep_out_of_band(buffer: pickle.PickleBuffer) -> bool:
        # Returning True keeps the buffer inside the pickle stream.
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it in-band
            return True
        if raw.nbytes < threshold:
            return True
        buffers.append(raw)
        return False

    try:
        data = cloudpickle.dumps(obj, protocol=5, buffer_callback=keep_out_of_band)
    except Exception as exc:
        raise SerializationError(what, _type_name(obj), f"{type(exc).__name__}: {exc}") from exc
    codecs: list[tuple[int, int]] = []
    frames: list[Any] = []
    for raw in buffers:
        packed = _maybe_compress(raw) if compress else None
        if packed is None:
            codecs.append((_CODEC_NONE, raw.nbytes))
            frames.append(raw)
        else:
            codecs.append((_CODEC_LZ4_CHUNKS if len(packed) > 1 else _CODEC_LZ4, raw.nbytes))
            frames.extend(packed)
    return Pickled(data, frames, codecs)


def unpickle(value: Pickled, what: str = "a pickled value in a received message") -> Any:
    """The value a ``Pickled`` holds (``SerializationError`` naming ``what`` if it
    cannot be rebuilt here)."""
    with context_meter.meter("deserialize"):
        return _unpickle(value, what)


def _unpickle(value: Pickled, what: str) -> Any:
    frames = value.buffers
    buffers: list[Any] = []
    at = 0
    for codec, size in value.codecs:
        if codec == _CODEC_NONE:
            buffers.append(frames[at])
            at += 1
        elif codec == _CODEC_LZ4:
            with context_meter.meter("decompress"):
                buffers.append(lz4.block.decompress(frames[at], uncompressed_size=size))
            at += 1
        else:
            n = _chunks(size)
            with context_meter.meter("decompress"):
                buffers.append(_decompress_chunks(frames[at : at + n], size))
            at += n
    if not value.codecs:
        buffers = list(frames)
    try:
        return pickle.loads(value.data, buffers=buffers)
    except Exception as exc:
        raise SerializationError(
            what, "pickle", f"{type(exc).__name__}: {exc}", receiving=True
        ) from exc


def _chunks(size: int) -> int:
    return max(1, -(-size // _LZ4_CHUNK))


def _decompress_chunks(chunks: Sequence[Any], size: int) -> Any:
    """One buffer of ``size`` bytes from its lz4 chunks; the GIL is let go between
    them. An anonymous map, not a bytearray, which would be zeroed first (and hold
    the GIL all along)."""
    out = mmap.mmap(-1, size) if size else bytearray()
    at = 0
    for chunk in chunks:
        part = lz4.block.decompress(chunk, uncompressed_size=min(_LZ4_CHUNK, size - at))
        out[at : at + len(part)] = part
        at += len(part)
    if at != size:
        raise ProtocolError(reason=f"lz4 chunks of {at} bytes for a buffer of {size} bytes")
    return out


class _Encoder:
    """Rewrites one message into msgpack-native values, collecting frames."""

    def __init__(self, threshold: int, compress: bool = True) -> None:
        self.threshold = threshold
        self.compress = compress
        self.frames: list[bytes | memoryview] = [b""]  # [0] becomes the body

    def prepare(self, obj: Any) -> Any:
        # Exact type checks: a subclass (OrderedDict, IntEnum, np.float64)
        # is pickled so that it comes back as what it was.
        cls = type(obj)
        if cls is str or cls is float or cls is bool or obj is None:
            return obj
        if cls is int:
            return obj if _INT_MIN <= obj <= _INT_MAX else self.pickle(obj)
        if cls is dict:
            return {self.prepare(k): self.prepare(v) for k, v in obj.items()}
        if cls is tuple:  # stays a tuple: it may be a dict key
            return tuple([self.prepare(v) for v in obj])
        if cls is list:
            return [self.prepare(v) for v in obj]
        if cls is bytes or cls is bytearray or cls is memoryview:
            return self.bytes_like(obj)
        if cls is Pickled:
            return self.pickled(obj)
        return self.pickle(obj)

    def bytes_like(self, obj: bytes | bytearray | memoryview) -> Any:
        kind = _KINDS[type(obj)]
        view = memoryview(obj)
        if not view.contiguous:
            raise SerializationError(
                "a memoryview in the message", "memoryview", "it is not contiguous"
            )
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if view.nbytes >= self.threshold:
            self.frames.append(view)
            return msgpack.ExtType(_EXT_FRAME, _FRAME_REF.pack(kind, len(self.frames) - 1))
        if kind == _KIND_BYTES:
            return obj
        return msgpack.ExtType(_EXT_INLINE, bytes([kind]) + view.tobytes())

    def pickle(self, obj: Any) -> msgpack.ExtType:
        value = _pickle_value(obj, "a value in the message", self.threshold, self.compress)
        first = len(self.frames)
        self.frames.extend(value.buffers)
        if all(codec == _CODEC_NONE for codec, _ in value.codecs):
            head = _PICKLE_REF.pack(first, len(value.buffers))
            return msgpack.ExtType(_EXT_PICKLE, head + value.data)
        head = _PICKLE_REF.pack(first, len(value.codecs)) + _codecs(value)
        return msgpack.ExtType(_EXT_PICKLE_Z, head + value.data)

    def pickled(self, value: Pickled) -> msgpack.ExtType:
        """A value pickled already, carried as it is (the receiver gets a Pickled)."""
        first = len(self.frames)
        self.frames.extend(value.buffers)
        codecs = _codecs(value)
        head = _PICKLED_REF.pack
        n = len(value.codecs)
        if memoryview(value.data).nbytes >= self.threshold:  # a large pickle: a frame
            self.frames.append(value.data)
            return msgpack.ExtType(_EXT_PICKLED, head(first, n, 1) + codecs)
        return msgpack.ExtType(_EXT_PICKLED, head(first, n, 0) + codecs + bytes(value.data))


def _codecs(value: Pickled) -> bytes:
    """The codecs of a Pickled's buffers, as the wire has them (checked against its
    frames: a mismatch would make the receiver read the wrong frames)."""
    frames = sum(_chunks(size) if c == _CODEC_LZ4_CHUNKS else 1 for c, size in value.codecs)
    if frames != len(value.buffers):
        raise SerializationError("a pickled value", "Pickled", "its codecs do not match")
    return b"".join(_CODEC_REF.pack(codec, size) for codec, size in value.codecs)


def _maybe_compress(raw: memoryview) -> list[bytes] | None:
    """lz4 of a buffer worth compressing (one block, or chunks of ``_LZ4_CHUNK`` for a
    large one), else None (meters ``compress``)."""
    with context_meter.meter("compress"):
        sample = raw[:_COMPRESS_SAMPLE] if raw.nbytes > _COMPRESS_SAMPLE else raw
        if len(lz4.block.compress(sample, store_size=False)) > _COMPRESS_RATIO * sample.nbytes:
            return None
        if raw.nbytes <= _LZ4_CHUNK:
            packed = [lz4.block.compress(raw, store_size=False)]
        else:
            packed = [
                lz4.block.compress(raw[at : at + _LZ4_CHUNK], store_size=False)
                for at in range(0, raw.nbytes, _LZ4_CHUNK)
            ]
        size = sum(len(p) for p in packed)
        return packed if size <= _COMPRESS_RATIO * raw.nbytes else None


def dumps(
    msg: Any, *, threshold: int = OUT_OF_BAND_THRESHOLD, compress: bool = True
) -> list[bytes | memoryview]:
    """Encode ``msg`` as frames: the msgpack body, then out-of-band buffers.

    Buffers of at least ``threshold`` bytes become frames that share memory
    with the value they came from, or, with ``compress``, lz4-compressed copies
    of them when that makes them notably smaller.
    """
    with context_meter.meter("serialize"):
        return _dumps(msg, threshold, compress)


def _dumps(msg: Any, threshold: int, compress: bool) -> list[bytes | memoryview]:
    encoder = _Encoder(threshold, compress)
    try:
        prepared = encoder.prepare(msg)
    except RecursionError as exc:
        raise SerializationError(
            "the message", _type_name(msg), "it is nested too deeply or refers to itself"
        ) from exc
    try:
        encoder.frames[0] = msgpack.packb(prepared, use_bin_type=True)
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. msgpack's nesting limit
        raise SerializationError(
            "the message", _type_name(msg), f"{type(exc).__name__}: {exc}"
        ) from exc
    return encoder.frames


def loads(frames: Sequence[bytes | bytearray | memoryview | mmap.mmap]) -> Any:
    """Decode the frames of one message (as made by ``dumps``)."""
    with context_meter.meter("deserialize"):
        return _loads(frames)


def _loads(frames: Sequence[bytes | bytearray | memoryview | mmap.mmap]) -> Any:
    if not frames:
        raise ProtocolError(reason="a message needs at least one frame")

    def frame(index: int) -> Any:
        if not 0 < index < len(frames):
            raise ProtocolError(reason=f"message refers to frame {index} of {len(frames)}")
        return frames[index]

    def read_codecs(
        data: bytes, offset: int, first: int, count: int
    ) -> tuple[list[tuple[int, int]], list[Any]]:
        """The codecs of ``count`` buffers and their frames from ``first``, checked
        before anything is decompressed."""
        codecs = []
        at = first
        for i in range(count):
            codec, size = _CODEC_REF.unpack_from(data, offset + i * _CODEC_REF.size)
            if codec == _CODEC_NONE:
                frame(at)
                at += 1
            elif codec in (_CODEC_LZ4, _CODEC_LZ4_CHUNKS):
                n = 1 if codec == _CODEC_LZ4 else _chunks(size)
                if n > len(frames):
                    raise ProtocolError(reason=f"a buffer of {size} bytes in {n} chunks")
                for j in range(n):
                    packed = memoryview(frame(at + j)).nbytes
                    part = size if n == 1 else min(_LZ4_CHUNK, size - j * _LZ4_CHUNK)
                    if part > min(_LZ4_MAX_INPUT, _LZ4_MAX_RATIO * packed + 64):
                        raise ProtocolError(
                            reason=f"lz4 frame of {packed} bytes announces {part} bytes"
                        )
                at += n
            else:
                raise ProtocolError(reason=f"unknown compression codec {codec}")
            codecs.append((codec, size))
        return codecs, [frames[i] for i in range(first, at)]

    def ext_hook(code: int, data: bytes) -> Any:
        if code == _EXT_FRAME:
            kind, index = _FRAME_REF.unpack(data)
            return _as_kind(kind, frame(index))
        if code == _EXT_INLINE:
            return _as_kind(data[0], data[1:])
        if code == _EXT_PICKLE:
            first, count = _PICKLE_REF.unpack_from(data)
            buffers = [frame(i) for i in range(first, first + count)]
            value = Pickled(memoryview(data)[_PICKLE_REF.size :], buffers, [])
            return _unpickle(value, "a pickled value in a received message")
        if code == _EXT_PICKLE_Z:
            first, count = _PICKLE_REF.unpack_from(data)
            offset = _PICKLE_REF.size
            codecs, buffers = read_codecs(data, offset, first, count)
            offset += count * _CODEC_REF.size
            value = Pickled(memoryview(data)[offset:], buffers, codecs)
            return _unpickle(value, "a pickled value in a received message")
        if code == _EXT_PICKLED:
            first, count, in_frame = _PICKLED_REF.unpack_from(data)
            offset = _PICKLED_REF.size
            codecs, buffers = read_codecs(data, offset, first, count)
            offset += count * _CODEC_REF.size
            end = first + len(buffers)
            pickled = frame(end) if in_frame else memoryview(data)[offset:]
            return Pickled(pickled, buffers, codecs)
        raise ProtocolError(reason=f"unknown msgpack extension type {code}")

    try:
        return msgpack.unpackb(
            frames[0], ext_hook=ext_hook, use_list=False, raw=False, strict_map_key=False
        )
    except (ProtocolError, SerializationError):
        raise
    except Exception as exc:  # msgpack's errors, struct.error, bad kinds
        raise ProtocolError(reason=f"undecodable message: {type(exc).__name__}: {exc}") from exc


def _as_kind(kind: int, buffer: Any) -> bytes | bytearray | memoryview:
    if kind == _KIND_BYTES:
        return bytes(buffer)
    if kind == _KIND_BYTEARRAY:
        return buffer if type(buffer) is bytearray else bytearray(buffer)
    if kind == _KIND_MEMORYVIEW:
        return memoryview(buffer)
    raise ProtocolError(reason=f"unknown bytes kind {kind}")


def check_serializable(obj: object, what: str) -> None:
    """Raise ``SerializationError`` naming ``what`` if ``obj`` cannot be pickled.

    Call it where the user hands an object over (submit, scatter), so that
    the error points at their value instead of surfacing later in a stream.
    Large buffers are not copied: only the ability to pickle is checked.
    """
    try:
        cloudpickle.dumps(obj, protocol=5, buffer_callback=lambda _: False)
    except Exception as exc:
        raise SerializationError(what, _type_name(obj), f"{type(exc).__name__}: {exc}") from exc
