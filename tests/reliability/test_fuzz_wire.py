"""A bounded fuzz of the wire: framing, message decoding, the handshake (issue 17).

Properties:

- arbitrary bytes, and valid messages mutated, make the frame decoder and
  ``loads`` raise only their documented errors (``ProtocolError``, and
  ``SerializationError`` for a pickle that will not load);
- the decoder never reserves more than ``max_prealloc`` for what a peer
  merely announces: larger frames cost memory only as their bytes arrive;
- nothing a peer sends is unpickled before it passed the handshake, whatever
  part of the handshake it sends first (over a real TCP socket).

Examples are few and deadlines set, so this runs in CI. While fuzzing
``loads``, pickles load through an unpickler that refuses every global but a
few harmless ones, so that a mutated pickle cannot call anything.
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_cluster.engine.comm import (
    AuthenticationError,
    Comm,
    ProtocolError,
    SerializationError,
    connect,
    dumps,
    listen,
    loads,
    new_secret,
    serialize,
)
from kernel_cluster.engine.comm.auth import HELLO_MAGIC, HELLO_SIZE, PROOF_SIZE, Handshake
from kernel_cluster.engine.comm.frames import FrameDecoder, encode_header
from tests.engine.comm.helpers import raw_connect, recv_until_closed, run

FUZZ = settings(
    max_examples=150,
    deadline=500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# -- a restricted unpickler while fuzzing loads ------------------------------------

_ALLOWED_GLOBALS = {
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "bytearray"),
    ("numpy", "dtype"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


class _Refusing(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # type: ignore[no-untyped-def]
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"fuzz: global {module}.{name} refused")
        return super().find_class(module, name)


class _SafePickle:
    """Stands in for the ``pickle`` module inside ``serialize`` during the fuzz."""

    @staticmethod
    def loads(data, *, buffers=()):  # type: ignore[no-untyped-def]
        return _Refusing(io.BytesIO(data), buffers=buffers).load()


@pytest.fixture
def safe_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serialize, "pickle", _SafePickle)


# -- strategies -----------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),  # beyond 64 bits: pickled
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.complex_numbers(allow_nan=False),  # pickled
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=12,
)
big_buffers = st.sampled_from(
    [
        b"\x00" * 300,  # compressible: an lz4 frame
        bytes(range(256)) * 2,
        np.arange(40, dtype=np.int64),  # out-of-band pickle buffer
        bytearray(b"ab" * 200),
        memoryview(b"xyz" * 100),
    ]
)
messages = st.tuples(values, st.lists(big_buffers, max_size=3))


def encode(msg: object) -> bytes:
    frames = dumps(msg, threshold=128)
    return encode_header(frames) + b"".join(bytes(memoryview(f)) for f in frames)


def decode_all(data: bytes, chunk: int) -> list[object]:
    """Feed ``data`` in chunks; decode every message that comes out."""
    decoder = FrameDecoder(max_message_size=1 << 16, max_frames=64, max_prealloc=1 << 12)
    out = []
    for i in range(0, len(data), chunk):
        decoder.feed(data[i : i + chunk])
        for frames in decoder:
            out.append(loads(frames))
    return out


# -- decoder and loads --------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=600), chunk=st.integers(1, 700))
def test_arbitrary_bytes_raise_only_protocol_errors(safe_pickle, data: bytes, chunk: int) -> None:
    try:
        decode_all(data, chunk)
    except (ProtocolError, SerializationError):
        pass


@FUZZ
@given(
    data=st.binary(max_size=400),
    count=st.integers(0, 80),
    lengths=st.lists(st.integers(0, (1 << 64) - 1), max_size=8),
    chunk=st.integers(1, 500),
)
def test_arbitrary_frames_raise_only_protocol_errors(
    safe_pickle, data: bytes, count: int, lengths: list[int], chunk: int
) -> None:
    """A well-formed preamble with arbitrary counts, lengths and bodies."""
    wire = b"KCF1" + struct.pack("<I", count) + struct.pack(f"<{len(lengths)}Q", *lengths) + data
    try:
        decode_all(wire, chunk)
    except (ProtocolError, SerializationError):
        pass


@FUZZ
@given(
    msg=messages,
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    chunk=st.integers(1, 4096),
)
def test_mutated_messages_raise_only_documented_errors(
    safe_pickle, msg: object, flips: list[tuple[int, int]], cut: int, chunk: int
) -> None:
    wire = bytearray(encode(msg))
    for pos, byte in flips:
        wire[pos % len(wire)] = byte
    wire = wire[: max(1, cut % (len(wire) + 1))] if cut % 3 == 0 else wire
    try:
        decode_all(bytes(wire), chunk)
    except (ProtocolError, SerializationError):
        pass


def same(a: object, b: object) -> bool:
    """Equal as the wire promises: lists come back as tuples, the rest as they were."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, list | tuple):
        return type(b) is tuple and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, memoryview):
        return type(b) is memoryview and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


@settings(max_examples=60, deadline=500)
@given(msg=messages, chunk=st.integers(1, 4096))
def test_valid_messages_round_trip_in_any_chunking(msg: object, chunk: int) -> None:
    (out,) = decode_all(encode(msg), chunk)
    assert same(msg, out)


# -- memory per connection ---------------------------------------------------------

MAX_PREALLOC = 1 << 16


@settings(max_examples=80, deadline=1000)
@given(
    lengths=st.lists(st.integers(0, 1 << 40), min_size=1, max_size=16),
    sent=st.integers(0, 1 << 17),
)
def test_announced_sizes_reserve_at_most_the_prealloc_limit(lengths: list[int], sent: int) -> None:
    """Announcements cost at most ``max_prealloc`` (plus the bytes really sent)."""
    decoder = FrameDecoder(max_message_size=1 << 44, max_frames=16, max_prealloc=MAX_PREALLOC)
    header = b"KCF1" + struct.pack("<I", len(lengths)) + struct.pack(f"<{len(lengths)}Q", *lengths)
    tracemalloc.start()
    try:
        decoder.feed(header)
        decoder.feed(bytes(sent))
        _, peak = tracemalloc.get_traced_memory()
    except ProtocolError:
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # bytearrays are traced; mmaps (frames over max_prealloc) are not, and are
    # checked against the resident size in the next test
    assert peak <= MAX_PREALLOC + 2 * sent + 16 * 8 + 4096


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_a_huge_announced_frame_costs_only_what_arrives() -> None:
    decoder = FrameDecoder(max_message_size=1 << 40)  # default max_prealloc: 64 MiB
    before = _rss()
    decoder.feed(b"KCF1" + struct.pack("<IQ", 1, 16 << 30))  # 16 GiB announced
    chunk = bytes(1 << 20)
    for _ in range(8):
        decoder.feed(chunk)
    grown = _rss() - before
    assert grown < 48 << 20, f"resident size grew {grown >> 20} MiB for 8 MiB received"
    assert decoder.bytes_needed == (16 << 30) - (8 << 20)


def test_a_frame_too_large_to_map_is_a_protocol_error() -> None:
    decoder = FrameDecoder(max_message_size=1 << 62)
    with pytest.raises(ProtocolError, match="cannot reserve"):
        decoder.feed(b"KCF1" + struct.pack("<IQ", 1, 1 << 61))


def test_lz4_frame_announcing_a_huge_size_is_refused_before_decompressing() -> None:
    frames = dumps(np.zeros(100_000, dtype=np.uint8), threshold=1)
    body = bytearray(frames[0])
    # the codec record (<BQ) follows the pickle reference (<II) in the extension
    at = bytes(body).index(struct.pack("<BQ", 1, 100_000))
    body[at + 1 : at + 9] = struct.pack("<Q", 0x7E000000)  # 2 GiB, within lz4's range
    with pytest.raises(ProtocolError, match="announces"):
        loads([body, *[bytearray(memoryview(f)) for f in frames[1:]]])


# -- the handshake -------------------------------------------------------------------


@FUZZ
@given(hello=st.binary(max_size=HELLO_SIZE + 8), proof=st.binary(max_size=PROOF_SIZE + 8))
def test_arbitrary_handshake_bytes_raise_only_authentication_errors(
    hello: bytes, proof: bytes
) -> None:
    server = Handshake(new_secret(), "server")
    try:
        server.receive_hello(hello)
        server.check_proof(proof)
    except AuthenticationError:
        return
    pytest.fail("a handshake with another secret was accepted")


class MakeDir:
    """Unpickling this creates a directory: proof that a payload was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.mkdir, (self.path,))


_prefixes = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=80),  # garbage
    st.builds(lambda n: Handshake(new_secret(), "client").hello[:n], st.integers(1, HELLO_SIZE)),
    st.builds(  # a valid hello, then some or all of a wrong proof
        lambda n: Handshake(new_secret(), "client").hello + os.urandom(n),
        st.integers(0, PROOF_SIZE),
    ),
    st.just(HELLO_MAGIC),
)


@settings(max_examples=25, deadline=5000)
@given(prefix=_prefixes)
def test_nothing_is_unpickled_before_the_handshake(tmp_path_factory, prefix: bytes) -> None:
    """Whatever part of a handshake precedes a live pickle, it is never loaded."""
    tmp = tmp_path_factory.mktemp("fuzz")
    marker = tmp / "unpickled"
    payload = encode({"op": "run", "x": MakeDir(marker)}) * 4  # longer than any handshake
    handled: list[Comm] = []

    async def handler(comm: Comm) -> None:
        handled.append(comm)
        await comm.read()

    async def main() -> None:
        secret = new_secret()
        listener = await listen("tcp://", handler, secret=secret, handshake_timeout=2)
        try:
            loop = asyncio.get_running_loop()
            sock = await raw_connect(listener.address)
            try:
                await loop.sock_sendall(sock, prefix + payload)
                received = await recv_until_closed(sock, timeout=5)
            finally:
                sock.close()
            assert len(received) == HELLO_SIZE  # the server's hello, never its proof
            assert handled == []

            # control: the same payload, authenticated, is unpickled
            comm = await connect(listener.address, secret=secret)
            await comm.write({"op": "run", "x": MakeDir(tmp / "control")})
            for _ in range(200):
                if (tmp / "control").exists():
                    break
                await asyncio.sleep(0.01)
            comm.abort()
        finally:
            await listener.stop()

    run(main())
    assert (tmp / "control").exists()
    assert not marker.exists()
