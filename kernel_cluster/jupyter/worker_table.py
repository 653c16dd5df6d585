"""The Workers panel's rows, and what the sidebar says of a cluster's identity
(which engine, its scheduler's address, its dashboard), read through the
DiagnosticsSource: the same for this package's engine and an attached Dask cluster.
"""

from __future__ import annotations

from typing import Any

from ..diagnostics.snapshots import ClusterInfo

MAX_ROWS = 1000  # a table a browser draws once a second


def worker_rows(info: ClusterInfo) -> list[dict[str, Any]]:
    """One row per worker (``labextension``'s ``WorkerRow``): threads, CPU percent
    (None: unknown), process memory and its limit, results held and spilled, tasks
    executing and ready, paused."""
    rows = []
    for address, w in list(info.workers.items())[:MAX_ROWS]:
        rows.append(
            {
                "address": address,
                "name": "" if w.name is None else str(w.name),
                "nthreads": w.nthreads,
                "cpu": None if w.cpu_percent is None else round(float(w.cpu_percent), 1),
                "memory": w.memory_bytes,
                "memory_limit": w.memory_limit_bytes,
                "managed": w.managed_bytes if w.managed_bytes is not None else w.nbytes,
                "spilled": w.spilled_bytes,
                "executing": w.executing if w.executing is not None else w.processing,
                "ready": w.ready,
                "paused": w.paused,
            }
        )
    return rows


def identity(info: ClusterInfo) -> dict[str, Any]:
    """Which engine runs the cluster, where its scheduler listens, and its dashboard."""
    return {
        "engine": info.engine,
        "address": info.scheduler_address,
        "dashboard": info.dashboard_link,
    }
