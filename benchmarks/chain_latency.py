"""Where a dependency chain's time goes: one task after another, no parallelism.

    .venv/bin/python benchmarks/chain_latency.py

Prints the median milliseconds per step of a 2,000-task chain with worker
processes (the issue's target: under 1 ms), and, for the embedded engine, each
step split into: task end -> event loop wakes; the loop's work (worker, scheduler
and worker state machines again) until the next task is handed to the pool;
hand-off -> a thread starts it; and the task's own run. The split reads the
timestamps the engine records for fine metrics.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
import time

from kernel_cluster import Client, KernelCluster
from kernel_cluster.engine import worker as worker_module


def inc(x: int) -> int:
    return x + 1


def chain(n: int) -> tuple[dict, tuple]:
    dsk: dict = {("c", 0): (inc, 0)}
    for i in range(1, n):
        dsk[("c", i)] = (inc, ("c", i - 1))
    return dsk, ("c", n - 1)


def process_mode(n: int = 2000, repeats: int = 5) -> float:
    dsk, key = chain(n)
    cluster = KernelCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0)
    with cluster, Client(cluster, set_as_default=False) as client:
        client.get(dsk, key)
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            assert client.get(dsk, key) == n
            runs.append(1000 * (time.perf_counter() - t) / n)
    return statistics.median(runs)


def embedded_breakdown(n: int = 1000) -> dict[str, float]:
    passes: list[float] = []  # when the loop began handling finished tasks
    runs: list[tuple] = []  # (handed to the pool, started, ended), perf_counter clock
    original_done = worker_module.Worker._on_tasks_done
    original_account = worker_module.Worker._account

    def on_done(self):
        passes.append(time.perf_counter())
        return original_done(self)

    def account(self, events):
        runs.extend(ev.run for ev in events if getattr(ev, "run", None))
        return original_account(self, events)

    worker_module.Worker._on_tasks_done = on_done
    worker_module.Worker._account = account
    try:
        dsk, key = chain(n)
        cluster = KernelCluster(n_workers=1, threads_per_worker=1, memory_limit=0)
        with cluster, Client(cluster, set_as_default=False) as client:
            client.get(dsk, key)
            passes.clear()
            runs.clear()
            client.get(dsk, key)
    finally:
        worker_module.Worker._on_tasks_done = original_done
        worker_module.Worker._account = original_account
    runs.sort()
    parts: dict[str, list[float]] = {"wake": [], "loop work": [], "hand-off": [], "task": []}
    for prev, nxt in itertools.pairwise(runs):
        i = bisect.bisect_left(passes, prev[2])  # the loop pass that handled ``prev``
        if i >= len(passes) or not passes[i] < nxt[0]:
            continue
        parts["wake"].append(passes[i] - prev[2])
        parts["loop work"].append(nxt[0] - passes[i])
        parts["hand-off"].append(nxt[1] - nxt[0])
        parts["task"].append(prev[2] - prev[1])
    return {k: 1e6 * statistics.median(v) for k, v in parts.items()}


if __name__ == "__main__":
    print(f"worker processes: {process_mode():.3f} ms per chain step (median of 5)")
    print("embedded, one step (median, microseconds):")
    for part, us in embedded_breakdown().items():
        print(f"  {part:10} {us:7.0f}")
