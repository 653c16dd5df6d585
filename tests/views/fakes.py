"""A DiagnosticsSource made of plain data, changed by the tests.

``FakeSource`` implements the whole protocol: what a test does not fill in reads
as empty (no task stream, profiles, transfers; no memory measured).
``StreamSource`` adds a task stream, a profile and memory. ``run_workload`` fills a
StreamSource as the conformance suite's known workload would fill an engine.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from kernel_cluster.core.critical_path import TaskRun
from kernel_cluster.core.profile_tree import new_tree, to_flat
from kernel_cluster.core.scheduler_tasks import ALL_STATES
from kernel_cluster.diagnostics.snapshots import (
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
    StartStop,
    TaskStreamRecord,
    TransferLogEntry,
    TransferLogs,
    WorkerInfo,
    records_runs,
)


def span_info(id_: str, name: tuple[str, ...], parent: str | None = None, **kw: Any) -> SpanInfo:
    fields: dict[str, Any] = {
        "id": id_,
        "name": name,
        "parent": parent,
        "children": (),
        "enqueued": 1.0,
        "start": 1.0,
        "stop": 2.0,
        "duration": 1.0,
        "nbytes_total": 0,
        "states": {"memory": 1},
        "done": True,
        "active_cpu_seconds": 1.0,
        "metrics": {},
        "code": (),
    }
    fields.update(kw)
    return SpanInfo(**fields)


def worker_info(address: str, nthreads: int = 2) -> WorkerInfo:
    return WorkerInfo(
        address=address,
        name=address,
        nthreads=nthreads,
        memory_limit_bytes=None,
        processing=0,
        paused=False,
        nbytes=0,
        keys=0,
        memory_bytes=0,
        pid=None,
        last_seen=None,
    )


class FakeSource:
    kind: SourceKind = "embedded"

    def __init__(self) -> None:
        self.metrics: Metrics = {}
        self.span_list: list[SpanInfo] = []
        self.prefixes: dict[str, dict[str, int]] = {}
        self.workers: dict[str, WorkerInfo] = {"w1": worker_info("w1")}
        self.stream: list[TaskStreamRecord] = []
        self.trees: dict[str | None, dict[str, Any]] = {}  # profile by prefix (None: all)
        self.meta: dict[str, Any] = {"counts": [], "keys": {}, "cycle_interval": 1.0}
        self.mem: dict[str, int] | None = None  # None: measures no memory
        self.transfers: dict[str, TransferLogs] = {}
        self.finished: list[FinishedSpan] = []  # the finished-span log, appended to by tests
        self.t = 1000.0
        self.reads = 0
        self.stream_reads = 0
        self.profile_reads = 0
        self.closed = False

    def _check(self) -> None:
        self.reads += 1
        if self.closed:
            raise RuntimeError("cluster closed")

    def now(self) -> float:
        return self.t

    def fine_metrics(self, refresh: bool = True) -> Metrics:
        self._check()
        return dict(self.metrics)

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[Metrics, str]:
        self._check()
        by_id = {s.id: s for s in self.span_list}
        if isinstance(selector, str) and selector in by_id:
            span = by_id[selector]
            return dict(span.metrics), " / ".join(span.name)
        tags = (selector,) if isinstance(selector, str) else tuple(selector)
        matches = {s.id for s in self.span_list if set(tags) & set(s.name)}
        if not matches:
            raise KeyError(f"No span has the tag(s) {tags!r}.")
        merged: Metrics = {}
        for s in self.span_list:  # a matching parent covers its matching children
            if s.id in matches and s.parent not in matches:
                for k, v in s.metrics.items():
                    merged[k] = merged.get(k, 0.0) + v
        return merged, " | ".join(tags)

    def spans(self, refresh: bool = True) -> list[SpanInfo]:
        self._check()
        return list(self.span_list)

    def finished_spans(self, cursor: int = 0) -> FinishedSpans:
        self._check()
        if not 0 <= cursor <= len(self.finished):
            cursor = 0
        return FinishedSpans(tuple(self.finished[cursor:]), len(self.finished), 0)

    def progress(self) -> dict[str, dict[str, int]]:
        self._check()
        return {k: dict(v) for k, v in self.prefixes.items()}

    def info(self) -> ClusterInfo:
        workers = dict(self.workers)
        return ClusterInfo(workers, sum(w.nthreads for w in workers.values()), 0)

    def memory(self) -> MemorySnapshot | None:
        self._check()
        if self.mem is None:
            return None
        m = self.mem
        return MemorySnapshot(m["process"], m["managed"], m["unmanaged"], m["spilled"])

    def task_stream_index(self) -> int:
        self._check()
        return len(self.stream)

    def task_stream_since(self, index: int) -> list[TaskStreamRecord]:
        self._check()
        self.stream_reads += 1
        return self.stream[index:]

    def task_stream(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[TaskStreamRecord]:
        self._check()
        out = []
        for r in self.stream:
            end = max((ss.stop for ss in r.startstops), default=0.0)
            if (start is None or end >= start) and (stop is None or end <= stop):
                out.append(r)
        return out[-count:] if count else out

    def task_runs(
        self, span_ids: Collection[str] | None = None, start: float | None = None
    ) -> list[TaskRun]:
        return records_runs(self.task_stream(start=start), span_ids)

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list[FlatRow]]:
        self._check()
        self.profile_reads += 1
        if not self.trees:
            return {}
        tree = self.trees.get(prefix) or new_tree()
        return {w: to_flat(tree) for w in ["w1"] if workers is None or w in workers}

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, ProfileMetadata]:
        self._check()
        meta = ProfileMetadata(
            counts=tuple(self.meta["counts"]),
            keys={p: tuple(v) for p, v in self.meta["keys"].items()},
            cycle_seconds=self.meta.get("cycle_interval"),
        )
        return {w: meta for w in ["w1"] if workers is None or w in workers}

    def profile_interval(self) -> float:
        return 0.01

    def profile_cycle_interval(self) -> float:
        return 1.0

    def transfer_logs(self, workers: list[str] | None = None) -> dict[str, TransferLogs]:
        self._check()
        return {w: t for w, t in self.transfers.items() if workers is None or w in workers}


class CountingSource(FakeSource):
    """A FakeSource that counts its ``changes_since`` reads (answered by diffing, as
    the Dask source's are)."""

    def __init__(self) -> None:
        super().__init__()
        from kernel_cluster.diagnostics.changes import Differ

        self.change_reads = 0
        self._differ = Differ(self)

    def changes_since(self, cursor: int) -> Changes:
        self.change_reads += 1
        return self._differ.changes_since(cursor)


class Clock:
    """Time that the test moves: ``clock.t += 1`` for a publisher's rate bound, and
    ``advance`` for a ``Poller`` that waits on it (``pause``), so that a test shows
    that nothing happens over some seconds without sleeping through them."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self._cond = threading.Condition()
        self._until: list[float] = []  # when each paused thread's pause ends
        self.pauses = 0  # pauses begun, ever

    def __call__(self) -> float:
        return self.t

    @property
    def pausing(self) -> int:
        """How many threads wait on this clock now."""
        return len(self._until)

    def pause(self, stop: threading.Event, seconds: float) -> bool:
        """A Poller's wait: until ``advance`` has moved the clock ``seconds`` on, or
        ``stop`` is set (which notifies nobody here: checked every 10 ms)."""
        with self._cond:
            until = self.t + seconds
            self._until.append(until)
            self.pauses += 1
            self._cond.notify_all()
            try:
                while self.t < until and not stop.is_set():
                    self._cond.wait(0.01)
            finally:
                self._until.remove(until)
                self._cond.notify_all()
            return stop.is_set()

    def advance(self, seconds: float, settle: bool = True, timeout: float = 10.0) -> None:
        """Move the clock on. ``settle``: return once every thread whose pause that
        ended has paused again (it ticked meanwhile), so the test sees what the ticks
        did; a thread that stops instead would keep it waiting until ``timeout``."""
        with self._cond:
            self.t += seconds
            woken = sum(1 for until in self._until if until <= self.t)
            expected = self.pauses + woken
            self._cond.notify_all()
            if settle:
                done = self._cond.wait_for(lambda: self.pauses >= expected, timeout)
                assert done, f"{woken} paused threads did not come back within {timeout} s"


def record(
    index: int,
    key: str,
    worker: str = "w1",
    thread: int = 1,
    start: float = 0.0,
    startstops: tuple[StartStop, ...] | None = None,
    **kw: Any,
) -> TaskStreamRecord:
    """A task stream record: ``startstops`` default to one compute of 1 s at ``start``."""
    fields: dict[str, Any] = {
        "index": index,
        "key": key,
        "prefix": key.split("-")[0],
        "span_id": None,
        "worker": worker,
        "thread": thread,
        "status": "OK",
        "nbytes": 8,
        "startstops": (
            startstops if startstops is not None else (StartStop("compute", start, start + 1.0),)
        ),
    }
    fields.update(kw)
    return TaskStreamRecord(**fields)


class StreamSource(FakeSource):
    """A FakeSource with a task stream, a profile and memory."""

    def __init__(self) -> None:
        super().__init__()
        self.trees[None] = new_tree()
        self.mem = {"process": 100, "managed": 10, "unmanaged": 90, "spilled": 0}

    def add(self, *keys: str, **kw: Any) -> None:
        for key in keys:
            self.stream.append(record(len(self.stream), key, **kw))


def run_workload(source: StreamSource, tag: str) -> tuple[str, str]:
    """What ``tests/diagnostics/test_source_conformance.py``'s workload leaves in an
    engine, as data: spans (tag,) > (tag, "load"); ten ``inc`` tasks in the inner span
    on two workers, then one ``total`` of them in the outer span on w1, which
    fetched w2's results. Returns the (outer, inner) span ids."""
    outer, inner = f"{tag}-outer", f"{tag}-inner"
    source.workers.setdefault("w2", worker_info("w2"))
    t0 = source.t + 0.5
    incs = []
    for i in range(10):
        start = t0 + 0.01 * i
        incs.append((f"inc-{i}", "w1" if i % 2 else "w2", start))
        source.add(f"inc-{i}", worker=incs[-1][1], start=start, span_id=inner)
    fetched = tuple(k for k, w, _ in incs if w == "w2")
    t1 = t0 + 1.5
    transfer = TransferLogEntry(
        "w2", fetched, 8 * len(fetched), 8 * len(fetched), t1, t1 + 0.01, len(fetched)
    )
    source.add(
        "total-0",
        worker="w1",
        span_id=outer,
        startstops=(StartStop("transfer", t1, t1 + 0.01, "w2"), StartStop("compute", t1, t1 + 0.1)),
    )
    w1, w2 = source.transfers.get("w1", TransferLogs()), source.transfers.get("w2", TransferLogs())
    source.transfers["w1"] = TransferLogs((*w1.incoming, transfer), w1.outgoing)
    source.transfers["w2"] = TransferLogs(w2.incoming, (*w2.outgoing, replace(transfer, peer="w1")))
    inner_m = {("execute", "inc", "tasks", "count"): 10.0}
    inner_m[("execute", "inc", "thread-cpu", "seconds")] = 0.5
    outer_m = {**inner_m, ("execute", "total", "tasks", "count"): 1.0}
    for (_, p, a, u), v in outer_m.items():
        span_id = inner if p == "inc" else outer
        key = ("execute", span_id, p, a, u)
        source.metrics[key] = source.metrics.get(key, 0.0) + v
    network = ("gather-dep", "network", "bytes")
    source.metrics[network] = source.metrics.get(network, 0.0) + transfer.total_bytes

    def states(n: int) -> dict[str, int]:
        return {**dict.fromkeys(ALL_STATES, 0), "memory": n}

    common: dict[str, Any] = {
        "enqueued": t0 - 0.1,
        "start": t0,
        "done": True,
        "active_cpu_seconds": 4.0,
    }
    source.span_list += [
        span_info(outer, (tag,), children=(inner,), stop=t1 + 0.1, duration=0.61,
                  nbytes_total=88, states=states(11), metrics=outer_m, **common),
        span_info(inner, (tag, "load"), parent=outer, stop=t0 + 0.1, duration=0.5,
                  nbytes_total=80, states=states(10), metrics=inner_m, **common),
    ]  # fmt: skip
    inner_span, outer_span = source.span_list[-1], source.span_list[-2]
    source.finished += [
        FinishedSpan(inner_span, outer, {"inc": {"memory": 10}}, {"inc": 80}, 2, 4),
        FinishedSpan(outer_span, outer, {"inc": {"memory": 10}, "total": {"memory": 1}},
                     {"inc": 80, "total": 8}, 2, 4),
    ]  # fmt: skip
    for prefix, n in (("inc", 10), ("total", 1)):
        counts = source.prefixes.setdefault(prefix, dict.fromkeys(ALL_STATES, 0))
        counts["memory"] += n
    source.mem = {"process": 2**20, "managed": 88, "unmanaged": 2**20 - 88, "spilled": 0}
    source.meta = {"counts": [(t1, 5)], "keys": {"inc": [(t1, 5)]}, "cycle_interval": 1.0}
    source.t = t1 + 1.0
    return outer, inner
