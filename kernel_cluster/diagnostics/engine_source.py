"""DiagnosticsSource over a KernelCluster: snapshots taken on the engine's loop."""

from __future__ import annotations

from ..engine.cluster import KernelCluster
from .spans import SpanInfo, snapshot_span


class EngineSource:
    def __init__(self, cluster: KernelCluster):
        self.cluster = cluster

    @property
    def kind(self) -> str:
        """How the cluster runs: ``"embedded"`` (worker threads in this process) or
        ``"processes"`` (worker processes); views show it."""
        return "processes" if self.cluster.processes else "embedded"

    def fine_metrics(self, refresh: bool = True) -> dict[tuple, float]:
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
        return loop.run(lambda: [snapshot_span(s) for s in tree.spans.values()])

    def progress(self) -> dict[str, dict[str, int]]:
        """Task state counts per task prefix, read on the engine's loop."""
        prefixes = self.cluster.scheduler.state.task_prefixes
        return self.cluster.loop_thread.run(
            lambda: {name: dict(p.states) for name, p in prefixes.items()}
        )

    def info(self) -> dict:
        """Workers and thread counts (``Client.scheduler_info``'s shape)."""
        return self.cluster.loop_thread.run(self.cluster.scheduler.scheduler_info)

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[dict[tuple, float], str]:
        loop = self.cluster.loop_thread
        tree = self.cluster.scheduler.spans
        loop.run(self.cluster.scheduler.refresh_metrics)

        def read() -> tuple[dict[tuple, float], str]:
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

    # -- task stream ------------------------------------------------------------------

    def now(self) -> float:
        return self.cluster.scheduler.clock()

    def task_stream_index(self) -> int:
        stream = self.cluster.scheduler.task_stream
        return self.cluster.loop_thread.run(lambda: stream.index)

    def task_stream_since(self, index: int) -> list[dict]:
        stream = self.cluster.scheduler.task_stream
        return self.cluster.loop_thread.run(lambda: _copy(stream.since(index)))

    def task_stream(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[dict]:
        stream = self.cluster.scheduler.task_stream
        return self.cluster.loop_thread.run(lambda: _copy(stream.window(start, stop, count)))

    # -- memory -------------------------------------------------------------------------

    def memory(self) -> dict[str, int]:
        """Cluster memory now: process (each process once), managed, unmanaged, spilled."""
        scheduler = self.cluster.scheduler

        def read() -> dict[str, int]:
            rss_by_pid: dict = {}
            managed = spilled = 0
            for address, info in scheduler.worker_info.items():
                rss_by_pid[info.get("pid") or address] = info.get("memory", 0)
                managed += info.get("managed", 0)
                spilled += info.get("spilled", 0)
            process = sum(rss_by_pid.values())
            return {
                "process": process,
                "managed": managed,
                "unmanaged": max(0, process - managed),
                "spilled": spilled,
            }

        self.cluster.loop_thread.run(scheduler.refresh_metrics)
        return self.cluster.loop_thread.run(read)

    # -- statistical profiles -------------------------------------------------------------

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list]:
        """Each worker's profile over the window, as ``core.profile.to_flat`` rows."""
        from functools import partial

        from ..engine.profiler import read_profile

        fn = partial(read_profile, start=start, stop=stop, prefix=prefix)
        scheduler = self.cluster.scheduler
        return self.cluster.loop_thread.run(scheduler.run_on_workers, fn, workers)

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, dict]:
        """Each worker's samples per profile cycle (``ProfileLog.metadata``)."""
        from functools import partial

        from ..engine.profiler import read_profile_metadata

        fn = partial(read_profile_metadata, start=start, stop=stop)
        scheduler = self.cluster.scheduler
        return self.cluster.loop_thread.run(scheduler.run_on_workers, fn, workers)

    def profile_interval(self) -> float:
        """Seconds between two samples of the statistical profiler."""
        return self.cluster.profile_interval

    def profile_cycle_interval(self) -> float:
        """Seconds covered by one entry of the profile history."""
        return self.cluster.profile_cycle_interval

    # -- transfers ------------------------------------------------------------------------

    def transfer_logs(self, workers: list[str] | None = None) -> dict[str, dict[str, list]]:
        """Each worker's transfer logs: ``{address: {"incoming": [...], "outgoing":
        [...]}}``, entries ``{peer, keys, total, compressed, start, stop}`` (copies)."""
        scheduler = self.cluster.scheduler
        return self.cluster.loop_thread.run(scheduler.run_on_workers, read_transfer_logs, workers)


def read_transfer_logs(dask_worker: object) -> dict[str, list]:
    """Run on a worker: copies of its incoming and outgoing transfer logs."""
    return {
        direction: [dict(e) for e in getattr(dask_worker, f"transfer_{direction}_log", ())]
        for direction in ("incoming", "outgoing")
    }


def _copy(records: list[dict]) -> list[dict]:
    """Plain copies: readers must not see (or change) the engine's own records."""
    return [{**r, "startstops": [dict(ss) for ss in r["startstops"]]} for r in records]
