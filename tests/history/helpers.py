"""Finished spans made by hand, and a history file in a temporary directory."""

from __future__ import annotations

from typing import Any

from kernel_cluster.diagnostics.history.store import Session
from kernel_cluster.diagnostics.snapshots import FinishedSpan, Metrics
from tests.views.fakes import span_info


def finished(
    span_id: str,
    name: tuple[str, ...],
    *,
    parent: str | None = None,
    root: str | None = None,
    start: float = 100.0,
    stop: float = 101.0,
    seconds: dict[tuple[str | None, str], float] | None = None,
    tasks: dict[str, int] | None = None,
    nbytes: dict[str, int] | None = None,
    workers: int = 1,
    threads: int = 4,
) -> FinishedSpan:
    """A finished span whose prefixes ran ``tasks`` tasks each (all in memory), with
    ``seconds`` metrics by (function, activity) and the engine's count and bytes."""
    tasks = {"inc": 10} if tasks is None else tasks
    nbytes = nbytes if nbytes is not None else {p: 8 * n for p, n in tasks.items()}
    metrics: Metrics = {}
    for (function, activity), value in (seconds or {("inc", "thread-cpu"): 1.0}).items():
        metrics[("execute", function, activity, "seconds")] = value
    for prefix, n in tasks.items():
        metrics[("execute", prefix, "tasks", "count")] = n
        metrics[("execute", prefix, "output", "bytes")] = nbytes.get(prefix, 0)
    info = span_info(
        span_id,
        name,
        parent,
        enqueued=start - 0.1,
        start=start,
        stop=stop,
        states={"memory": sum(tasks.values())},
        nbytes_total=sum(nbytes.values()),
        metrics=metrics,
    )
    return FinishedSpan(
        info,
        root or span_id,
        {p: {"memory": n} for p, n in tasks.items()},
        dict(nbytes),
        workers,
        threads,
    )


def session(uuid: str = "s1", **kw: Any) -> Session:
    fields: dict[str, Any] = {
        "uuid": uuid,
        "started": 50.0,
        "source": "analysis.ipynb",
        "host": "here",
        "pid": 1,
        "cwd": "/tmp",
        "kind": "embedded",
        "cluster": "KernelCluster-1",
        "versions": {"python": "3.11"},
        "git_commit": None,
    }
    fields.update(kw)
    return Session(**fields)
