"""Findings: what a span's numbers say to try, most costly first.

``diagnose(source, span)`` gathers the ``Evidence`` (fine metrics, the task stream,
the critical path) through the DiagnosticsSource, and each rule reads it: a rule
either finds something (a ``Finding``: title, what it cost in thread-seconds, the
numbers it read, what to try), finds nothing, or says why it could not check (a
Dask cluster's idle is not split by reason, and its task stream has no
dependencies). The rules are pure functions of the evidence, so they are tested by
feeding numbers; their thresholds are the named constants below.

Not yet a rule: GIL contention (waiting for the GIL and sleeping or I/O both show
as ``thread-noncpu``; telling them apart needs the profiler's samples); it is listed
among the checks not made.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.critical_path import CriticalPath, TaskRun
from ...core.idle_reasons import IDLE, IDLE_PREFIX, is_idle
from ..snapshots import Metrics, TaskStreamRecord, records_runs
from ..source import DiagnosticsSource
from .critical_path import select_spans, span_critical_path

# tasks too small: overhead (executor hand-off, the task runner's own time, threads
# idle between tasks while the scheduler refills them) over this share of thread
# time, with the median task shorter than this
OVERHEAD_SHARE = 0.2
SMALL_TASK_SECONDS = 0.001
SMALL_TASKS_AT_LEAST = 100  # a handful of tiny tasks costs nothing worth advice
# spilling: disk reads and writes, with the (de)compressing and serializing of what
# is spilled, over this share of thread time
SPILL_SHARE = 0.1
# serialization: (de)serializing and (de)compressing what moves between workers, and
# tasks' own deserializing, over this share of thread time
SERIALIZATION_SHARE = 0.1
# transfer-bound: waiting for inputs (or fetching them) over this many times compute
TRANSFER_RATIO = 1.0
# idle-bound: threads idle with nothing ready over this share of thread time, and the
# path through dependencies over this share of the wall
NO_READY_SHARE = 0.5
DEPENDENCY_PATH_SHARE = 0.5
# imbalance: the busiest worker computed this many times the others' mean, and the
# difference is this share of the busiest's time at least (not a few milliseconds)
IMBALANCE_RATIO = 2.0
IMBALANCE_MIN_SECONDS = 0.05

COMPUTE = ("thread-cpu", "thread-noncpu")
OVERHEAD = (
    "executor",
    "other",
    IDLE,
    IDLE_PREFIX + "scheduler-queued",
    IDLE_PREFIX + "no-ready-task",
    IDLE_PREFIX + "other",
)
# on a task thread (context execute), (de)compressing and serializing is spilling's;
# deserializing is also a task's own (in a worker process)
SPILL = ("disk-read", "disk-write", "compress", "decompress", "serialize")
SERIALIZATION = ("serialize", "deserialize", "compress", "decompress")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the rules read. ``seconds``: execute seconds by activity; ``other_seconds``:
    seconds of the other contexts by (context, activity) (None for a span: they have
    no span); ``durations``: each task's compute seconds; ``busy``: compute seconds
    by worker; ``path``: the critical path (None: unavailable); ``split_idle``: whether
    idle comes split by reason."""

    seconds: Mapping[str, float]
    other_seconds: Mapping[tuple[str, str], float] | None
    durations: tuple[float, ...]
    busy: Mapping[str, float]
    path: CriticalPath | None
    split_idle: bool

    @property
    def thread_seconds(self) -> float:
        return sum(self.seconds.values())

    def total(self, activities: Iterable[str]) -> float:
        return sum(self.seconds.get(a, 0.0) for a in activities)


@dataclass(frozen=True, slots=True)
class Finding:
    """``cost``: the thread-seconds (or wall seconds, for the path) it stands for."""

    rule: str
    title: str
    cost: float
    evidence: dict[str, float]
    advice: str

    def evidence_text(self) -> str:
        return ", ".join(f"{k} {_fmt(k, v)}" for k, v in self.evidence.items())

    def __str__(self) -> str:
        return f"{self.title}\n  evidence: {self.evidence_text()}\n  try: {self.advice}"


@dataclass(frozen=True, slots=True)
class Findings:
    """``found``, most costly first; ``unchecked``: rule -> why it could not check."""

    found: tuple[Finding, ...]
    unchecked: dict[str, str] = field(default_factory=dict)
    label: str = ""

    def __iter__(self) -> Any:
        return iter(self.found)

    def __len__(self) -> int:
        return len(self.found)

    @property
    def rules(self) -> list[str]:
        return [f.rule for f in self.found]

    def __str__(self) -> str:
        head = f"Findings for {self.label}" if self.label else "Findings"
        lines = [f"{head}: {len(self.found) or 'nothing to report'}"]
        lines += [f"{i}. {f}" for i, f in enumerate(self.found, 1)]
        lines += [f"not checked: {r} ({why})" for r, why in self.unchecked.items()]
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _fmt(name: str, v: float) -> str:
    return f"{v:.0%}" if "share" in name else f"{v:.3g}"


Rule = Callable[[Evidence], "Finding | str | None"]  # a finding, why not checked, or None


def tasks_too_small(ev: Evidence) -> Finding | str | None:
    total = ev.thread_seconds
    if total <= 0 or not ev.durations:
        return None
    overhead = ev.total(OVERHEAD)
    median = statistics.median(ev.durations)
    if (
        overhead > OVERHEAD_SHARE * total
        and median < SMALL_TASK_SECONDS
        and len(ev.durations) >= SMALL_TASKS_AT_LEAST
    ):
        return Finding(
            "tasks-too-small",
            "Tasks are too small: scheduling and hand-off cost more than the work",
            overhead,
            {
                "overhead share": overhead / total,
                "median task seconds": median,
                "tasks": float(len(ev.durations)),
            },
            "make bigger chunks (fewer, larger tasks), or batch small calls in one task",
        )
    return None


def spilling(ev: Evidence) -> Finding | str | None:
    total, disk = ev.thread_seconds, ev.total(SPILL)
    if total > 0 and disk > SPILL_SHARE * total:
        return Finding(
            "spilling",
            "Spilling to disk: reading and writing spilled data took much thread time",
            disk,
            {"disk share": disk / total, "disk seconds": disk},
            "raise the memory limit, persist less at once, or release results sooner",
        )
    return None


def serialization(ev: Evidence) -> Finding | str | None:
    total = ev.thread_seconds
    spent = ev.seconds.get("deserialize", 0.0)  # the rest of execute's is spilling's
    if ev.other_seconds:
        spent += sum(v for (_, a), v in ev.other_seconds.items() if a in SERIALIZATION)
    if total > 0 and spent > SERIALIZATION_SHARE * total:
        return Finding(
            "serialization",
            "Serialization: (de)serializing and (de)compressing data took much time",
            spent,
            {"share of thread time": spent / total, "seconds": spent},
            "pass smaller values between tasks, keep data where it is used, or use "
            "types that pickle cheaply (numpy arrays rather than Python objects)",
        )
    return None


def transfer_bound(ev: Evidence) -> Finding | str | None:
    compute = ev.total(COMPUTE)
    waiting = ev.seconds.get(IDLE_PREFIX + "waiting-for-data", 0.0)
    fetching = 0.0
    if ev.other_seconds:
        fetching = sum(v for (c, _), v in ev.other_seconds.items() if c == "gather-dep")
    if not ev.split_idle and ev.other_seconds is None:
        return "idle is not split by reason and a span's transfers have no span"
    worst = max(waiting, fetching)
    if compute > 0 and worst > TRANSFER_RATIO * compute:
        return Finding(
            "transfer-bound",
            "Transfer-bound: threads waited for inputs from other workers longer than "
            "they computed",
            worst,
            {
                "waiting-for-data seconds": waiting,
                "gather-dep seconds": fetching,
                "compute seconds": compute,
            },
            "co-locate related work (fewer shuffles), make tasks larger so each input "
            "moved carries more work",
        )
    return None


def idle_bound(ev: Evidence) -> Finding | str | None:
    if not ev.split_idle:
        return "idle is not split by reason on this cluster"
    if ev.path is None:
        return "no critical path on this cluster"
    total = ev.thread_seconds
    none_ready = ev.seconds.get(IDLE_PREFIX + "no-ready-task", 0.0)
    wall = ev.path.wall
    by_dependency = sum(s.total for s in ev.path.steps if s.via != "thread")
    if (
        total > 0
        and wall > 0
        and none_ready > NO_READY_SHARE * total
        and by_dependency > DEPENDENCY_PATH_SHARE * wall
    ):
        return Finding(
            "idle-bound",
            "Idle-bound: most thread time had nothing ready to run, waiting on a chain "
            "of dependencies",
            none_ready,
            {
                "no-ready-task share": none_ready / total,
                "path share of wall": by_dependency / wall,
                "path tasks": float(len(ev.path.steps)),
            },
            "split the work into more partitions, or restructure the graph so that "
            "fewer tasks wait on one another (shorter chains, wider levels)",
        )
    return None


def imbalance(ev: Evidence) -> Finding | str | None:
    if len(ev.busy) < 2:
        return None
    worker, top = max(ev.busy.items(), key=lambda kv: kv[1])
    others = [v for w, v in ev.busy.items() if w != worker]
    mean = sum(others) / len(others)
    if top > IMBALANCE_RATIO * mean and top - mean > IMBALANCE_MIN_SECONDS:
        return Finding(
            "imbalance",
            f"Imbalance: worker {worker} computed far longer than the others",
            top - mean,
            {"busiest worker seconds": top, "others' mean seconds": mean},
            "check restrictions (workers=, resources) and where the inputs live; "
            "more, evenly sized partitions spread better",
        )
    return None


RULES: dict[str, Rule] = {
    "tasks-too-small": tasks_too_small,
    "spilling": spilling,
    "serialization": serialization,
    "transfer-bound": transfer_bound,
    "idle-bound": idle_bound,
    "imbalance": imbalance,
}
NOT_CHECKED = {
    "gil-contention": "not told apart from sleeping or I/O yet (both are thread-noncpu)",
}


def evaluate(ev: Evidence, label: str = "") -> Findings:
    """Every rule on ``ev``: what they found, most costly first, and what they could
    not check."""
    found = []
    unchecked = dict(NOT_CHECKED)
    for name, rule in RULES.items():
        out = rule(ev)
        if isinstance(out, Finding):
            found.append(out)
        elif isinstance(out, str):
            unchecked[name] = out
    found.sort(key=lambda f: f.cost, reverse=True)
    return Findings(tuple(found), unchecked, label)


def diagnose(source: DiagnosticsSource, span: Any = None) -> Findings:
    """Findings for ``span`` (an id, a tag or tags), or for everything (None)."""
    if span is None:
        metrics = source.fine_metrics()
        seconds = _execute_seconds(metrics, activity_at=3)
        other: dict[tuple[str, str], float] | None = {
            (str(k[0]), str(k[1])): float(v)
            for k, v in metrics.items()
            if len(k) == 3 and k[-1] == "seconds"
        }
        runs = source.task_runs()
        label = "all work"
        path = _path(source, None, None)  # the latest span's
    else:
        metrics, label = source.span_metrics(span)
        seconds = _execute_seconds(metrics, activity_at=2)
        other = None
        _, ids = select_spans(source.spans(), span)
        runs = source.task_runs(ids)
        path = _path(source, span, runs)
    ev = _evidence(seconds, other, runs, source.info().workers, path)
    return evaluate(ev, label)


def block_findings(
    metrics: Metrics, records: Iterable[TaskStreamRecord], workers: Iterable[str]
) -> Findings:
    """Findings for a block of work (a performance report's): ``metrics`` as
    ``fine_metrics()`` keys them, summed over the block, and its tasks' records; no
    critical path (a block is no span), so idle-bound is not checked."""
    seconds = _execute_seconds(metrics, activity_at=3)
    other = {
        (str(k[0]), str(k[1])): float(v)
        for k, v in metrics.items()
        if len(k) == 3 and k[-1] == "seconds"
    }
    runs = records_runs(records)
    return evaluate(_evidence(seconds, other, runs, workers, None), "this block")


def as_data(findings: Findings) -> dict[str, Any]:
    """Plain data for a page: the findings in order, and the checks not made."""
    return {
        "found": [
            {
                "rule": f.rule,
                "title": f.title,
                "cost": f.cost,
                "evidence": f.evidence_text(),
                "advice": f.advice,
            }
            for f in findings.found
        ],
        "unchecked": dict(findings.unchecked),
    }


def _evidence(
    seconds: dict[str, float],
    other: dict[tuple[str, str], float] | None,
    runs: Iterable[TaskRun],
    workers: Iterable[str],
    path: CriticalPath | None,
) -> Evidence:
    durations, busy = _compute_times(runs)
    for worker in workers:  # a worker that computed nothing counts too
        busy.setdefault(worker, 0.0)
    split = any(is_idle(a) and a != IDLE for a in seconds)
    return Evidence(seconds, other, durations, busy, path, split or IDLE not in seconds)


def _execute_seconds(metrics: Metrics, activity_at: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if k[0] == "execute" and k[-1] == "seconds" and len(k) > activity_at:
            a = str(k[activity_at])
            out[a] = out.get(a, 0.0) + float(v)
    return out


def _compute_times(runs: Iterable[TaskRun]) -> tuple[tuple[float, ...], dict[str, float]]:
    durations = []
    busy: dict[str, float] = {}
    for r in runs:
        d = r.stop - r.start
        durations.append(d)
        busy[r.worker] = busy.get(r.worker, 0.0) + d
    return tuple(durations), busy


def _path(source: DiagnosticsSource, span: Any, runs: list[TaskRun] | None) -> CriticalPath | None:
    try:
        return span_critical_path(source, span, runs)
    except ValueError:  # no span ran yet, or a source without dependencies
        return None
