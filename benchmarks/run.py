"""Scheduling overhead: the embedded engine next to dask's threaded scheduler.

Both run the same dict graphs of trivial functions, so what is timed is the
cost of scheduling, not the work. Each engine run is one ``client.get(dsk, keys)``
call on a ``KernelCluster(n_workers=1, threads_per_worker=2)``, timed from graph
submission until the results are back in the caller and the engine has released
the graph (nothing left on the cluster); each dask run is one
``dask.threaded.get(dsk, keys, num_workers=2)`` call.

    make bench                                       (or .venv-bench/bin/python benchmarks/run.py)
    .venv-bench/bin/python benchmarks/run.py --quick (fewer repeats)

Per workload: the graph is built once, both engines run it once to warm up,
then runs alternate engine, dask, engine, dask, ... so that background load
lands on both alike. Every run's result is checked, so a broken engine cannot
post a fast number. Printed: median tasks/s of each and the ratio
engine/dask (above 1: the engine is faster). For reference, a bare
``ThreadPoolExecutor(2)`` making the same number of trivial calls as workload
(a). Results also go to benchmarks/results/engine_vs_dask_threaded.json.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import operator
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "engine_vs_dask_threaded.json"
N_INDEPENDENT = 10_000
N_CHAIN = 2_000
N_LEAVES = 8_192  # a power of two: every level pairs up exactly


def inc(x: int) -> int:
    return x + 1


# -- workloads: (graph, keys to compute, check of the result) ---------------------------


def independent_graph(n: int = N_INDEPENDENT) -> tuple[dict, Any, Callable[[Any], bool]]:
    dsk = {("inc", i): (inc, i) for i in range(n)}
    expected = n * (n + 1) // 2
    return dsk, list(dsk), lambda out: len(out) == n and sum(out) == expected


def chain_graph(n: int = N_CHAIN) -> tuple[dict, Any, Callable[[Any], bool]]:
    dsk: dict = {("chain", 0): (inc, 0)}
    for i in range(1, n):
        dsk["chain", i] = (inc, ("chain", i - 1))
    return dsk, ("chain", n - 1), lambda out: out == n


def tree_graph(n_leaves: int = N_LEAVES) -> tuple[dict, Any, Callable[[Any], bool]]:
    dsk: dict = {("leaf", i): (inc, i) for i in range(n_leaves)}
    level = list(dsk)
    depth = 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for j in range(0, len(level), 2):
            key = ("sum", depth, j // 2)
            dsk[key] = (operator.add, level[j], level[j + 1])
            nxt.append(key)
        level = nxt
    expected = n_leaves * (n_leaves + 1) // 2
    return dsk, level[0], lambda out: out == expected


WORKLOADS = {
    "(a) independent": independent_graph,
    "(b) chain": chain_graph,
    "(c) tree reduction": tree_graph,
}


# -- timing -----------------------------------------------------------------------------


def timed(run: Callable[[], Any], check: Callable[[Any], bool], label: str) -> float:
    """Seconds one call of ``run`` takes; raises if its result fails ``check``."""
    gc.collect()  # so that one run does not pay for the previous run's garbage
    start = time.perf_counter()
    out = run()
    elapsed = time.perf_counter() - start
    if not check(out):
        raise AssertionError(f"{label} returned a wrong result: {str(out)[:200]}")
    return elapsed


def threadpool_calls(pool: ThreadPoolExecutor, n: int = N_INDEPENDENT) -> list[int]:
    futures = [pool.submit(inc, i) for i in range(n)]
    return [f.result() for f in futures]


def main(argv: list[str] | None = None) -> dict:
    import dask
    import dask.threaded

    from kernel_cluster.client.client import Client
    from kernel_cluster.engine.cluster import KernelCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats instead of 5")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 5

    rows = []
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster:
        client = Client(cluster)

        def engine_run(dsk: dict, keys: Any) -> tuple[Any, int]:
            # Timed until the engine has released the graph too: that work is part of
            # each task's cost, and would otherwise land on the next (dask's) run.
            return client.get(dsk, keys), client.scheduler_info()["tasks"]

        def engine_check(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
            # A result left on the cluster would be reused by the next run rather than
            # recomputed: a run only counts if it leaves nothing behind.
            return lambda out: check(out[0]) and out[1] == 0

        for name, build in WORKLOADS.items():
            dsk, keys, check = build()
            runs = {
                "engine": (functools.partial(engine_run, dsk, keys), engine_check(check)),
                "dask": (functools.partial(dask.threaded.get, dsk, keys, num_workers=2), check),
            }
            times: dict[str, list[float]] = {"engine": [], "dask": []}
            for who, (run, ok) in runs.items():
                timed(run, ok, f"{who} {name} (warm-up)")
            for _ in range(repeats):
                for who, (run, ok) in runs.items():
                    times[who].append(timed(run, ok, f"{who} {name}"))
            rate = {who: len(dsk) / statistics.median(t) for who, t in times.items()}
            rows.append(
                {
                    "workload": name,
                    "tasks": len(dsk),
                    "engine_tasks_per_s": rate["engine"],
                    "dask_tasks_per_s": rate["dask"],
                    "engine_over_dask": rate["engine"] / rate["dask"],
                    "engine_seconds": times["engine"],
                    "dask_seconds": times["dask"],
                }
            )
        client.close()

    expected_calls = list(range(1, N_INDEPENDENT + 1))
    with ThreadPoolExecutor(2) as pool:
        run = functools.partial(threadpool_calls, pool)
        timed(run, expected_calls.__eq__, "threadpool (warm-up)")
        pool_times = [timed(run, expected_calls.__eq__, "threadpool") for _ in range(repeats)]
    pool_rate = N_INDEPENDENT / statistics.median(pool_times)
    for row in rows:
        row["engine_over_threadpool"] = row["engine_tasks_per_s"] / pool_rate

    report = {
        "benchmark": "engine_vs_dask_threaded",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "dask": dask.__version__,
        },
        "repeats": repeats,
        "statistic": "median tasks/s over repeats",
        "workloads": rows,
        "threadpool_reference": {
            "calls": N_INDEPENDENT,
            "tasks_per_s": pool_rate,
            "seconds": pool_times,
        },
    }
    print_table(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {RESULTS}")
    return report


def print_table(report: dict) -> None:
    m = report["machine"]
    print(
        f"engine (1 worker x 2 threads, client.get) vs dask.threaded.get(num_workers=2); "
        f"median of {report['repeats']} runs"
    )
    print(f"python {m['python']}, dask {m['dask']}, {m['cpu_count']} CPUs\n")
    head = f"{'workload':<23}{'tasks':>7}{'engine/s':>11}{'dask/s':>11}{'engine/dask':>13}"
    head += f"{'engine/pool':>13}"
    print(head)
    print("-" * len(head))
    for r in report["workloads"]:
        print(
            f"{r['workload']:<23}{r['tasks']:>7}{r['engine_tasks_per_s']:>11,.0f}"
            f"{r['dask_tasks_per_s']:>11,.0f}{r['engine_over_dask']:>13.2f}"
            f"{r['engine_over_threadpool']:>13.3f}"
        )
    ref = report["threadpool_reference"]
    print(
        f"{'ThreadPoolExecutor(2)':<23}{ref['calls']:>7}{ref['tasks_per_s']:>11,.0f}"
        f"{'':>11}{'':>13}{'(reference)':>13}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
