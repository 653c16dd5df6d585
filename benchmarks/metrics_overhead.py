"""What collecting fine performance metrics costs: the same work with it on and off.

    .venv-bench/bin/python benchmarks/metrics_overhead.py [--quick]

For each mode (embedded threads, worker processes) two clusters run side by side,
``fine_metrics=True`` and ``fine_metrics=False``, on:
  trivial   10,000 independent trivial tasks (map + gather): per-task cost dominates
  numpy     200 tasks sorting 250,000 random floats each: real work
Runs alternate on / off in ABBA order so background load hits both alike; the
median of each is reported, and the overhead as (on - off) / off, and also that of
the fastest runs (less blurred by a busy machine). Target: at most 3%.
Results also go to benchmarks/results/metrics_overhead.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "metrics_overhead.json"


def inc(x: int) -> int:
    return x + 1


def sort_random(seed: int) -> float:
    return float(np.sort(np.random.default_rng(seed).random(250_000))[0])


def trivial(client) -> float:
    t = time.perf_counter()
    out = client.gather(client.map(inc, range(10_000), pure=False))
    assert sum(out) == 10_000 * 10_001 // 2
    return time.perf_counter() - t


def numpy_work(client) -> float:
    t = time.perf_counter()
    out = client.gather(client.map(sort_random, range(200), pure=False))
    assert len(out) == 200
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    from kernel_cluster import Client, KernelCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 9
    report: dict = {}
    for mode, processes in [("embedded", False), ("processes", True)]:
        clusters = {
            on: KernelCluster(
                n_workers=2 if processes else 1,
                threads_per_worker=1 if processes else 2,
                processes=processes,
                fine_metrics=on,
                memory_limit=0,
            )
            for on in (True, False)
        }
        clients = {on: Client(c, set_as_default=False) for on, c in clusters.items()}
        try:
            for name, work in [("trivial", trivial), ("numpy", numpy_work)]:
                times: dict[bool, list[float]] = {True: [], False: []}
                for on in (True, False):
                    work(clients[on])  # warm up
                for i in range(repeats):
                    # ABBA order: neither side always runs just after the other's garbage
                    for on in (True, False) if i % 2 == 0 else (False, True):
                        gc.collect()
                        times[on].append(work(clients[on]))
                on_s, off_s = statistics.median(times[True]), statistics.median(times[False])
                report[f"{mode}/{name}"] = {
                    "on_s": on_s,
                    "off_s": off_s,
                    "overhead": (on_s - off_s) / off_s,
                    "overhead_of_fastest": min(times[True]) / min(times[False]) - 1,
                    "on_runs": times[True],
                    "off_runs": times[False],
                }
        finally:
            for c in clients.values():
                c.close()
            for c in clusters.values():
                c.close()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'workload':22} {'on (s)':>9} {'off (s)':>9} {'overhead':>9} {'(fastest)':>10}")
    for name, r in report.items():
        print(
            f"{name:22} {r['on_s']:9.3f} {r['off_s']:9.3f} {r['overhead']:9.1%} "
            f"{r['overhead_of_fastest']:10.1%}"
        )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
