"""Messages to frames and back, without any transport."""

from __future__ import annotations

import collections
import pickle
import threading

import numpy as np
import pytest

from kernel_cluster.engine.comm import (
    AuthenticationError,
    CommClosedError,
    CommError,
    ProtocolError,
    SerializationError,
    check_serializable,
    dumps,
    loads,
)
from kernel_cluster.engine.comm.serialize import OUT_OF_BAND_THRESHOLD

pytestmark = pytest.mark.timeout(30)

BIG = OUT_OF_BAND_THRESHOLD


def through_the_wire(msg):
    """dumps, then loads from private bytearrays, as a receiver would."""
    return loads([bytearray(f) for f in dumps(msg)])


def inc(x):
    return x + 1


def test_nested_message_round_trip():
    msg = {
        "op": "compute",
        "key": ("x-abc", 0),
        ("y", 1): {"deps": [("x-abc", 0), "z"], "nbytes": 2**40, "neg": -(2**62)},
        "payload": b"\x00\xffraw",
        "none": None,
        "floats": (0.5, float("inf"), -0.0),
        "flags": [True, False],
        7: "int key",
    }
    out = through_the_wire(msg)
    assert out["key"] == ("x-abc", 0)
    assert out[("y", 1)]["deps"] == (("x-abc", 0), "z")  # lists decode as tuples
    assert out[("y", 1)]["nbytes"] == 2**40
    assert type(out["payload"]) is bytes and out["payload"] == b"\x00\xffraw"
    assert out["none"] is None
    assert out["floats"] == (0.5, float("inf"), -0.0)
    assert out["flags"] == (True, False)
    assert out[7] == "int key"


def test_values_msgpack_cannot_hold_are_pickled():
    msg = {
        "set": {1, 2},
        "huge_int": 2**100,
        "exc": ValueError("boom", 3),
        "ordered": collections.OrderedDict(a=1),
        "np_scalar": np.float64(1.5),
        "func": inc,
        "lambda": lambda x: x * 2,
    }
    out = through_the_wire(msg)
    assert out["set"] == {1, 2}
    assert out["huge_int"] == 2**100
    assert type(out["exc"]) is ValueError and out["exc"].args == ("boom", 3)
    assert type(out["ordered"]) is collections.OrderedDict
    assert type(out["np_scalar"]) is np.float64
    assert out["func"](1) == 2
    assert out["lambda"](4) == 8


@pytest.mark.parametrize("size", [10, BIG])
def test_bytes_like_keep_their_type(size):
    out = through_the_wire(
        {"b": b"b" * size, "ba": bytearray(b"a" * size), "mv": memoryview(b"m" * size)}
    )
    assert type(out["b"]) is bytes and out["b"] == b"b" * size
    assert type(out["ba"]) is bytearray and out["ba"] == b"a" * size
    assert type(out["mv"]) is memoryview and out["mv"] == b"m" * size


def test_large_bytes_travel_out_of_band_without_copy():
    payload = b"x" * (2 * BIG)
    frames = dumps({"data": payload})
    assert len(frames) == 2
    assert len(frames[0]) < 100  # the body holds a reference, not the bytes
    assert isinstance(frames[1], memoryview) and frames[1].obj is payload


def test_numpy_array_frame_shares_memory_with_the_array():
    array = np.random.default_rng(1).random(1_000_000)  # 8 MB that lz4 cannot shrink
    frames = dumps({"op": "data", "value": array})
    assert any(np.shares_memory(np.asarray(f), array) for f in frames[1:])
    assert memoryview(frames[0]).nbytes < 1000
    # without compression even a compressible array is sent from its own memory
    ordered = np.arange(1_000_000, dtype="f8")
    frames = dumps({"value": ordered}, compress=False)
    assert any(np.shares_memory(np.asarray(f), ordered) for f in frames[1:])


def test_compressible_buffers_travel_compressed_and_come_back_exact():
    array = np.zeros(1_000_000)  # 8 MB of zeros
    frames = dumps({"value": array, "noise": np.random.default_rng(2).random(20_000)})
    sent = sum(memoryview(f).nbytes for f in frames)
    assert sent < 8_000_000 // 10 + 200_000  # zeros shrink; the noise does not
    out = loads(frames)
    np.testing.assert_array_equal(out["value"], array)
    assert out["noise"].shape == (20_000,)


def test_numpy_array_round_trip_is_writable():
    array = np.random.default_rng(0).random((500, 300))
    fortran = np.asfortranarray(array)
    out = through_the_wire({"c": array, "f": fortran, "small": np.arange(3)})
    np.testing.assert_array_equal(out["c"], array)
    np.testing.assert_array_equal(out["f"], fortran)
    assert out["c"].flags.writeable
    out["c"][0, 0] = -1.0  # received arrays are the receiver's own


def test_non_contiguous_array_is_copied_in_band():
    array = np.arange(200_000)[::2]
    frames = dumps(array)
    out = loads(frames)
    np.testing.assert_array_equal(out, array)


def test_small_buffers_stay_in_the_body():
    assert len(dumps({"a": np.arange(10), "b": b"x" * 100})) == 1


def test_unpicklable_value_names_its_type():
    with pytest.raises(SerializationError, match="lock") as info:
        dumps({"op": "compute", "arg": threading.Lock()})
    assert info.value.type_name == "_thread.lock"
    assert not info.value.receiving


def test_self_referencing_message_is_rejected_cleanly():
    msg: dict = {}
    msg["self"] = msg
    with pytest.raises(SerializationError, match="nested too deeply"):
        dumps(msg)


def test_undecodable_msgpack_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="undecodable"):
        loads([bytearray(b"\xc1")])  # 0xc1 is never used by msgpack
    with pytest.raises(ProtocolError):
        loads([])


def test_reference_to_a_missing_frame_is_a_protocol_error():
    frames = dumps({"data": b"x" * BIG})
    with pytest.raises(ProtocolError, match="frame 1 of 1"):
        loads(frames[:1])


def test_pickle_that_fails_to_load_is_a_serialization_error():
    frames = dumps({"value": Unloadable()})
    with pytest.raises(SerializationError, match="deserialize") as info:
        loads(frames)
    assert info.value.receiving


class Unloadable:
    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise ImportError("module 'not_here' is not installed")


# -- check_serializable --------------------------------------------------------


def test_check_serializable_accepts_lambdas_and_arrays():
    check_serializable(lambda x: x + 1, "the function of task 'inc-1'")
    check_serializable(np.zeros(10**6), "an argument of task 'sum-1'")


def test_check_serializable_names_what_and_says_what_to_do():
    with pytest.raises(SerializationError) as info:
        check_serializable(threading.Lock(), "an argument of task 'inc-123'")
    err = info.value
    assert isinstance(err, TypeError)
    assert err.what == "an argument of task 'inc-123'"
    assert err.type_name == "_thread.lock"
    assert "cannot pickle" in err.reason
    text = str(err)
    assert "an argument of task 'inc-123'" in text
    assert "_thread.lock" in text
    assert "module level" in text and "locks" in text
    assert isinstance(err.__cause__, TypeError)


def test_check_serializable_on_a_generator():
    with pytest.raises(SerializationError, match="generator"):
        check_serializable((i for i in range(3)), "the argument of task 'g-1'")


# -- errors survive pickling ---------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        CommError("tcp://127.0.0.1:1", "generic"),
        CommClosedError("tcp://127.0.0.1:1", "the peer closed the connection"),
        CommClosedError(),
        ProtocolError("tcp://127.0.0.1:2", "malformed message header"),
        ProtocolError(reason="no address"),
        AuthenticationError("tcp://127.0.0.1:3", "wrong secret"),
        SerializationError("the function of task 'f-1'", "_thread.lock", "TypeError: no"),
        SerializationError("a pickled value", "pickle", "ImportError: x", receiving=True),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_errors_travel_inside_messages():
    out = through_the_wire({"exception": CommClosedError("tcp://h:1", "gone")})
    assert isinstance(out["exception"], CommClosedError)
    assert out["exception"].address == "tcp://h:1"


def test_comm_errors_are_oserrors_but_auth_is_not_closed():
    assert issubclass(CommClosedError, OSError)
    assert issubclass(ProtocolError, CommClosedError)
    assert not issubclass(AuthenticationError, CommClosedError)
    assert issubclass(SerializationError, TypeError)
