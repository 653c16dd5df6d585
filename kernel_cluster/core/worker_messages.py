"""Events the worker state machine accepts and the instructions it returns.

Each is a small slotted dataclass under one of two bases: ``WorkerEvent`` (past
tense) and ``WorkerInstruction`` (imperative), with a ``stimulus_id`` each. The
scheduler's ``ToWorker`` instructions (core/scheduler_messages.py) are events here
too, taken as the scheduler sent them. The ``ToScheduler`` instructions are also
the messages that carry them to the scheduler: ``op`` names each on the wire
(engine/wire.py). The shell (engine/worker.py) raises on an instruction it does not
know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .keys import Key


class WorkerEvent:
    """Something the worker state machine hears of (``WorkerState.handle_stimulus``)."""

    __slots__ = ()
    stimulus_id: str


class WorkerInstruction:
    """Something the worker state machine asks its shell to do."""

    __slots__ = ()
    stimulus_id: str


class ToScheduler(WorkerInstruction):
    """An instruction to tell the scheduler something, sent as it is: ``op`` names it
    on the wire; the scheduler makes its own event of it (engine/wire.py,
    ``SCHEDULER_EVENTS``)."""

    __slots__ = ()
    op: ClassVar[str]


@dataclass(slots=True)
class ComputeRequested(WorkerEvent):
    key: Key
    spec: Any
    who_has: Mapping[Key, tuple[str, ...]]
    nbytes: Mapping[Key, int]
    priority: tuple[Any, ...]
    prefix: str
    span_id: str | None = None
    stimulus_id: str = ""
    annotation: dict[Any, Any] | None = None


@dataclass(slots=True)
class ComputeAloneRequested(ComputeRequested):
    """A suspect of killing workers: run it with no other task beside it."""


@dataclass(slots=True)
class FreeKeysRequested(WorkerEvent):
    keys: list[Key]
    stimulus_id: str = ""
    # the scheduler had them processing here: tell it when they no longer take a thread
    running: bool = False


@dataclass(slots=True)
class ExecuteSucceeded(WorkerEvent):
    key: Key
    value: Any
    nbytes: int
    type_name: str
    startstops: list[tuple[Any, ...]]
    thread: int | None = None
    stimulus_id: str = ""
    # the task the same thread went on to run with this value (see ExecuteAfter)
    then: Key | None = None


@dataclass(slots=True)
class ExecuteFailed(WorkerEvent):
    key: Key
    exception: BaseException
    traceback: Any
    exception_text: str
    startstops: list[tuple[Any, ...]]
    thread: int | None = None
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteSkipped(WorkerEvent):
    """A task thread found the task cancelled (or the worker paused) and did not run it."""

    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteSeceded(WorkerEvent):
    """The thread running ``key`` gave its slot to another thread while the task waits
    for other tasks (``secede``): the task runs on, but fills no thread."""

    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDepSucceeded(WorkerEvent):
    """Data arrived from ``worker``; keys it did not have are simply absent."""

    worker: str
    data: dict[Key, Any]
    nbytes: dict[Key, int]
    start: float
    stop: float
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDepFailed(WorkerEvent):
    """``worker`` could not be reached; try other holders of these keys."""

    worker: str
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class PauseChanged(WorkerEvent):
    paused: bool
    stimulus_id: str = ""


# -- instructions --------------------------------------------------------------------


@dataclass(slots=True)
class Execute(WorkerInstruction):
    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteAfter(WorkerInstruction):
    """``key`` waits on nothing but ``after``, which a task thread is running: that
    thread may go on to ``key`` as soon as ``after`` succeeds, with no trip through the
    event loop. The shell offers it; if the thread takes it, ``after``'s
    ExecuteSucceeded says so (``then``), else ``key`` is made ready the usual way."""

    key: Key
    after: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDep(WorkerInstruction):
    worker: str
    keys: list[Key]
    total_nbytes: int
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskFinished(ToScheduler):
    op: ClassVar[str] = "task-finished"
    key: Key
    nbytes: int
    type_name: str
    startstops: list[tuple[Any, ...]]
    thread: int | None
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskErred(ToScheduler):
    op: ClassVar[str] = "task-erred"
    key: Key
    exception: BaseException | bytes  # pickled by a worker in another process
    traceback: Any
    exception_text: str
    startstops: list[tuple[Any, ...]]
    thread: int | None
    stimulus_id: str = ""


@dataclass(slots=True)
class SendReplicasAdded(ToScheduler):
    op: ClassVar[str] = "add-keys"
    keys: list[Key]
    nbytes: dict[Key, int] = field(default_factory=dict)
    stimulus_id: str = ""


@dataclass(slots=True)
class SendDependencyUnavailable(ToScheduler):
    op: ClassVar[str] = "missing-data"
    key: Key
    dependency: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class SendCancelledTasksEnded(ToScheduler):
    """Tasks freed while processing here take no thread any more (ended, or never ran)."""

    op: ClassVar[str] = "tasks-ended"
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class SendCancelledTasksRunning(ToScheduler):
    """Tasks freed while processing here were running on a task thread, and still are
    (a thread cannot be interrupted): each takes its thread until it ends."""

    op: ClassVar[str] = "tasks-still-running"
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskSeceded(ToScheduler):
    """The thread running ``key`` gave its slot back while it waits (``secede``): the
    task goes on, but another task may run in its place."""

    op: ClassVar[str] = "task-seceded"
    key: Key
    stimulus_id: str = ""
