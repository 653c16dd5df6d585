"""The run history from the user's door: recording starts here, comparing is asked here.

The client layer starts the recorders, because it is where a cluster meets its
views: ``Client()`` records its cluster's finished spans (unless
``KernelCluster(history=False)`` or ``KERNEL_CLUSTER_HISTORY=off``), and stops the
recorder when the cluster closes (after its last spans are written);
``kernel_cluster.attach(dask_client)`` records that Dask cluster's. Comparing
without a client reads the default source (the latest Client, or ``attach``'s)
for live spans, or the history alone when there is none.
"""

from __future__ import annotations

import functools
from typing import Any

from ..diagnostics import attach as attaching
from ..diagnostics.history import recorder
from ..diagnostics.source import Diagnosable, DiagnosticsSource
from ..engine.cluster import KernelCluster


def record_cluster(cluster: KernelCluster, source: DiagnosticsSource) -> None:
    """Record ``cluster``'s finished spans (once per cluster)."""
    if not cluster.history or recorder.recorder_of(cluster) is not None:
        return
    kind = "processes" if cluster.processes else "embedded"
    if recorder.record(source, cluster, kind=kind, cluster=cluster.name) is not None:
        cluster.on_close(functools.partial(recorder.stop, cluster))


def attach(client: object) -> DiagnosticsSource:
    """Make ``client`` (a ``distributed.Client``, a kernel_cluster Client, or a source)
    the default source: views made without a client read it, the JupyterLab panels
    follow it, and ``span()`` opens Dask spans while it is a Dask client's. A Dask
    cluster's finished spans are recorded in the run history from then on."""
    source = attaching.attach(client)
    if type(source).__name__ == "DaskSource":
        address = getattr(source, "address", "?")
        recorder.record(source, source, kind="dask", cluster=f"dask {address}")
    return source


def default_or_none() -> DiagnosticsSource | None:
    try:
        return attaching.default_source()
    except ValueError:  # no client open: stored runs only
        return None


def compare(a: Any, b: Any, client: Diagnosable | None = None, unit: str | None = "seconds") -> Any:
    """Compare two runs: ``a`` (the baseline) and ``b`` name live spans (id or name) of
    ``client``'s cluster (default: the latest Client, or ``attach``'s), stored runs (id,
    or ``name@-1`` for the latest stored run of that name other than the other side),
    or are ``StoredRun``s. A tidy DataFrame ``function, activity, unit, a, b, delta,
    ratio`` and normalised columns (per task, per wall-clock second), with the
    functions' task counts and bytes, sorted by the size of the change; its ``attrs``
    hold both runs' summaries and the one-line ``verdict``. ``unit=None``: every unit.
    See ``kernel_cluster.diagnostics.history.compare``."""
    source = attaching.source_of(client) if client is not None else default_or_none()
    from ..diagnostics.history import compare as comparing  # numpy and pandas, when used

    return comparing.compare(a, b, source, unit=unit)
