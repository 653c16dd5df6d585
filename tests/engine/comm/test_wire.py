"""The wire codec (engine/wire.py): every message survives the trip, and what is not a
message is refused with an error that says what is wrong."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_cluster.core import scheduler_messages, worker_messages
from kernel_cluster.engine import wire
from kernel_cluster.engine.comm import dumps, loads
from kernel_cluster.engine.wire import (
    MESSAGES,
    NOT_SENT,
    SCHEDULER_EVENTS,
    TO_SCHEDULER_EVENT,
    Heartbeat,
    WireError,
    decode,
    decode_batch,
    encode,
    encode_batch,
)

# values that msgpack gives back equal (it turns lists into tuples, so none here);
# ints past 64 bits and sets are pickled by the comm layer
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.frozensets(st.integers(), max_size=3)
)
_hashable = _leaves | st.tuples(st.text(max_size=10), st.integers())  # a task key
_values = st.recursive(
    _leaves | _hashable,
    lambda inner: (
        st.lists(inner, max_size=4).map(tuple) | st.dictionaries(_hashable, inner, max_size=4)
    ),
    max_leaves=12,
)


def _messages(cls: type) -> st.SearchStrategy:
    fields = {f.name: _values for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


def test_every_message_that_crosses_is_registered_once():
    ops = [cls.op for cls in MESSAGES]
    assert len(ops) == len(set(ops)), ops
    # the state machines' instructions that the shells send are the messages themselves
    for cls in [
        scheduler_messages.ComputeTask,
        scheduler_messages.ComputeTaskAlone,
        scheduler_messages.FreeKeys,
        scheduler_messages.SetClusterBusy,
        worker_messages.SendTaskFinished,
        worker_messages.SendTaskErred,
        worker_messages.SendReplicasAdded,
        worker_messages.SendDependencyUnavailable,
        worker_messages.SendCancelledTasksEnded,
    ]:
        assert cls in MESSAGES
    for cls in MESSAGES:
        assert dataclasses.is_dataclass(cls) and "__slots__" in vars(cls), cls
        assert "op" not in {f.name for f in dataclasses.fields(cls)}  # a class attribute


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda cls: cls.op)
@given(data=st.data())
def test_round_trip_through_the_comm_layer(cls, data):
    msg = data.draw(_messages(cls))
    raw = encode(msg)
    assert raw["op"] == cls.op
    not_sent = NOT_SENT.get(cls, ())
    assert set(raw) == {"op"} | {f.name for f in dataclasses.fields(cls)} - set(not_sent)
    # whom it is for is the channel's business: that arrives empty
    expected = dataclasses.replace(msg, **dict.fromkeys(not_sent, ""))
    # in memory (what a test or a local reader sees) and over TCP (msgpack + pickle)
    assert decode(raw) == expected and type(decode(raw)) is cls
    back = decode(loads(dumps(raw)))
    assert back == expected and type(back) is cls
    # a batch, as StreamChannel sends it and the reading loop decodes it
    batch = encode_batch([msg, msg])
    assert decode_batch(loads(dumps(batch)), "test", "test") == [expected, expected]


def test_compute_task_alone_is_not_taken_for_its_base_class():
    alone = scheduler_messages.ComputeTaskAlone("w", "k", b"spec", {}, {}, (0,), "k", None)
    assert encode(alone)["op"] == "compute-task-alone"
    assert type(decode(encode(alone))) is scheduler_messages.ComputeTaskAlone


def test_whom_an_instruction_is_for_is_not_sent():
    free = scheduler_messages.FreeKeys("tcp://127.0.0.1:1234", ["a"], "s-1", running=True)
    raw = encode(free)
    assert raw == {"op": "free-keys", "keys": ["a"], "stimulus_id": "s-1", "running": True}
    assert decode(raw) == scheduler_messages.FreeKeys("", ["a"], "s-1", running=True)
    with pytest.raises(WireError, match="'free-keys' has unknown fields 'worker'"):
        decode({**raw, "worker": "tcp://127.0.0.1:1234"})


def test_a_bad_message_in_a_batch_is_logged_and_left_out(caplog):
    good = encode(Heartbeat(1.0))
    with caplog.at_level(logging.WARNING, logger="kernel_cluster"):
        msgs = decode_batch([good, {"op": "nope"}, good], "The scheduler", "tcp://w")
        assert decode_batch("not a batch", "The scheduler", "tcp://w") == []
    assert msgs == [Heartbeat(1.0), Heartbeat(1.0)]
    assert "The scheduler ignored a message from tcp://w: unknown message op 'nope'" in caplog.text
    assert "The scheduler ignored a batch from tcp://w that is no list: 'not a batch'" in (
        caplog.text
    )


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"op": "no-such-op"}, "unknown message op 'no-such-op'"),
        ({"key": "x"}, "a message without an 'op': {'key': 'x'}"),
        (["heartbeat"], "a message must be a dict with an 'op', got ['heartbeat']"),
        ("heartbeat", "a message must be a dict with an 'op', got 'heartbeat'"),
        ({"op": ["unhashable"]}, "unknown message op ['unhashable']"),
        ({"op": "task-finished", "key": "x"}, "message 'task-finished' lacks fields"),
        (
            {"op": "heartbeat", "sent": 1.0, "cpu": 3},
            "message 'heartbeat' has unknown fields 'cpu'",
        ),
        # as many entries as the fields, but one misnamed: both are said
        (
            {"op": "worker-paused", "pause": True},
            "message 'worker-paused' has unknown fields 'pause'",
        ),
    ],
)
def test_what_is_not_a_message_gets_a_clear_error(raw, error):
    with pytest.raises(WireError) as info:
        decode(raw)
    assert error in str(info.value)


def test_a_missing_field_is_named_and_one_with_a_default_may_be_left_out():
    with pytest.raises(WireError, match="'task-finished' lacks fields 'nbytes', 'type_name'"):
        decode({"op": "task-finished", "key": "x", "startstops": (), "thread": None})
    assert decode({"op": "heartbeat", "sent": 2.0}) == Heartbeat(2.0)


def test_encode_refuses_what_is_not_a_message():
    with pytest.raises(TypeError, match="dict is not a wire message"):
        encode({"op": "heartbeat"})
    with pytest.raises(TypeError, match="ComputeRequested is not a wire message"):
        encode(worker_messages.ComputeRequested("k", None, {}, {}, (), "k"))


def test_wire_error_pickles():
    import pickle

    error = pickle.loads(pickle.dumps(WireError("unknown message op 'x'")))
    assert type(error) is WireError and str(error) == "unknown message op 'x'"


# -- what the scheduler makes of a worker's message ----------------------------------------


def test_every_message_to_the_scheduler_becomes_an_event_declared_once():
    to_scheduler = [
        c
        for c in vars(worker_messages).values()
        if isinstance(c, type)
        and issubclass(c, worker_messages.ToScheduler)
        and c is not worker_messages.ToScheduler
    ]
    assert set(to_scheduler) <= set(TO_SCHEDULER_EVENT)
    assert set(TO_SCHEDULER_EVENT) <= set(MESSAGES)  # they all cross the wire
    assert set(SCHEDULER_EVENTS) == set(TO_SCHEDULER_EVENT)
    for event in TO_SCHEDULER_EVENT.values():
        assert issubclass(event, scheduler_messages.SchedulerEvent)


@pytest.mark.parametrize("msg_cls", list(TO_SCHEDULER_EVENT), ids=lambda c: c.op)
def test_an_event_keeps_every_field_of_its_message(msg_cls):
    fields = dataclasses.fields(msg_cls)
    msg = msg_cls(**{f.name: f"{f.name}-value" for f in fields})
    event = SCHEDULER_EVENTS[msg_cls](msg, "tcp://worker", 12.5)
    assert type(event) is TO_SCHEDULER_EVENT[msg_cls]
    assert event.worker == "tcp://worker" and event.time == 12.5
    for f in fields:
        assert getattr(event, f.name) == f"{f.name}-value", f.name
    if "stimulus_id" not in {f.name for f in fields}:
        assert event.stimulus_id == ""  # the event's default


def test_a_wrong_pairing_is_refused_when_the_module_loads():
    with pytest.raises(TypeError, match=r"TaskFinished\.key has no source in WorkerPaused"):
        wire._event_maker(wire.WorkerPaused, scheduler_messages.TaskFinished)
    # a message field the event has no place for would be lost on the way
    with pytest.raises(TypeError, match=r"SendReplicasAdded carries \['nbytes'\]"):
        wire._event_maker(worker_messages.SendReplicasAdded, scheduler_messages.CancelledTasksEnded)
