"""What the JupyterLab sidebar's cluster controls do in the kernel
(``jupyter/cluster_controls.ClusterControls``): start a ``KernelCluster`` with a
``Client`` that becomes the kernel's default (``get_client()``, and every view made
without a client), scale the default client's cluster, stop it.

The sidebar acts on the kernel's current client (the latest ``Client``): scaling and
stopping are offered only while the views show that client's cluster, never for a
Dask cluster attached with ``kernel_cluster.attach`` (it belongs to its own objects).
"""

from __future__ import annotations

from typing import Any

from ..diagnostics.source import DiagnosticsSource
from ..engine.cluster import KernelCluster
from .client import Client, get_client


def _current() -> Client | None:
    try:
        return get_client()
    except ValueError:
        return None


class LabControls:
    """``ClusterControls`` over this package's clients and clusters."""

    def __init__(self) -> None:
        # the cluster the sidebar started and the code that makes it, for "insert client code"
        self.started: KernelCluster | None = None
        self.started_code: str | None = None

    def start(
        self, *, processes: bool, n_workers: int, threads_per_worker: int, memory_limit: str
    ) -> str:
        current = _current()
        if current is not None and current.cluster.status == "running":
            raise RuntimeError(
                f"This kernel has a cluster already ({current.cluster.name}, used by "
                f"{current.id}); stop it first, or scale it."
            )
        cluster = KernelCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=processes,
            memory_limit=memory_limit or "auto",
        )
        try:
            Client(cluster)  # the default client from now on
        except BaseException:
            cluster.close()
            raise
        args = [f"n_workers={n_workers}", f"threads_per_worker={threads_per_worker}"]
        if processes:
            args.append("processes=True")
        if memory_limit:
            args.append(f"memory_limit={memory_limit!r}")
        self.started = cluster
        self.started_code = f"KernelCluster({', '.join(args)})"
        kind = "worker process" if processes else "embedded worker"
        workers = f"{n_workers} {kind}" + ("" if n_workers == 1 else "es" if processes else "s")
        threads = f"{threads_per_worker} thread" + ("" if threads_per_worker == 1 else "s")
        return f"Started {cluster.name}: {workers}, {threads} each."

    def scale(self, n_workers: int) -> str:
        client = self._controlled()
        client.cluster.scale(n_workers)
        return f"{client.cluster.name} has {n_workers} worker{'s' if n_workers != 1 else ''}."

    def stop(self) -> str:
        client = self._controlled()
        cluster = client.cluster
        client.close()
        cluster.close()
        if cluster is self.started:
            self.started = self.started_code = None
        return f"Stopped {cluster.name}."

    def _controlled(self) -> Client:
        client = _current()
        if client is None:
            raise RuntimeError("This kernel has no cluster; start one first.")
        return client

    def abilities(self, source: DiagnosticsSource | None) -> dict[str, Any]:
        client = _current()
        ours = client is not None and source is not None and source is client.diagnostics
        code = None
        if ours:
            code = "from kernel_cluster import get_client\n\nclient = get_client()"
            if client is not None and client.cluster is self.started and self.started_code:
                code += f"  # started from the sidebar: {self.started_code}"
        return {"scale": ours, "stop": ours, "client_code": code}
