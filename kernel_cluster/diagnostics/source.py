"""The one narrow, read-only door through which every view reads an engine.

Views (tables, widgets, reports, samplers, the magic) take a ``DiagnosticsSource``
and nothing else, so the same views can be fed by this package's engine
(``sources/engine_source.EngineSource``) or by another one (a Dask cluster) that implements
the protocol. Every read a view makes is declared here; everything returned is a
snapshot of plain data (``snapshots``), never a live engine object.
``tests/diagnostics/test_source_conformance.py`` checks any source against it.

Where a fine metric travels, from measured to drawn:

- measured on a worker: ``engine/execute.py`` (a task's thread-cpu, thread-noncpu,
  deserialize, and what ``context_meter`` labels inside it: ``engine/spill.py``'s
  disk-read / disk-write / compress, a user's own labels), ``core/thread_accounts.py``
  (``ThreadAccount``: executor and idle, the time between tasks), ``engine/worker.py``
  (gather-dep, get-data, memory-monitor); ``core/metrics.py``'s ``MetricsLedger``
  keeps each worker's running totals, sent as the delta since the last heartbeat;
- summed once on the scheduler: ``engine/scheduler.py`` (``add_worker_metrics``
  into ``worker_metrics``; per span in ``core/spans.py``);
- read through this protocol: ``EngineSource.fine_metrics`` / ``span_metrics``;
- shaped: ``queries/fine_metrics.py`` (DataFrames), ``feeds/tables.MetricsFeed`` (browser deltas);
- drawn: ``widgets/src/store.ts`` and ``aggregate.ts`` (rows to panel data),
  ``fineMetrics.ts`` (the panels of widgets, JupyterLab and reports alike).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from ..core.critical_path import TaskRun
from .snapshots import (
    ClusterInfo,
    FinishedSpans,
    FlatRow,
    MemorySnapshot,
    Metrics,
    ProfileMetadata,
    SourceKind,
    SpanInfo,
    TaskStreamRecord,
    TransferLogs,
)


@runtime_checkable
class DiagnosticsSource(Protocol):
    """Every read a view makes of an engine. Times are seconds on the scheduler's
    clock (``now()``); every read returns a new snapshot its caller may keep."""

    @property
    def kind(self) -> SourceKind:
        """How the engine runs its workers: ``"embedded"`` (threads in this process)
        or ``"processes"`` (worker processes)."""
        ...

    def now(self) -> float:
        """The scheduler's clock now: the time every other read's times are on."""
        ...

    # -- fine metrics and spans ------------------------------------------------------

    def fine_metrics(self, refresh: bool = True) -> Metrics:
        """Every worker metric summed so far, as workers key them:
        ``("execute", span_id, prefix, activity, unit)``, ``("gather-dep", activity,
        unit)``, ``("get-data", activity, unit)``, ``("memory-monitor", activity, unit)``;
        values are numbers in the key's unit (ints for the engine's bytes and counts).

        ``refresh=False`` skips asking the workers for their latest numbers first:
        cheaper, and up to one heartbeat old (what live views poll with)."""
        ...

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[Metrics, str]:
        """Execute metrics of the spans a selector picks (a span id, a tag, or a tuple
        of tags), merged, keyed ``("execute", prefix, activity, unit)``; and a label.
        Raises KeyError, naming the tags seen, when no span matches."""
        ...

    def spans(self, refresh: bool = True) -> list[SpanInfo]:
        """Every span, subtree totals included."""
        ...

    def finished_spans(self, cursor: int = 0) -> FinishedSpans:
        """The spans that finished (every task of the subtree done) since ``cursor`` (a
        previous answer's ``cursor``; 0: every one still in the source's bounded log),
        with metrics as fresh as ``spans(refresh=True)``'s. What the run history
        records: a read costs what finished since the cursor, not the number of spans."""
        ...

    # -- tasks and workers ---------------------------------------------------------------

    def progress(self) -> dict[str, dict[str, int]]:
        """Task state counts per task prefix: ``{"inc": {"memory": 8, "processing": 2,
        ...}}``, every state of ``core.scheduler_tasks.ALL_STATES`` present."""
        ...

    def info(self) -> ClusterInfo:
        """The workers and their threads."""
        ...

    def memory(self) -> MemorySnapshot | None:
        """The cluster's memory now (as of the workers' last heartbeats); None when the
        source measures none (samplers and reports then leave memory out)."""
        ...

    # -- the task stream -------------------------------------------------------------------

    def task_stream_index(self) -> int:
        """The number the next task stream record will get (records ever made)."""
        ...

    def task_stream_since(self, index: int) -> list[TaskStreamRecord]:
        """Records numbered ``index`` or later still in the (bounded) history, in order."""
        ...

    def task_stream(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[TaskStreamRecord]:
        """Records of tasks whose last action ended in ``[start, stop]`` (None: open),
        in order; the last ``count`` of them (None or 0: all)."""
        ...

    def task_runs(
        self, span_ids: Collection[str] | None = None, start: float | None = None
    ) -> list[TaskRun]:
        """The compute runs (``TaskStreamRecord.compute_run``) of the tasks that ended
        well since ``start`` (None: all kept), of the spans ``span_ids`` (None: any),
        in order: what the critical path and ``diagnose`` read, made without the
        records when the source can (a 100,000-task span's are many)."""
        ...

    # -- statistical profiles ---------------------------------------------------------------

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list[FlatRow]]:
        """Each worker's statistical profile over ``[start, stop]`` (None: open), for
        one task prefix or all, as ``core.profile_tree.to_flat`` rows by worker address;
        ``workers``: addresses, None for all."""
        ...

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, ProfileMetadata]:
        """Each worker's samples per profile cycle, by worker address."""
        ...

    def profile_interval(self) -> float:
        """Seconds between two samples of the statistical profiler."""
        ...

    def profile_cycle_interval(self) -> float:
        """Seconds covered by one entry of the profile history."""
        ...

    # -- transfers ------------------------------------------------------------------------

    def transfer_logs(self, workers: list[str] | None = None) -> dict[str, TransferLogs]:
        """Each worker's transfer logs by address (``workers``: addresses, None: all)."""
        ...


class WouldBlock(RuntimeError):
    """A read asked for on the very event loop that must answer it (an asynchronous
    ``distributed.Client``'s, from a coroutine or a notebook cell running on it): it
    cannot be waited for there. Views read from their own threads, where it works."""


@runtime_checkable
class HasDiagnostics(Protocol):
    """What views accept besides a source: an object handing one out (a Client)."""

    @property
    def diagnostics(self) -> DiagnosticsSource: ...


Diagnosable = DiagnosticsSource | HasDiagnostics

_MEMBERS = sorted(
    name
    for name in vars(DiagnosticsSource)
    if not name.startswith("_") and name not in {"register", "mro"}
)
