"""Events the worker state machine accepts and the instructions it returns.

The ``Send*`` instructions are also the messages that carry them to the scheduler:
``op`` names each on the wire (engine/wire.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .keys import Key


@dataclass(slots=True)
class ComputeRequested:
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
class FreeKeysRequested:
    keys: list[Key]
    stimulus_id: str = ""
    # the scheduler had them processing here: tell it when they no longer take a thread
    running: bool = False


@dataclass(slots=True)
class ExecuteSucceeded:
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
class ExecuteFailed:
    key: Key
    exception: BaseException
    traceback: Any
    exception_text: str
    startstops: list[tuple[Any, ...]]
    thread: int | None = None
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteSkipped:
    """A task thread found the task cancelled (or the worker paused) and did not run it."""

    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteSeceded:
    """The thread running ``key`` gave its slot to another thread while the task waits
    for other tasks (``secede``): the task runs on, but fills no thread."""

    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDepSucceeded:
    """Data arrived from ``worker``; keys it did not have are simply absent."""

    worker: str
    data: dict[Key, Any]
    nbytes: dict[Key, int]
    start: float
    stop: float
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDepFailed:
    """``worker`` could not be reached; try other holders of these keys."""

    worker: str
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class PauseChanged:
    paused: bool
    stimulus_id: str = ""


# -- instructions --------------------------------------------------------------------


@dataclass(slots=True)
class Execute:
    key: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class ExecuteAfter:
    """``key`` waits on nothing but ``after``, which a task thread is running: that
    thread may go on to ``key`` as soon as ``after`` succeeds, with no trip through the
    event loop. The shell offers it; if the thread takes it, ``after``'s
    ExecuteSucceeded says so (``then``), else ``key`` is made ready the usual way."""

    key: Key
    after: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class GatherDep:
    worker: str
    keys: list[Key]
    total_nbytes: int
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskFinished:
    op: ClassVar[str] = "task-finished"
    key: Key
    nbytes: int
    type_name: str
    startstops: list[tuple[Any, ...]]
    thread: int | None
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskErred:
    op: ClassVar[str] = "task-erred"
    key: Key
    exception: BaseException | bytes  # pickled by a worker in another process
    traceback: Any
    exception_text: str
    startstops: list[tuple[Any, ...]]
    thread: int | None
    stimulus_id: str = ""


@dataclass(slots=True)
class SendReplicasAdded:
    op: ClassVar[str] = "add-keys"
    keys: list[Key]
    nbytes: dict[Key, int] = field(default_factory=dict)
    stimulus_id: str = ""


@dataclass(slots=True)
class SendDependencyUnavailable:
    op: ClassVar[str] = "missing-data"
    key: Key
    dependency: Key
    stimulus_id: str = ""


@dataclass(slots=True)
class SendCancelledTasksEnded:
    """Tasks freed while processing here take no thread any more (ended, or never ran)."""

    op: ClassVar[str] = "tasks-ended"
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class SendCancelledTasksRunning:
    """Tasks freed while processing here were running on a task thread, and still are
    (a thread cannot be interrupted): each takes its thread until it ends."""

    op: ClassVar[str] = "tasks-still-running"
    keys: list[Key]
    stimulus_id: str = ""


@dataclass(slots=True)
class SendTaskSeceded:
    """The thread running ``key`` gave its slot back while it waits (``secede``): the
    task goes on, but another task may run in its place."""

    op: ClassVar[str] = "task-seceded"
    key: Key
    stimulus_id: str = ""


WorkerEvent = (
    ComputeRequested
    | FreeKeysRequested
    | ExecuteSucceeded
    | ExecuteFailed
    | ExecuteSkipped
    | ExecuteSeceded
    | GatherDepSucceeded
    | GatherDepFailed
    | PauseChanged
)
WorkerInstruction = (
    Execute
    | GatherDep
    | SendTaskFinished
    | SendTaskErred
    | SendReplicasAdded
    | SendDependencyUnavailable
    | SendCancelledTasksEnded
    | SendCancelledTasksRunning
    | SendTaskSeceded
)
