"""What the statistical profiler costs: the same work with it off, at 10 ms and at 1 ms.

    .venv/bin/python benchmarks/profiler_overhead.py [--quick]

For each mode (embedded threads, worker processes) three configurations:
``profile=False``, ``profile_interval=0.01`` (the default) and ``0.001``, on:
  trivial   10,000 independent trivial tasks (map + gather): per-task cost dominates
  numpy     200 tasks sorting 250,000 random floats each: real work
Runs are interleaved in rounds on fresh clusters (benchmarks/interleave.py); the
overhead is read per round against the profiler-off run and summarised by the
median over rounds, with its quartiles. Run-to-run noise on this kind of machine
is ~10%, so the table also gives the sampling threads' own CPU time over the
run's wall time (summed over workers): a floor on the cost that noise does not blur.
Target: at most 2% at the default interval.
Results also go to benchmarks/results/profiler_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from interleave import close_client, compare, overhead

RESULTS = Path(__file__).resolve().parent / "results" / "profiler_overhead.json"
CONFIGS = {"off": None, "10ms": 0.01, "1ms": 0.001}


def inc(x: int) -> int:
    return x + 1


def sort_random(seed: int) -> float:
    return float(np.sort(np.random.default_rng(seed).random(250_000))[0])


def trivial(client) -> None:
    out = client.gather(client.map(inc, range(10_000), pure=False))
    assert sum(out) == 10_000 * 10_001 // 2


def numpy_work(client) -> None:
    out = client.gather(client.map(sort_random, range(200), pure=False))
    assert len(out) == 200


def sampler_cpu(client) -> float:
    from kernel_cluster.engine.profiler import read_profiler_cost

    return sum(client.run(read_profiler_cost).values())


class Probe:
    """Times a work on a client and keeps what its sampling threads cost meanwhile."""

    def __init__(self, work) -> None:
        self.work = work
        self.sampler_share: dict[str, list[float]] = {}
        self.samples: dict[str, int] = {}

    def __call__(self, client) -> float:
        cpu0 = sampler_cpu(client)
        t = time.perf_counter()
        self.work(client)
        wall = time.perf_counter() - t
        time.sleep(0.05)  # let each sampler publish its CPU time once more
        share = (sampler_cpu(client) - cpu0) / wall
        self.sampler_share.setdefault(client.bench_config, []).append(share)
        return wall


def main(argv: list[str] | None = None) -> dict:
    from kernel_cluster import Client, KernelCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeats = 4 if args.quick else 16
    names = list(CONFIGS)
    report: dict = {}
    for mode, processes in [("embedded", False), ("processes", True)]:
        samples: dict[str, int] = dict.fromkeys(names, 0)

        def make(name: str, processes: bool = processes) -> Client:
            interval = CONFIGS[name]
            cluster = KernelCluster(
                n_workers=2 if processes else 1,
                threads_per_worker=1 if processes else 2,
                processes=processes,
                memory_limit=0,
                profile=interval is not None,
                profile_interval=interval or 0.01,
            )
            client = Client(cluster, set_as_default=False)
            client.bench_config = name
            return client

        def close(client: Client, samples: dict[str, int] = samples) -> None:
            if CONFIGS[client.bench_config] is not None:
                samples[client.bench_config] += client.profile()["count"]
            close_client(client)

        probes = {"trivial": Probe(trivial), "numpy": Probe(numpy_work)}
        times = compare(make, close, probes, names, repeats)
        for wname, probe in probes.items():
            walls = times[wname]
            row: dict = {"off_s": statistics.median(walls["off"]), "runs_s": walls}
            for n in names[1:]:
                row[f"{n}_s"] = statistics.median(walls[n])
                row[f"{n}_overhead"] = overhead(walls[n], walls["off"])
                row[f"{n}_sampler_cpu"] = statistics.median(probe.sampler_share[n])
            report[f"{mode}/{wname}"] = row
        for n in names[1:]:
            report[f"{mode}/samples_{n}"] = samples[n]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print("overhead: median over rounds of (on / off - 1) [quartiles]; sampler CPU / wall")
    print(f"{'workload':18} {'off (s)':>7}", end="")
    for n in names[1:]:
        print(f" | {n:>5} {'overhead':>8} {'[q1..q3]':>16} {'sampler':>7}", end="")
    print()
    for name, r in report.items():
        if not isinstance(r, dict):
            continue
        print(f"{name:18} {r['off_s']:7.3f}", end="")
        for n in names[1:]:
            o = r[f"{n}_overhead"]
            quartiles = f"[{o['q1']:.1%}..{o['q3']:.1%}]"
            print(
                f" | {r[f'{n}_s']:5.3f} {o['median_of_rounds']:8.1%} {quartiles:>16}"
                f" {r[f'{n}_sampler_cpu']:7.2%}",
                end="",
            )
        print()
    print("samples taken:", {k: v for k, v in report.items() if not isinstance(v, dict)})
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
