"""DiagnosticsSource over a KernelCluster: snapshots taken on the engine's loop.

The only diagnostics module that touches the engine: it reads the scheduler's
state on the loop thread (or asks the workers, through ``run_on_workers``) and
turns what it reads into the plain data of ``snapshots``, so no view ever holds
an engine object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple, cast

import psutil

from ...core.critical_path import TaskRun
from ...core.span_summary import SpanCapture, capture, summarize_capture
from ...core.span_totals import subtree_totals
from ...core.spans import Span
from ...engine.cluster import KernelCluster
from ...engine.stack_sampler import read_profile, read_profile_metadata
from ..snapshots import (
    Changes,
    ClusterInfo,
    FinishedSpan,
    FinishedSpans,
    FlatRow,
    MemorySnapshot,
    Metrics,
    ProfileMetadata,
    SourceKind,
    SpanInfo,
    TaskStreamRecord,
    TransferLogEntry,
    TransferLogs,
    WorkerInfo,
)
from ..source import DiagnosticsSource
from .engine_changes import EngineChanges, raw_records, snapshot_span


class EngineSource:
    """The DiagnosticsSource of this package's engine (``client.diagnostics``)."""

    def __init__(self, cluster: KernelCluster):
        self.cluster = cluster
        self._cpu = _ProcessCpu()
        self._changes = EngineChanges(cluster)

    @property
    def kind(self) -> SourceKind:
        return "processes" if self.cluster.processes else "embedded"

    def now(self) -> float:
        return self.cluster.scheduler.clock()

    # -- fine metrics and spans ------------------------------------------------------

    def fine_metrics(self, refresh: bool = True) -> Metrics:
        loop = self.cluster.loop_thread
        scheduler = self.cluster.scheduler
        if refresh:
            loop.run(scheduler.refresh_metrics)
        return loop.run(lambda: dict(scheduler.worker_metrics))

    def spans(self, refresh: bool = True) -> list[SpanInfo]:
        loop = self.cluster.loop_thread
        tree = self.cluster.scheduler.spans
        if refresh:
            loop.run(self.cluster.scheduler.refresh_metrics)

        def read() -> list[SpanInfo]:
            # every span's subtree numbers in one pass: nested spans cost what flat do
            totals = subtree_totals(tree.spans.values(), tree.now())
            return [snapshot_span(s, totals[s.id]) for s in tree.spans.values()]

        return loop.run(read)

    def changes_since(self, cursor: int) -> Changes:
        """What changed since ``cursor`` (0: everything), read in short calls on the
        loop: cost proportional to what changed (``engine_changes.py``)."""
        return self._changes.since(cursor)

    def finished_spans(self, cursor: int = 0) -> FinishedSpans:
        """Three short calls on the loop: which spans finished (the tree's log), a
        heartbeat from every worker if any did (their last tasks' metrics), and copies
        of their numbers (``span_summary.capture``); the sums and snapshots are made
        here, on the caller's thread (the recorder's), off the loop. Nothing is read
        when nothing finished."""
        loop = self.cluster.loop_thread
        scheduler = self.cluster.scheduler
        finished = loop.run(scheduler.spans.finished_since, cursor)
        if not finished.spans:
            return FinishedSpans((), finished.cursor, finished.missed)
        loop.run(scheduler.refresh_metrics)

        def read() -> tuple[list[_Captured], int, int]:
            state = scheduler.state
            return [_capture(s) for s in finished.spans], len(state.workers), state.total_nthreads

        captured, workers, threads = loop.run(read)
        spans = tuple(_finished_span(c, workers, threads) for c in captured)
        return FinishedSpans(spans, finished.cursor, finished.missed)

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[Metrics, str]:
        loop = self.cluster.loop_thread
        tree = self.cluster.scheduler.spans
        loop.run(self.cluster.scheduler.refresh_metrics)

        def read() -> tuple[Metrics, str]:
            if isinstance(selector, str) and selector in tree.spans:
                span = tree.spans[selector]
                return span.cumulative_worker_metrics, " / ".join(span.name)
            tags = (selector,) if isinstance(selector, str) else tuple(selector)
            matches = list(tree.find_by_tags(*tags))
            if not matches:
                known = sorted({t for name in tree.spans_search_by_name for t in name})
                raise KeyError(
                    f"No span has the tag(s) {tags!r}; tags seen so far: {known[:10]!r}."
                )
            merged = tree.merge_by_tags(*tags)
            return merged.cumulative_worker_metrics, " | ".join(tags)

        return loop.run(read)

    # -- tasks and workers ---------------------------------------------------------------

    def progress(self) -> dict[str, dict[str, int]]:
        """Task state counts per task prefix, read on the engine's loop."""
        prefixes = self.cluster.scheduler.state.task_prefixes
        return self.cluster.loop_thread.run(
            lambda: {name: dict(p.states) for name, p in prefixes.items()}
        )

    def info(self) -> ClusterInfo:
        """Workers and thread counts (from ``Client.scheduler_info``'s dict), with
        each worker process's CPU use since the last call."""
        raw = self.cluster.loop_thread.run(self.cluster.scheduler.scheduler_info)
        cpu = self._cpu.read([w.get("pid") for w in raw["workers"].values()])
        return ClusterInfo(
            workers={a: _worker_info(a, w, cpu) for a, w in raw["workers"].items()},
            total_nthreads=int(raw["total_nthreads"]),
            tasks=int(raw.get("tasks", 0)),
            engine="kernel-cluster",
            scheduler_address=self.cluster.scheduler_address or None,
        )

    def memory(self) -> MemorySnapshot:
        """Cluster memory now: process (each process once), managed, unmanaged (and its
        least over the last 30 s of heartbeats), spilled."""
        scheduler = self.cluster.scheduler

        def read() -> MemorySnapshot:
            process, managed, spilled = scheduler.memory_totals()
            return MemorySnapshot(
                process_bytes=process,
                managed_bytes=managed,
                unmanaged_bytes=max(0, process - managed),
                spilled_bytes=spilled,
                unmanaged_old_bytes=scheduler.unmanaged_old(),
            )

        self.cluster.loop_thread.run(scheduler.refresh_metrics)
        return self.cluster.loop_thread.run(read)

    # -- the task stream -------------------------------------------------------------------

    def task_stream_index(self) -> int:
        stream = self.cluster.scheduler.task_stream
        return self.cluster.loop_thread.run(lambda: stream.index)

    # the plugin's records are new dicts made for the reader: turned into snapshots here,
    # off the engine's loop, which a long history would otherwise hold up

    def task_stream_since(self, index: int) -> list[TaskStreamRecord]:
        return self._changes.task_records(index)  # copied in chunks: a long history too

    def task_stream(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[TaskStreamRecord]:
        stream = self.cluster.scheduler.task_stream
        return raw_records(self.cluster.loop_thread.run(stream.window_raw, start, stop, count))

    def task_runs(
        self, span_ids: Collection[str] | None = None, start: float | None = None
    ) -> list[TaskRun]:
        stream = self.cluster.scheduler.task_stream
        return _runs(self.cluster.loop_thread.run(stream.window_raw, start, None, None), span_ids)

    # -- statistical profiles -------------------------------------------------------------

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list[FlatRow]]:
        """Each worker's profile over the window, as ``core.profile_tree.to_flat`` rows."""
        fn = partial(read_profile, start=start, stop=stop, prefix=prefix)
        scheduler = self.cluster.scheduler
        rows: dict[str, list[FlatRow]]
        rows = self.cluster.loop_thread.run(scheduler.run_on_workers, fn, workers)
        # rows that crossed from a worker process may have become lists: tuples again
        return {address: [cast(FlatRow, tuple(r)) for r in flat] for address, flat in rows.items()}

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, ProfileMetadata]:
        """Each worker's samples per profile cycle (``ProfileLog.metadata``)."""
        fn = partial(read_profile_metadata, start=start, stop=stop)
        scheduler = self.cluster.scheduler
        metas: dict[str, dict[str, Any]]
        metas = self.cluster.loop_thread.run(scheduler.run_on_workers, fn, workers)
        return {address: _profile_metadata(m) for address, m in metas.items()}

    def profile_interval(self) -> float:
        """Seconds between two samples of the statistical profiler."""
        return float(self.cluster.profile_interval)

    def profile_cycle_interval(self) -> float:
        """Seconds covered by one entry of the profile history."""
        return float(self.cluster.profile_cycle_interval)

    # -- transfers ------------------------------------------------------------------------

    def transfer_logs(self, workers: list[str] | None = None) -> dict[str, TransferLogs]:
        """Each worker's incoming and outgoing transfer logs, oldest first."""
        scheduler = self.cluster.scheduler
        logs: dict[str, dict[str, list[dict[str, Any]]]]
        logs = self.cluster.loop_thread.run(scheduler.run_on_workers, read_transfer_logs, workers)
        return {
            address: TransferLogs(
                incoming=_transfers(log["incoming"]), outgoing=_transfers(log["outgoing"])
            )
            for address, log in logs.items()
        }


def _conforms(source: EngineSource) -> DiagnosticsSource:
    """Never called: a type checker proves here that EngineSource is a source."""
    return source


def read_transfer_logs(dask_worker: Any) -> dict[str, list[dict[str, Any]]]:
    """Run on a worker (in its process): copies of its transfer logs, as plain dicts."""
    return {
        "incoming": [dict(e) for e in dask_worker.transfer_incoming_log],
        "outgoing": [dict(e) for e in dask_worker.transfer_outgoing_log],
    }


# -- engine data to snapshots --------------------------------------------------------------


class _Captured(NamedTuple):
    """A finished span's fields as copied on the loop (``_capture``)."""

    id: str
    name: tuple[str, ...]
    parent: str | None
    children: tuple[str, ...]
    enqueued: float
    code: tuple[Any, ...]
    root: str
    numbers: SpanCapture


_CODE_MAX = 1024
_codes: dict[tuple[Any, ...], tuple[tuple[tuple[Any, ...], ...], ...]] = {}


def _plain_code(code: tuple[Any, ...]) -> tuple[tuple[tuple[Any, ...], ...], ...]:
    """``code``'s stacks and frames as tuples, made once per distinct ``code``: spans
    made in a loop share it, and remaking it was a tenth of a finished span's cost.
    Bounded; shared by threads (a dict's get and set are atomic)."""
    try:
        plain = _codes.get(code)
    except TypeError:  # a frame as a list (unhashable)
        plain = None
        cacheable = False
    else:
        cacheable = True
    if plain is None:
        plain = tuple(tuple(tuple(frame) for frame in stack) for stack in code)
        if cacheable:
            if len(_codes) >= _CODE_MAX:
                _codes.clear()
            _codes[code] = plain
    return plain


def _capture(span: Span) -> _Captured:
    root = span
    while root.parent is not None:
        root = root.parent
    return _Captured(
        span.id,
        tuple(span.name),
        span.parent.id if span.parent is not None else None,
        tuple(c.id for c in span.children),
        span.enqueued,
        tuple(span.code),  # its stacks are tuples; the list grows
        root.id,
        capture(span),
    )


def _finished_span(c: _Captured, workers: int, threads: int) -> FinishedSpan:
    s = summarize_capture(c.numbers)
    info = SpanInfo(
        id=c.id,
        name=c.name,
        parent=c.parent,
        children=c.children,
        enqueued=c.enqueued,
        start=s.start,
        stop=s.stop,
        duration=sum(s.all_durations.values()),
        nbytes_total=s.nbytes_total,
        states=s.states,
        done=s.done,
        active_cpu_seconds=s.active_cpu_seconds,
        metrics=s.metrics,
        code=_plain_code(c.code),
    )
    return FinishedSpan(info, c.root, s.tasks_by_prefix, s.nbytes_by_prefix, workers, threads)


class _ProcessCpu:
    """CPU percent of processes by pid, each since the previous reading (psutil's
    way: the first reading of a process is 0). Embedded workers report the kernel's
    pid, or none: they share this process."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()

    def read(self, pids: list[Any]) -> dict[int, float]:
        wanted = {int(p) if p else os.getpid() for p in pids}
        out: dict[int, float] = {}
        with self._lock:
            for pid in list(self._procs):
                if pid not in wanted:
                    del self._procs[pid]
            for pid in wanted:
                try:
                    proc = self._procs.get(pid)
                    if proc is None:
                        proc = self._procs[pid] = psutil.Process(pid)
                    out[pid] = proc.cpu_percent(None)
                except (psutil.Error, OSError):
                    self._procs.pop(pid, None)
        return out


def _worker_info(
    address: str, w: Mapping[str, Any], cpu: Mapping[int, float] | None = None
) -> WorkerInfo:
    pid = w.get("pid")
    return WorkerInfo(
        address=address,
        name=w.get("name"),
        nthreads=int(w["nthreads"]),
        memory_limit_bytes=w.get("memory_limit"),
        processing=int(w.get("processing", 0)),
        paused=bool(w.get("paused", False)),
        nbytes=int(w.get("nbytes", 0)),
        keys=int(w.get("keys", 0)),
        memory_bytes=int(w.get("memory") or 0),
        pid=pid,
        last_seen=w.get("last_seen"),
        executing=int(w["executing"]) if "executing" in w else None,
        ready=int(w.get("ready", 0)),
        managed_bytes=int(w["managed"]) if "managed" in w else None,
        spilled_bytes=int(w.get("spilled", 0)),
        cpu_percent=(cpu or {}).get(int(pid) if pid else os.getpid()),
    )


def _runs(raw: Iterable[tuple[Any, ...]], span_ids: Collection[str] | None) -> list[TaskRun]:
    """``TaskStreamRecord.compute_run`` of the raw records that ended well, without
    the records (a 100,000-task span's critical path made them all, for a third of
    its time)."""
    out = []
    for _, key, _, span, worker, thread, status, _, startstops, deps, sent in raw:
        if status != "OK" or (span_ids is not None and span not in span_ids):
            continue
        compute = None
        transfers = []
        for ss in startstops:
            if ss[0] == "compute":
                compute = ss
            elif ss[0] == "transfer":
                transfers.append((ss[1], ss[2]))
        if compute is not None:
            out.append(
                TaskRun(key, deps, worker, thread, compute[1], compute[2], sent, tuple(transfers))
            )
    return out


def _profile_metadata(meta: Mapping[str, Any]) -> ProfileMetadata:
    return ProfileMetadata(
        counts=tuple((float(t), int(n)) for t, n in meta.get("counts", ())),
        keys={
            str(p): tuple((float(t), int(n)) for t, n in points)
            for p, points in meta.get("keys", {}).items()
        },
        cycle_seconds=meta.get("cycle_interval"),
    )


def _transfers(entries: Iterable[Mapping[str, Any]]) -> tuple[TransferLogEntry, ...]:
    return tuple(
        TransferLogEntry(
            peer=str(e["peer"]),
            keys=tuple(e["keys"]),
            total_bytes=int(e["total"]),
            compressed_bytes=int(e.get("compressed", e["total"])),
            start=float(e["start"]),
            stop=float(e["stop"]),
            n_keys=int(e.get("n_keys", len(e["keys"]))),
        )
        for e in entries
    )
