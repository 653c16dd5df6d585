"""The plain data a ``DiagnosticsSource`` returns: every snapshot type, in one place.

Each is a frozen, slotted dataclass (or a plain typed container) holding strings,
numbers, tuples and dicts only, so that the JupyterLab panels and a source in
another process can serialise it with msgpack (``dataclasses.asdict``). Names say
the unit where a number has one: ``*_bytes`` are bytes, times (``start``,
``stop``, ``enqueued``, ``time``) are seconds on the scheduler's clock (epoch
seconds, what ``DiagnosticsSource.now()`` reads), ``*_seconds`` are durations.

Fine metrics stay keyed tuples with the unit in the key (``MetricKey``); their
values are numbers in that unit: floats, and ints where the engine counts whole
bytes and tasks (``int`` is a ``float`` to a type checker).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..core.critical_path import TaskRun

# ("execute", span_id, prefix, activity, unit), or (context, activity, unit) for the
# contexts "gather-dep", "get-data" and "memory-monitor". Activities and units are
# strings for the engine's own metrics, any hashable label a user's digest_metric gave.
MetricKey = tuple[Hashable, ...]
Metrics = dict[MetricKey, float]

# the ways a source runs its workers; a source over another engine adds its own
SourceKind = Literal["embedded", "processes"]

# one frame of the user's code that submitted work: (filename, line, function, text)
CodeFrame = tuple[str, int, str, str]

# a profile tree laid out flat (see core.profile_tree.to_flat): (parent row, identifier,
# filename, name, line number, line, samples, own samples)
FlatRow = tuple[int, str, str, str, int, str, int, int]

# (time, samples): samples taken in the profile cycle that ended at that time
TimeCount = tuple[float, int]

# a task key: a string, or a tuple of strings and numbers (Dask style)
TaskKey = str | tuple[Hashable, ...]


@dataclass(frozen=True, slots=True)
class SpanInfo:
    """One span, with the numbers of its whole subtree.

    ``enqueued``: when its first task was submitted; ``start``: when its first task
    started computing (0.0 before any did); ``stop``: when its last task ended, or
    now while it runs. ``duration``: seconds spent on every action of every task;
    ``active_cpu_seconds``: thread-seconds the cluster offered while it ran.
    ``states``: tasks per state (every state present); ``metrics``: its execute
    metrics, keyed ``("execute", prefix, activity, unit)``.
    """

    id: str
    name: tuple[str, ...]
    parent: str | None
    children: tuple[str, ...]
    enqueued: float
    start: float
    stop: float
    duration: float
    nbytes_total: int
    states: dict[str, int]
    done: bool
    active_cpu_seconds: float
    metrics: Metrics
    code: tuple[tuple[CodeFrame, ...], ...] = ()

    def __repr__(self) -> str:
        return f"<Span {' / '.join(self.name)} ({self.id[:8]}) done={self.done}>"


@dataclass(frozen=True, slots=True)
class FinishedSpan:
    """A span that finished, as the run history keeps it: the span (``SpanInfo``, its
    metrics in as of a heartbeat after it finished), the id of its top-level span
    (``root``: itself if it is one), its subtree's tasks per task
    prefix and state (``tasks``: ``{"inc": {"memory": 10, ...}}``, only the states
    present), the bytes of their results per prefix (``nbytes``), and the cluster's
    workers and threads when it was read."""

    span: SpanInfo
    root: str
    tasks: dict[str, dict[str, int]]
    nbytes: dict[str, int]
    workers: int
    threads: int


@dataclass(frozen=True, slots=True)
class FinishedSpans:
    """``DiagnosticsSource.finished_spans``: the spans that finished since a cursor, in
    the order they finished (a span that got tasks again after it finished appears
    again, later: the latest is its final state); ``cursor``: what to pass next time;
    ``missed``: spans that finished but fell out of the source's bounded log before
    this read (the reader came too late for them)."""

    spans: tuple[FinishedSpan, ...]
    cursor: int
    missed: int = 0


@dataclass(frozen=True, slots=True)
class StartStop:
    """One action of a task: ``compute``, ``transfer`` (``source``: the worker the data
    came from), ``disk-read``, ``disk-write`` or ``deserialize``; times in seconds."""

    action: str
    start: float
    stop: float
    source: str | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"action": self.action, "start": self.start, "stop": self.stop}
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass(frozen=True, slots=True)
class TaskStreamRecord:
    """Where and when one task ran. ``index`` numbers the records (it only grows);
    ``status``: ``"OK"`` or ``"error"``; ``nbytes``: its result's size in bytes;
    ``dependencies``: its inputs' keys and ``sent``: when the scheduler sent it to its
    worker, for the critical path (a Dask cluster's records have neither: ``()`` and
    None)."""

    index: int
    key: TaskKey
    prefix: str
    span_id: str | None
    worker: str
    thread: int | None
    status: str
    nbytes: int
    startstops: tuple[StartStop, ...]
    dependencies: tuple[TaskKey, ...] = ()
    sent: float | None = None

    def compute_run(self) -> TaskRun | None:
        """The record as the critical path walks it (None: it has no compute)."""
        compute = None
        transfers = []
        for ss in self.startstops:
            if ss.action == "compute":
                compute = ss
            elif ss.action == "transfer":
                transfers.append((ss.start, ss.stop))
        if compute is None:
            return None
        return TaskRun(
            self.key,
            self.dependencies,
            self.worker,
            self.thread,
            compute.start,
            compute.stop,
            self.sent,
            tuple(transfers),
        )

    def as_dict(self) -> dict[str, object]:
        """The record as ``client.task_stream()`` and ``ts.data`` show it (Dask's
        fields: without ``dependencies`` and ``sent``)."""
        return {
            "index": self.index,
            "key": self.key,
            "prefix": self.prefix,
            "span_id": self.span_id,
            "worker": self.worker,
            "thread": self.thread,
            "status": self.status,
            "nbytes": self.nbytes,
            "startstops": [ss.as_dict() for ss in self.startstops],
        }


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as the scheduler sees it. ``memory_bytes``: its process's memory at
    the last heartbeat; ``nbytes``: bytes of the results it holds; ``last_seen``:
    when it was last heard from (None: not yet). As of the last heartbeat too, where
    the source knows them: ``executing`` and ``ready`` tasks (None: unknown, read
    ``processing``), ``managed_bytes`` (results held in memory), ``spilled_bytes``
    (results moved to disk), ``cpu_percent`` (of one core; embedded workers share
    the kernel process's)."""

    address: str
    name: str | int | None
    nthreads: int
    memory_limit_bytes: int | None
    processing: int
    paused: bool
    nbytes: int
    keys: int
    memory_bytes: int
    pid: int | None
    last_seen: float | None
    executing: int | None = None
    ready: int = 0
    managed_bytes: int | None = None
    spilled_bytes: int = 0
    cpu_percent: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The workers by address, their threads in total, and the tasks the scheduler
    holds; which engine runs them (``"kernel-cluster"`` or ``"dask"``), the
    scheduler's address (None: in this process only) and its dashboard's URL."""

    workers: dict[str, WorkerInfo]
    total_nthreads: int
    tasks: int
    engine: str = "kernel-cluster"
    scheduler_address: str | None = None
    dashboard_link: str | None = None


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """The cluster's memory now, in bytes: ``process_bytes`` (every worker process's
    memory, each process once), ``managed_bytes`` (results held in memory),
    ``unmanaged_bytes`` (process minus managed, at least 0), ``spilled_bytes``
    (results moved to disk) and ``unmanaged_old_bytes`` (the least unmanaged memory
    of the last 30 s: Dask's ``unmanaged_old``; None where the source keeps no
    history, which makes it the unmanaged memory of now)."""

    process_bytes: int
    managed_bytes: int
    unmanaged_bytes: int
    spilled_bytes: int
    unmanaged_old_bytes: int | None = None

    def measure(self, name: str) -> int:
        """One measure by the name ``MemorySampler`` (and Dask's ``MemoryState``) uses:
        ``process``, ``managed`` (in memory), ``managed_total`` (managed + spilled),
        ``unmanaged``, ``unmanaged_old``, ``unmanaged_recent`` (unmanaged - old),
        ``optimistic`` (managed + unmanaged_old) or ``spilled``."""
        process = self.process_bytes
        managed = min(process, self.managed_bytes)
        unmanaged = process - managed
        old = self.unmanaged_old_bytes
        old = unmanaged if old is None else max(0, min(old, unmanaged))
        values = {
            "process": process,
            "managed": managed,
            "managed_total": managed + self.spilled_bytes,
            "unmanaged": unmanaged,
            "unmanaged_old": old,
            "unmanaged_recent": unmanaged - old,
            "optimistic": managed + old,
            "spilled": self.spilled_bytes,
        }
        if name not in values:
            raise ValueError(f"measure={name!r}: use one of {', '.join(values)}.")
        return values[name]


@dataclass(frozen=True, slots=True)
class TransferLogEntry:
    """One transfer of results between two workers (or to the client), as one end
    logged it: the ``peer`` at the other end, the keys (the first 100 of ``n_keys``),
    their size in bytes and the bytes on the wire (``compressed_bytes``), start and
    stop times."""

    peer: str
    keys: tuple[TaskKey, ...]
    total_bytes: int
    compressed_bytes: int
    start: float
    stop: float
    n_keys: int


@dataclass(frozen=True, slots=True)
class TransferLogs:
    """A worker's transfer logs, oldest first: what it received and what it sent."""

    incoming: tuple[TransferLogEntry, ...] = ()
    outgoing: tuple[TransferLogEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class ProfileMetadata:
    """A worker's profile samples over time: ``counts`` in total and ``keys`` per task
    prefix, one ``(time, samples)`` per profile cycle (time: the cycle's end);
    ``cycle_seconds``: how long a cycle lasts (None: this worker does not profile)."""

    counts: tuple[TimeCount, ...] = ()
    keys: dict[str, tuple[TimeCount, ...]] = field(default_factory=dict)
    cycle_seconds: float | None = None

    def as_dict(self) -> dict[str, object]:
        """The shape ``core.profile_tree.merge_metadata`` reads."""
        return {"counts": list(self.counts), "keys": {k: list(v) for k, v in self.keys.items()}}


def records_runs(
    records: Iterable[TaskStreamRecord], span_ids: Collection[str] | None = None
) -> list[TaskRun]:
    """The compute runs of ``records`` that ended well, of spans ``span_ids`` (None:
    any): ``DiagnosticsSource.task_runs`` for a source that only has records."""
    out = []
    for r in records:
        if r.status != "OK" or (span_ids is not None and r.span_id not in span_ids):
            continue
        run = r.compute_run()
        if run is not None:
            out.append(run)
    return out


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed in a source since a cursor (``changes_since``; live views read
    this instead of the whole state). ``cursor``: what to pass next time. ``full``:
    the reader had no cursor or fell off the source's log: ``metrics``, ``spans`` and
    ``progress`` then hold everything, ``closed_spans`` and ``tasks`` nothing, and
    readers of the task stream read it again from their own index
    (``task_stream_since``). Otherwise: the metric rows changed, with their values
    now (0 for a row that went, a folded span's); the spans opened or changed, their
    parents and every running span (its ``stop`` is now); the ids of spans that went;
    the task prefixes whose counts changed, and the task-stream records appended.
    ``task_index``: the number the next task-stream record will get."""

    cursor: int
    full: bool
    metrics: Metrics
    spans: tuple[SpanInfo, ...]
    closed_spans: tuple[str, ...]
    progress: dict[str, dict[str, int]]
    tasks: tuple[TaskStreamRecord, ...]
    task_index: int
