"""DiagnosticsSource over a KernelCluster: snapshots taken on the engine's loop."""

from __future__ import annotations

from ..engine.cluster import KernelCluster


class EngineSource:
    def __init__(self, cluster: KernelCluster):
        self.cluster = cluster

    def fine_metrics(self) -> dict[tuple, float]:
        loop = self.cluster.loop_thread
        scheduler = self.cluster.scheduler
        loop.run(scheduler.refresh_metrics)
        return loop.run(lambda: dict(scheduler.worker_metrics))
