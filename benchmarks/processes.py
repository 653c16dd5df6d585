"""Subprocess workers next to dask.distributed, on the same work in one run.

Both sides: two worker processes with one thread each on this machine,
``KernelCluster(n_workers=2, threads_per_worker=1, processes=True)`` and
``LocalCluster(n_workers=2, threads_per_worker=1)``. Dask is measured twice for
task throughput: with its defaults and with
``distributed.scheduler.worker-saturation: inf`` (no root-task queueing).

    make bench-processes       (or .venv-bench/bin/python benchmarks/processes.py)

Measured, each as the median of interleaved repeats:
  start-up        cluster + client ready, seconds
  trivial         10,000 independent trivial tasks (map + gather), tasks/s
  tree            tree reduction over 4,096 leaves (dict graph, get), tasks/s
  chain           2,000 dependent tasks (dict graph, get), milliseconds per step
  transfer        an 8 MB numpy array made on worker A and used on worker B, GB/s,
                  end to end (submit to result) and on the wire (the receiving
                  worker's transfer log)
Ratios are ours / Dask's, oriented so that above 1 means ours is better.
Results also go to benchmarks/results/processes_vs_distributed.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import operator
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "processes_vs_distributed.json"
N_TRIVIAL = 10_000
N_CHAIN = 2_000
N_LEAVES = 4_096
ARRAY_BYTES = 8_000_000


def inc(x: int) -> int:
    return x + 1


def chain_graph() -> tuple[dict, Any]:
    dsk: dict = {("chain", 0): (inc, 0)}
    for i in range(1, N_CHAIN):
        dsk[("chain", i)] = (inc, ("chain", i - 1))
    return dsk, ("chain", N_CHAIN - 1)


def tree_graph() -> tuple[dict, Any]:
    dsk: dict = {("leaf", i): (inc, i) for i in range(N_LEAVES)}
    level, width, name = 0, N_LEAVES, "leaf"
    while width > 1:
        nxt = f"sum{level}"
        for i in range(width // 2):
            dsk[(nxt, i)] = (operator.add, (name, 2 * i), (name, 2 * i + 1))
        level, width, name = level + 1, width // 2, nxt
    return dsk, (name, 0)


# -- one side of the comparison --------------------------------------------------------------


class Side:
    """Starts a cluster and runs each workload on it; subclasses differ in the API."""

    label = ""

    def start(self) -> float:
        t = time.perf_counter()
        self._start()
        return time.perf_counter() - t

    def trivial(self) -> float:
        t = time.perf_counter()
        futures = self.client.map(inc, range(N_TRIVIAL), pure=False)
        out = self.client.gather(futures)
        dt = time.perf_counter() - t
        assert sum(out) == N_TRIVIAL * (N_TRIVIAL + 1) // 2
        del futures
        return N_TRIVIAL / dt

    def tree(self) -> float:
        dsk, key = tree_graph()
        t = time.perf_counter()
        out = self.client.get(dsk, key)
        dt = time.perf_counter() - t
        assert out == N_LEAVES * (N_LEAVES + 1) // 2
        return len(dsk) / dt

    def chain(self) -> float:
        dsk, key = chain_graph()
        t = time.perf_counter()
        out = self.client.get(dsk, key)
        dt = time.perf_counter() - t
        assert out == N_CHAIN
        return 1000 * dt / N_CHAIN

    def transfer(self) -> tuple[float, float]:
        import numpy as np

        a, b = self.worker_addresses()
        x = self.client.submit(np.random.random, ARRAY_BYTES // 8, workers=[a], pure=False)
        x.result()
        t = time.perf_counter()
        n = self.client.submit(len, x, workers=[b], pure=False).result()
        dt = time.perf_counter() - t
        assert n == ARRAY_BYTES // 8
        log = self.client.run(_last_incoming, workers=[b])[b]
        return ARRAY_BYTES / dt / 1e9, log["total"] / (log["stop"] - log["start"]) / 1e9

    def worker_addresses(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])


def _last_incoming(dask_worker: Any) -> dict:
    return dict(list(dask_worker.transfer_incoming_log)[-1])


class Ours(Side):
    label = "kernel-cluster"

    def _start(self) -> None:
        from kernel_cluster import Client, KernelCluster

        self.cluster = KernelCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit=0
        )
        self.client = Client(self.cluster, set_as_default=False)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


class Dask(Side):
    def __init__(self, saturation: float | None = None):
        self.saturation = saturation
        self.label = "dask" if saturation is None else "dask (saturation=inf)"

    def _start(self) -> None:
        import dask
        from distributed import Client, LocalCluster

        cfg = (
            {}
            if self.saturation is None
            else {"distributed.scheduler.worker-saturation": self.saturation}
        )
        self._config = dask.config.set(cfg)
        self._config.__enter__()
        self.cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster, set_as_default=False)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()
        self._config.__exit__(None, None, None)


# -- running -----------------------------------------------------------------------------------


def measure(sides: list[Side], name: str, repeats: int, fn: Callable[[Side], Any]) -> list:
    values: list[list] = [[] for _ in sides]
    fn_warm = fn
    for side in sides:  # warm up: imports on the workers, connections
        fn_warm(side)
    for _ in range(repeats):
        for i, side in enumerate(sides):
            values[i].append(fn(side))
    return values


def median(values: list) -> Any:
    if isinstance(values[0], tuple):
        return tuple(statistics.median(v) for v in zip(*values))
    return statistics.median(values)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 5

    import dask
    import distributed

    ours, dask_default, dask_inf = Ours(), Dask(), Dask(float("inf"))
    sides: list[Side] = [ours, dask_default, dask_inf]
    startup: dict[str, list[float]] = {s.label: [] for s in sides}
    for _ in range(repeats):  # start-up, interleaved; the last start stays up for the rest
        for side in sides:
            startup[side.label].append(side.start())
            if len(startup[side.label]) < repeats:
                side.close()
    results: dict[str, dict[str, Any]] = {
        s.label: {"startup_s": median(startup[s.label])} for s in sides
    }
    try:
        for name, fn, who in [
            ("trivial_tasks_per_s", Side.trivial, sides),
            ("tree_tasks_per_s", Side.tree, sides),
            ("chain_ms_per_step", Side.chain, [ours, dask_default]),
            ("transfer_gb_per_s", Side.transfer, [ours, dask_default]),
        ]:
            values = measure(who, name, repeats, fn)
            for side, vals in zip(who, values):
                results[side.label][name] = median(vals)
    finally:
        for side in sides:
            side.close()

    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "dask": dask.__version__,
            "distributed": distributed.__version__,
        },
        "results": results,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    return report


def print_table(report: dict) -> None:
    r = report["results"]
    ours, dd, di = r["kernel-cluster"], r["dask"], r["dask (saturation=inf)"]
    rows = [
        ("start-up (s)", ours["startup_s"], dd["startup_s"], dd["startup_s"] / ours["startup_s"]),
        (
            "trivial tasks/s vs default",
            ours["trivial_tasks_per_s"],
            dd["trivial_tasks_per_s"],
            ours["trivial_tasks_per_s"] / dd["trivial_tasks_per_s"],
        ),
        (
            "trivial tasks/s vs sat=inf",
            ours["trivial_tasks_per_s"],
            di["trivial_tasks_per_s"],
            ours["trivial_tasks_per_s"] / di["trivial_tasks_per_s"],
        ),
        (
            "tree tasks/s vs default",
            ours["tree_tasks_per_s"],
            dd["tree_tasks_per_s"],
            ours["tree_tasks_per_s"] / dd["tree_tasks_per_s"],
        ),
        (
            "tree tasks/s vs sat=inf",
            ours["tree_tasks_per_s"],
            di["tree_tasks_per_s"],
            ours["tree_tasks_per_s"] / di["tree_tasks_per_s"],
        ),
        (
            "chain (ms/step)",
            ours["chain_ms_per_step"],
            dd["chain_ms_per_step"],
            dd["chain_ms_per_step"] / ours["chain_ms_per_step"],
        ),
        (
            "8 MB transfer, end to end (GB/s)",
            ours["transfer_gb_per_s"][0],
            dd["transfer_gb_per_s"][0],
            ours["transfer_gb_per_s"][0] / dd["transfer_gb_per_s"][0],
        ),
        (
            "8 MB transfer, wire (GB/s)",
            ours["transfer_gb_per_s"][1],
            dd["transfer_gb_per_s"][1],
            ours["transfer_gb_per_s"][1] / dd["transfer_gb_per_s"][1],
        ),
    ]
    print(f"{'measure':36} {'ours':>12} {'dask':>12} {'ratio (>1 better)':>18}")
    for label, a, b, ratio in rows:
        print(f"{label:36} {a:12,.3f} {b:12,.3f} {ratio:18.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
