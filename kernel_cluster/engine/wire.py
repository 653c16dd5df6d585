"""Every message between scheduler, workers and peers: one class each, one codec.

A message is a slotted dataclass whose class attribute ``op`` names it on the
wire. The scheduler's and the worker's state machines already speak in such
classes (core/scheduler_messages.py, core/worker_messages.py): the instructions
that travel (``ComputeTask``, ``SendTaskFinished``, ...) ARE the messages, so a
shape is written once. What only the shells exchange (heartbeats, registration,
peer requests and their replies) is declared here.

Embedded workers pass the objects themselves through their LocalChannel. Over TCP
a message is a dict: ``encode`` makes ``{"op": ..., field: value, ...}`` of every
dataclass field (but the address an instruction is for, see ``NOT_SENT``), and
``decode`` makes the object back; adding a field to a class is all it takes to
send it, and a new class is listed in ``MESSAGES``. Both are generated once per
class (as dataclasses generate ``__init__``), so the per-task paths cost about
what hand-written dicts did.

``decode`` refuses what it cannot trust with a ``WireError`` that says what was
wrong: an unknown ``op``, a field missing (one with a default may be left out)
or one the class does not have. The receivers log it and carry on with the rest.

What a worker's message means to the scheduler's state machine is declared here
too, once: ``TO_SCHEDULER_EVENT`` pairs each such message with the event it becomes,
whose fields are the message's by the same names plus the sender (``worker``) and
the scheduler's clock on reading it (``time``). ``SCHEDULER_EVENTS`` holds the
converters made from it, generated as the codec's are.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.scheduler_messages import (
    CancelledTasksEnded,
    CancelledTasksRunning,
    ComputeTask,
    ComputeTaskAlone,
    DependencyFetchFailed,
    FreeKeys,
    ReplicasAdded,
    ResultSerializationFailed,
    SchedulerEvent,
    SetClusterBusy,
    TaskErred,
    TaskFinished,
    TaskSeceded,
    WorkerPauseChanged,
)
from ..core.worker_messages import (
    SendCancelledTasksEnded,
    SendCancelledTasksRunning,
    SendDependencyUnavailable,
    SendReplicasAdded,
    SendTaskErred,
    SendTaskFinished,
    SendTaskSeceded,
)

__all__ = [
    "MESSAGES",
    "NOT_SENT",
    "SCHEDULER_EVENTS",
    "TO_SCHEDULER_EVENT",
    "WireError",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
]

logger = logging.getLogger(__name__)


class WireError(ValueError):
    """A received message that is not one of ours (unknown ``op``, fields wrong)."""


# -- worker -> scheduler (besides the worker state machine's Send* instructions) ----


@dataclass(slots=True)
class Heartbeat:
    """The worker is alive; its memory, load and fine metrics since the last one."""

    op: ClassVar[str] = "heartbeat"
    sent: float  # the worker's clock, echoed back to measure the clocks' offset
    memory: int = 0
    managed: int = 0
    spilled: int = 0
    executing: int = 0
    ready: int = 0
    metrics: dict | None = None


@dataclass(slots=True)
class WorkerPaused:
    """The worker stopped starting tasks for lack of memory (or started again)."""

    op: ClassVar[str] = "worker-paused"
    paused: bool


@dataclass(slots=True)
class ResultUnsendable:
    """The worker holds ``key`` but cannot send it: the scheduler fails the task."""

    op: ClassVar[str] = "result-unserializable"
    key: Any
    exception: Any  # pickled
    exception_text: str = ""


@dataclass(slots=True)
class MemoryStuck:
    """The worker gives up over its memory limit (it restarts): ``unspillable`` names
    the values it holds that could not be spilled, key -> (bytes, why), so that the
    scheduler can fail them once restarting does not help (``allowed_failures``)."""

    op: ClassVar[str] = "memory-stuck"
    unspillable: dict
    memory: int = 0
    limit: int = 0


@dataclass(slots=True)
class UnspillableHeld:
    """The values the worker holds that could not be spilled, key -> (bytes, why), sent
    when that set changes while its memory is above the spill fraction (empty: none
    or memory below it): its nanny may end it before it can send ``MemoryStuck``, and
    the scheduler then counts its death as a restart for these (engine/unspillable.py)."""

    op: ClassVar[str] = "unspillable-held"
    unspillable: dict
    limit: int = 0


# -- scheduler -> worker (besides the scheduler state machine's instructions) --------


@dataclass(slots=True)
class HeartbeatReply:
    """``sent``: the heartbeat's own time; ``time``: the scheduler's clock on reading it."""

    op: ClassVar[str] = "heartbeat-reply"
    sent: float
    time: float


@dataclass(slots=True)
class HeartbeatNow:
    """Send a heartbeat now (the scheduler refreshes its metrics)."""

    op: ClassVar[str] = "heartbeat-now"


@dataclass(slots=True)
class CodeSources:
    """File name -> lines of notebook cells whose code tasks will run (see
    code_sources.py): ahead of those tasks, once per worker."""

    op: ClassVar[str] = "code-sources"
    sources: dict


# -- registration (a worker process's first exchange) --------------------------------


@dataclass(slots=True)
class RegisterWorker:
    op: ClassVar[str] = "register-worker"
    address: str
    nthreads: int
    memory_limit: int
    name: str
    pid: int | None = None
    max_message_size: int | None = None  # the largest message the worker accepts


@dataclass(slots=True)
class Registered:
    op: ClassVar[str] = "registered"
    time: float
    max_message_size: int | None = None  # the largest message the scheduler accepts


@dataclass(slots=True)
class Refused:
    op: ClassVar[str] = "refused"
    reason: str


# -- peer requests and their replies (request/reply connections) ---------------------


@dataclass(slots=True)
class GetData:
    """Send the values of ``keys`` (``who``: the reader, for the transfer log)."""

    op: ClassVar[str] = "get-data"
    keys: Any
    who: str = ""
    max_size: int | None = None  # the largest reply the requester accepts
    # the requester's shared memory (engine/shared_memory.py, ``identity``): large
    # values may come as SharedValues there; "" for none
    shm: str = ""


@dataclass(slots=True)
class Run:
    """``client.run``: call the pickled ``function`` on the worker."""

    op: ClassVar[str] = "run"
    function: bytes
    max_size: int | None = None


@dataclass(slots=True)
class DataReply:
    """Values and sizes of the keys held; ``errors``: key -> (pickled exception, text)
    for values that cannot be sent; ``more``: keys left out to stay under the limit."""

    op: ClassVar[str] = "data"
    data: dict
    nbytes: dict
    errors: dict = dataclasses.field(default_factory=dict)
    more: Any = ()


@dataclass(slots=True)
class RunResult:
    op: ClassVar[str] = "run-result"
    result: bytes  # pickled


@dataclass(slots=True)
class RequestFailed:
    op: ClassVar[str] = "error"
    exception: bytes  # pickled
    traceback: Any = None


MESSAGES: tuple[type, ...] = (
    # scheduler -> worker
    ComputeTask,
    ComputeTaskAlone,
    FreeKeys,
    SetClusterBusy,
    HeartbeatReply,
    HeartbeatNow,
    CodeSources,
    # worker -> scheduler
    SendTaskFinished,
    SendTaskErred,
    SendReplicasAdded,
    SendDependencyUnavailable,
    SendCancelledTasksEnded,
    SendCancelledTasksRunning,
    SendTaskSeceded,
    Heartbeat,
    WorkerPaused,
    ResultUnsendable,
    MemoryStuck,
    UnspillableHeld,
    # registration
    RegisterWorker,
    Registered,
    Refused,
    # peers
    GetData,
    Run,
    DataReply,
    RunResult,
    RequestFailed,
)

# Whom a scheduler instruction is for is the channel's business: that field is not
# sent (the receiver is that worker), and arrives empty. Per task, that is one field
# less to serialise.
NOT_SENT: dict[type, tuple[str, ...]] = {
    ComputeTask: ("worker",),
    ComputeTaskAlone: ("worker",),
    FreeKeys: ("worker",),
}

# -- the codec ------------------------------------------------------------------------

_ENCODERS: dict[type, Callable[[Any], dict]] = {}
_DECODERS: dict[str, Callable[[dict], Any]] = {}


def encode(msg: Any) -> dict:
    """The dict that carries ``msg`` over TCP: its ``op`` and every field (but those
    in ``NOT_SENT``)."""
    try:
        encoder = _ENCODERS[type(msg)]
    except KeyError:
        raise TypeError(f"{type(msg).__name__} is not a wire message (see wire.MESSAGES)") from None
    return encoder(msg)


def decode(msg: Any) -> Any:
    """The message object a received dict stands for; ``WireError`` if it is none."""
    try:
        decoder = _DECODERS[msg["op"]]
    except (KeyError, TypeError, IndexError):
        if type(msg) is not dict:
            raise WireError(f"a message must be a dict with an 'op', got {_short(msg)}") from None
        if "op" not in msg:
            raise WireError(f"a message without an 'op': {_short(msg)}") from None
        raise WireError(f"unknown message op {_short(msg['op'])}") from None
    return decoder(msg)


def encode_batch(msgs: list) -> list[dict]:
    """``encode`` of each message (what a stream sends, with no call per message)."""
    encoders = _ENCODERS
    try:
        return [encoders[type(msg)](msg) for msg in msgs]
    except KeyError:
        return [encode(msg) for msg in msgs]  # raises for the culprit


def decode_batch(msgs: Any, reader: str, source: str) -> list:
    """The messages of a batch read from a stream (``reader`` names the receiver and
    ``source`` the sender in the log): one that is none of ours is logged and left
    out, and the others are handled as usual."""
    decoders = _DECODERS
    try:  # the usual case, with no call to decode() per message
        return [decoders[msg["op"]](msg) for msg in msgs]
    except (WireError, LookupError, TypeError):
        pass
    if type(msgs) is not list and type(msgs) is not tuple:
        logger.warning(
            "%s ignored a batch from %s that is no list: %s", reader, source, _short(msgs)
        )
        return []
    out = []
    for msg in msgs:
        try:
            out.append(decode(msg))
        except WireError as exc:
            logger.warning("%s ignored a message from %s: %s", reader, source, exc)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + " [...]"


def _register(cls: type) -> None:
    """Generate ``cls``'s encoder and decoder: a dict literal and a constructor call.

    Code generation (as dataclasses do for ``__init__``) keeps the per-task messages
    as fast as hand-written ones; field names are identifiers, so nothing is quoted
    but the ``op``. A dict that does not have exactly the fields takes the slow path
    (``_decode_loosely``): defaults filled in, or a clear error.
    """
    op = cls.op  # type: ignore[attr-defined]
    if op in _DECODERS:
        raise ValueError(f"two wire messages are called {op!r}")
    not_sent = NOT_SENT.get(cls, ())
    names = [f.name for f in dataclasses.fields(cls)]
    sent = [n for n in names if n not in not_sent]
    items = "".join(f", {n!r}: m.{n}" for n in sent)
    args = ", ".join("''" if n in not_sent else f"d[{n!r}]" for n in names)
    source = (
        f"def encode(m):\n    return {{'op': {op!r}{items}}}\n"
        f"def decode(d):\n"
        f"    if len(d) == {len(sent) + 1}:\n"
        f"        try:\n            return cls({args})\n"
        f"        except KeyError:\n            pass\n"
        f"    return loosely(cls, d)\n"
    )
    namespace: dict[str, Any] = {"cls": cls, "loosely": _decode_loosely}
    exec(source, namespace)  # from the dataclass's own field names: nothing foreign
    _ENCODERS[cls] = namespace["encode"]
    _DECODERS[op] = namespace["decode"]


def _decode_loosely(cls: type, msg: dict) -> Any:
    op = cls.op  # type: ignore[attr-defined]
    not_sent = NOT_SENT.get(cls, ())
    fields = [f for f in dataclasses.fields(cls) if f.name not in not_sent]
    names = {f.name for f in fields}
    extra = sorted(repr(k) for k in msg if k != "op" and k not in names)
    if extra:
        raise WireError(f"message {op!r} has unknown fields {', '.join(extra)}")
    missing = [
        f.name
        for f in fields
        if f.name not in msg
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise WireError(f"message {op!r} lacks fields {', '.join(map(repr, missing))}")
    kwargs = {n: msg[n] for n in names if n in msg}
    return cls(**kwargs, **dict.fromkeys(not_sent, ""))


for _cls in MESSAGES:
    _register(_cls)


# -- what the scheduler makes of a worker's message ------------------------------------

# Each message from a worker that the scheduler's state machine takes, and its event.
TO_SCHEDULER_EVENT: dict[type, type[SchedulerEvent]] = {
    SendTaskFinished: TaskFinished,
    SendTaskErred: TaskErred,
    SendReplicasAdded: ReplicasAdded,
    SendDependencyUnavailable: DependencyFetchFailed,
    SendCancelledTasksEnded: CancelledTasksEnded,
    SendCancelledTasksRunning: CancelledTasksRunning,
    SendTaskSeceded: TaskSeceded,
    ResultUnsendable: ResultSerializationFailed,
    WorkerPaused: WorkerPauseChanged,
}

# message class -> make(message, worker address, time): its event
SCHEDULER_EVENTS: dict[type, Callable[[Any, str, float], SchedulerEvent]] = {}


def _event_maker(msg_cls: type, event_cls: type) -> Callable[[Any, str, float], SchedulerEvent]:
    """Generate ``make(m, worker, time)``: one positional constructor call, as a
    hand-written conversion would be (this is on every task's path).

    Each field of the event comes from the message field of the same name, or is
    ``worker`` or ``time``, or keeps its default; any other field is a mistake in
    ``TO_SCHEDULER_EVENT``, raised at import.
    """
    sent = {f.name for f in dataclasses.fields(msg_cls)}
    namespace: dict[str, Any] = {"cls": event_cls}
    args = []
    for f in dataclasses.fields(event_cls):
        if f.name in ("worker", "time"):
            args.append(f.name)
        elif f.name in sent:
            args.append(f"m.{f.name}")
        elif f.default is not dataclasses.MISSING:
            namespace[f"default_{f.name}"] = f.default
            args.append(f"default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"factory_{f.name}"] = f.default_factory
            args.append(f"factory_{f.name}()")
        else:
            raise TypeError(
                f"{event_cls.__name__}.{f.name} has no source in {msg_cls.__name__} "
                "(the message lacks it, and it has no default)"
            )
    missing = sent - {f.name for f in dataclasses.fields(event_cls)}
    if missing:
        raise TypeError(
            f"{msg_cls.__name__} carries {sorted(missing)}, which {event_cls.__name__} drops"
        )
    source = f"def make(m, worker, time):\n    return cls({', '.join(args)})\n"
    exec(source, namespace)  # from the dataclasses' own field names: nothing foreign
    make: Callable[[Any, str, float], SchedulerEvent] = namespace["make"]
    return make


for _msg, _event in TO_SCHEDULER_EVENT.items():
    SCHEDULER_EVENTS[_msg] = _event_maker(_msg, _event)
