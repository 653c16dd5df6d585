"""What the JupyterLab sidebar's status says of a cluster: its summary (workers,
threads, tasks, the running spans) and a memory sample (``lab.py`` sends them)."""

from __future__ import annotations

import collections
from typing import Any

from ..diagnostics.snapshots import ClusterInfo
from ..diagnostics.source import DiagnosticsSource
from .hub import Mirror
from .worker_table import identity

CURRENT_SPANS = 8  # how many running spans the sidebar lists


def cluster_summary(
    source: DiagnosticsSource, info: ClusterInfo | None = None, mirror: Mirror | None = None
) -> dict[str, Any]:
    """What the sidebar shows of a cluster, read through its DiagnosticsSource, or
    from the hub's ``mirror`` of it (no read of every span then)."""
    info = source.info() if info is None else info
    workers = info.workers
    if mirror is not None:
        progress: Any = mirror.progress
        spans = [_Span(i, **r) for i, r in list(mirror.spans.items())]
    else:
        progress = source.progress()
        spans = [
            _Span(s.id, list(s.name), s.parent, s.enqueued, s.start, s.states, s.done)
            for s in source.spans(refresh=False)
        ]
    now: collections.Counter[str] = collections.Counter()  # tasks the scheduler holds
    for states in list(progress.values()):
        now.update(states)
    ever: collections.Counter[str] = collections.Counter()  # root spans count forgotten ones too
    for s in spans:
        if s.parent is None:
            ever.update(s.states)
    running = [s for s in spans if not s.done and s.id != "default-folded"]
    running.sort(key=lambda s: s.start or s.enqueued or 0.0)
    return {
        "kind": source.kind,
        **identity(info),
        "workers": len(workers),
        "threads": info.total_nthreads,
        "memory_limit": sum(w.memory_limit_bytes or 0 for w in workers.values()),
        "tasks": {
            "in_flight": now["processing"],
            "waiting": now["waiting"] + now["queued"] + now["no-worker"],
            # released: a result dropped once nothing needed it (widgets/src/spanTree.ts)
            "done": ever["memory"] + ever["forgotten"] + ever["released"],
            "erred": ever["erred"],
        },
        "spans": [{"id": s.id, "name": list(s.name)} for s in running[-CURRENT_SPANS:]],
    }


class _Span:
    """What the summary reads of a span (a ``SpanInfo`` or a span record)."""

    def __init__(
        self,
        id: str,
        name: list[str],
        parent: str | None,
        enqueued: float,
        start: float,
        states: dict[str, int],
        done: bool,
        **_: Any,
    ) -> None:
        self.id, self.name, self.parent, self.enqueued = id, name, parent, enqueued
        self.start, self.states, self.done = start, states, done


def memory_sample(source: DiagnosticsSource, now: float) -> list[float] | None:
    """``[time, process, managed, unmanaged, spilled]`` bytes, or None if the source
    cannot tell."""
    m = source.memory()
    if m is None:
        return None
    return [now, m.process_bytes, m.managed_bytes, m.unmanaged_bytes, m.spilled_bytes]
