"""dask collections on this engine next to dask's own schedulers, in one run.

Two workloads, each computed with ``dask.compute(..., scheduler=...)`` on four
sides:

  kernel-cluster embedded   KernelCluster(n_workers=1, threads_per_worker=2)
  kernel-cluster processes  KernelCluster(n_workers=2, threads_per_worker=1, processes=True)
  dask.threaded             scheduler="threads" (a pool of one thread per CPU)
  distributed               LocalCluster(n_workers=2, threads_per_worker=1) and its Client

  matmul    (x @ x.T).sum() for a 4000 x 4000 random dask.array in 1000 x 1000 chunks
  groupby   a dask.dataframe made from a 1,000,000-row pandas frame (10 partitions),
            groupby("k").agg({"v": ["sum", "mean"], "w": "max"})

    .venv/bin/python benchmarks/dask_collections.py [--quick]

Each collection is built once (the same graph for every side), each side computes it
once to warm up, then the sides alternate for the repeats so that background load
lands on all alike. Every result is checked against dask.threaded's. Printed: the
median seconds of each side and ratios, oriented so that above 1 means
kernel-cluster is faster (embedded against dask.threaded, processes against
distributed). The machine's load average before and after goes with the results to
benchmarks/results/dask_collections.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "dask_collections.json"
SIDES = ["kernel-cluster embedded", "kernel-cluster processes", "dask.threaded", "distributed"]


def workloads() -> dict[str, tuple[Any, Callable[[Any, Any], bool]]]:
    """Each workload's collection and a check of a result against the reference."""
    import dask.array as da
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    x = da.random.random((4000, 4000), chunks=(1000, 1000))
    rng = np.random.default_rng(0)
    n = 1_000_000
    frame = pd.DataFrame(
        {"k": rng.integers(0, 100, n), "v": rng.random(n), "w": rng.integers(0, 1000, n)}
    )
    df = dd.from_pandas(frame, npartitions=10)

    def same_frame(a: Any, b: Any) -> bool:
        pd.testing.assert_frame_equal(a.sort_index(), b.sort_index(), check_exact=False)
        return True

    return {
        "matmul": ((x @ x.T).sum(), lambda a, b: bool(np.isclose(a, b, rtol=1e-12))),
        "groupby": (df.groupby("k").agg({"v": ["sum", "mean"], "w": "max"}), same_frame),
    }


class Sides:
    """The four schedulers, started once for the whole run."""

    def __init__(self) -> None:
        from distributed import Client as DaskClient
        from distributed import LocalCluster

        from kernel_cluster import Client, KernelCluster

        self.embedded = KernelCluster(n_workers=1, threads_per_worker=2)
        self.processes = KernelCluster(n_workers=2, threads_per_worker=1, processes=True)
        self.local = LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None, processes=True
        )
        self.schedulers: dict[str, Any] = {
            SIDES[0]: Client(self.embedded, set_as_default=False),
            SIDES[1]: Client(self.processes, set_as_default=False),
            SIDES[2]: "threads",
            SIDES[3]: DaskClient(self.local, set_as_default=False),
        }

    def close(self) -> None:
        for side in (SIDES[0], SIDES[1], SIDES[3]):
            self.schedulers[side].close()
        self.embedded.close()
        self.processes.close()
        self.local.close()


def run_once(collection: Any, scheduler: Any) -> tuple[float, Any]:
    import dask

    start = time.perf_counter()
    (result,) = dask.compute(collection, scheduler=scheduler)
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 5

    import dask
    import distributed

    load_before = os.getloadavg()
    sides = Sides()
    times: dict[str, dict[str, list[float]]] = {}
    try:
        for name, (collection, check) in workloads().items():
            _, reference = run_once(collection, "threads")
            per_side: dict[str, list[float]] = {side: [] for side in SIDES}
            for round_ in range(repeats + 1):  # round 0 warms up
                for side in SIDES:
                    seconds, result = run_once(collection, sides.schedulers[side])
                    if not check(result, reference):
                        raise AssertionError(f"{side} computed a wrong {name} result")
                    if round_:
                        per_side[side].append(seconds)
            times[name] = per_side
    finally:
        sides.close()
    load_after = os.getloadavg()

    results: dict[str, dict[str, Any]] = {}
    for name, per_side in times.items():
        med = {side: statistics.median(v) for side, v in per_side.items()}
        results[name] = {
            "median_s": med,
            "runs_s": per_side,
            # above 1: kernel-cluster is faster
            "embedded_vs_threaded": med[SIDES[2]] / med[SIDES[0]],
            "processes_vs_distributed": med[SIDES[3]] / med[SIDES[1]],
            "embedded_vs_distributed": med[SIDES[3]] / med[SIDES[0]],
        }
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "repeats": repeats,
        "results": results,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    return report


def print_table(report: dict) -> None:
    print(f"{'workload':10}" + "".join(f"{s:>27}" for s in SIDES))
    for name, r in report["results"].items():
        print(f"{name:10}" + "".join(f"{r['median_s'][s]:>26.3f}s" for s in SIDES))
    print()
    print(f"{'workload':10}{'embedded/threaded':>20}{'processes/distributed':>24}")
    for name, r in report["results"].items():
        print(f"{name:10}{r['embedded_vs_threaded']:>20.2f}{r['processes_vs_distributed']:>24.2f}")
    m = report["machine"]
    print(f"\nload average before {m['loadavg_before']}, after {m['loadavg_after']}")


if __name__ == "__main__":
    main()
