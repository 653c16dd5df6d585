"""What collecting fine performance metrics costs: the same work with it on and off.

    .venv-bench/bin/python benchmarks/metrics_overhead.py [--quick]

For each mode (embedded threads, worker processes), one cluster runs, with
collection on and off:
  trivial   10,000 independent trivial tasks (map + gather): per-task cost dominates
  numpy     200 tasks sorting 250,000 random floats each: real work
Both settings run on the same workers, switched between runs
(``Worker.set_fine_metrics`` through ``client.run``): two clusters kept side by
side here ran 10-15% apart, so comparing settings on different clusters would
measure the clusters. Runs are interleaved in rounds in rotating order
(benchmarks/interleave.py); the overhead is read per round, on against off, and
summarised by the median over rounds, with its quartiles. Target: at most 3%.
Results also go to benchmarks/results/metrics_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from interleave import one_cluster_per_mode, overhead, rounds

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


def metrics_on(dask_worker, on: bool) -> None:
    dask_worker.set_fine_metrics(on)


def switched(client, work, on: bool) -> float:
    client.run(metrics_on, on=on)
    return work(client)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats = 4 if args.quick else 24
    report: dict = {}
    for mode, client in one_cluster_per_mode():
        for name, work in [("trivial", trivial), ("numpy", numpy_work)]:
            runs = {"on": partial(switched, client, work, True)}
            runs["off"] = partial(switched, client, work, False)
            times = rounds(runs, repeats)
            on, off = times["on"], times["off"]
            report[f"{mode}/{name}"] = {
                "on_s": statistics.median(on),
                "off_s": statistics.median(off),
                **overhead(on, off),
                "on_runs": on,
                "off_runs": off,
            }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print("overhead: median over rounds of (on / off - 1), quartiles; and of the medians")
    print(
        f"{'workload':20} {'on (s)':>7} {'off (s)':>7} {'overhead':>9} "
        f"{'q1..q3':>15} {'medians':>8}"
    )
    for name, r in report.items():
        print(
            f"{name:20} {r['on_s']:7.3f} {r['off_s']:7.3f} {r['median_of_rounds']:9.1%} "
            f"{r['q1']:7.1%}..{r['q3']:<6.1%} {r['of_medians']:8.1%}"
        )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
