"""The sans-I/O frame codec, fed by hand: no sockets, no loop."""

from __future__ import annotations

import struct

import pytest

from kernel_cluster.engine.comm import ProtocolError
from kernel_cluster.engine.comm.frames import MAGIC, FrameDecoder, encode_header

pytestmark = pytest.mark.timeout(30)


def wire(*frames: bytes) -> bytes:
    return encode_header(frames) + b"".join(frames)


MESSAGES = [
    [b"hello"],
    [b"body", b"", b"x" * 1000],  # a zero-length frame in the middle
    [b""],
]
STREAM = b"".join(wire(*m) for m in MESSAGES)


def decode_all(decoder: FrameDecoder) -> list[list[bytes]]:
    return [[bytes(f) for f in msg] for msg in decoder]


def test_round_trip_whole_stream_in_one_chunk():
    decoder = FrameDecoder()
    decoder.feed(STREAM)
    assert decode_all(decoder) == MESSAGES
    assert not decoder.in_message
    decoder.eof()  # clean end between messages


def test_byte_at_a_time():
    decoder = FrameDecoder()
    got = []
    for i in range(len(STREAM)):
        decoder.feed(STREAM[i : i + 1])
        got.extend(decode_all(decoder))
    assert got == MESSAGES


@pytest.mark.parametrize("split", range(0, len(wire(b"ab", b"cde")) + 1))
def test_every_split_point(split):
    data = wire(b"ab", b"cde") + wire(b"f")
    decoder = FrameDecoder()
    decoder.feed(data[:split])
    decoder.feed(data[split:])
    assert decode_all(decoder) == [[b"ab", b"cde"], [b"f"]]


def test_frames_are_separate_writable_bytearrays():
    decoder = FrameDecoder()
    decoder.feed(wire(b"a" * 10, b"b" * 20))
    msg = decoder.next_message()
    assert [type(f) for f in msg] == [bytearray, bytearray]
    assert decoder.next_message() is None


def test_buffer_protocol_path_reads_into_the_frame():
    # What the TCP comm does for large frames: write straight into get_buffer().
    payload = bytes(range(256)) * 100
    data = wire(b"head", payload)
    decoder = FrameDecoder()
    pos = 0
    while pos < len(data):
        target = decoder.get_buffer()
        assert len(target) == decoder.bytes_needed > 0
        n = min(len(target), 777)
        target[:n] = data[pos : pos + n]
        decoder.buffer_updated(n)
        pos += n
    assert decode_all(decoder) == [[b"head", payload]]


def test_oversize_message_rejected_before_allocation():
    decoder = FrameDecoder(max_message_size=1000)
    huge = struct.pack("<4sI", MAGIC, 2) + struct.pack("<2Q", 10, 2**62)
    with pytest.raises(ProtocolError, match="max_message_size"):
        decoder.feed(huge)
    # The stream is out of sync now: the decoder refuses to go on.
    with pytest.raises(ProtocolError):
        decoder.feed(wire(b"ok"))


def test_limit_is_inclusive():
    decoder = FrameDecoder(max_message_size=10)
    decoder.feed(wire(b"12345", b"67890"))
    assert decode_all(decoder) == [[b"12345", b"67890"]]


@pytest.mark.parametrize("count", [0, 5])
def test_frame_count_out_of_range_rejected(count):
    decoder = FrameDecoder(max_frames=4)
    with pytest.raises(ProtocolError, match="frames"):
        decoder.feed(struct.pack("<4sI", MAGIC, count))


def test_malformed_magic_rejected():
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="magic"):
        decoder.feed(b"GET / HTTP/1.1\r\n\r\n")


@pytest.mark.parametrize("cut", [3, 8, 12, 20, len(wire(b"abc", b"defgh")) - 1])
def test_truncated_message_rejected_at_eof(cut):
    decoder = FrameDecoder()
    decoder.feed(wire(b"abc", b"defgh")[:cut])
    assert decoder.in_message
    with pytest.raises(ProtocolError, match="middle of a message"):
        decoder.eof()


def test_complete_messages_survive_a_truncated_tail():
    decoder = FrameDecoder()
    decoder.feed(wire(b"whole") + wire(b"cut off")[:-2])
    assert decoder.next_message() == [bytearray(b"whole")]
    with pytest.raises(ProtocolError):
        decoder.eof()


def test_encoder_refuses_what_the_decoder_would_reject():
    with pytest.raises(ValueError, match="max_message_size"):
        encode_header([b"x" * 11], max_message_size=10)
    with pytest.raises(ValueError, match="frames"):
        encode_header([b""] * 5, max_frames=4)
    with pytest.raises(ValueError, match="frames"):
        encode_header([])


def test_header_accepts_memoryviews_of_any_format():
    import array

    values = array.array("d", [1.0, 2.0, 3.0])
    frames = [b"h", memoryview(values)]  # 3 items, 24 bytes
    decoder = FrameDecoder()
    decoder.feed(encode_header(frames) + b"h" + values.tobytes())
    assert decode_all(decoder) == [[b"h", values.tobytes()]]
