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
summarised by the median over rounds, with its quartiles and a 90% bootstrap
interval. Target: at most 3%. The CPU time the runs used (this process's, and the
worker processes') is compared the same way: it moves less than wall time with how
the threads happened to take turns at the GIL.

Run to run, this machine moves by 10-20%: more than the target. So the script
also times what collection adds where it runs, per task, which short interleaved
repeats measure to a fraction of a microsecond: the task runner with metrics
(``TaskRunner.run``, on a thread account) against the one without, over the engine's
whole cost per trivial task (the "off" runs' time / 10,000). Everything else
metrics cost is per heartbeat or per batch of results, not per task.
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
WORKLOADS = ["embedded/trivial", "embedded/numpy", "processes/trivial", "processes/numpy"]


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


def process_cpu() -> float:
    return time.process_time()


def cpu_seconds(client) -> float:
    """CPU time used so far by this process and by the worker processes, if any."""
    cpu = time.process_time()
    if client.cluster.processes:
        cpu += sum(client.run(process_cpu).values())
    return cpu


def switched(client, work, on: bool, cpu: list[float]) -> float:
    """Wall seconds of ``work`` with metrics ``on``; its CPU seconds go to ``cpu``."""
    client.run(metrics_on, on=on)
    before = cpu_seconds(client)
    wall = work(client)
    cpu.append(cpu_seconds(client) - before)
    return wall


def task_runner_cost(repeats: int = 15, calls: int = 20_000) -> dict[str, float]:
    """Microseconds per trivial task of the metered and the unmetered task runner,
    called on this thread, interleaved; medians over ``repeats``."""
    import threading

    from kernel_cluster.core.spec import Call, TaskSpec
    from kernel_cluster.core.thread_accounts import ThreadTimeline
    from kernel_cluster.engine.execute import TaskRunner, run_task_unmetered

    spec = TaskSpec(Call(inc, (1,)), frozenset())
    timeline = ThreadTimeline(busy=True)
    timeline.add_threads([threading.get_ident()], time.perf_counter())
    runner = TaskRunner(timeline.accounts[threading.get_ident()])
    group = (None, "inc")

    def metered() -> float:
        t = time.perf_counter()
        for _ in range(calls):
            runner.run("k", spec, {}, 0.0, group)
        return (time.perf_counter() - t) / calls * 1e6

    def unmetered() -> float:
        t = time.perf_counter()
        for _ in range(calls):
            run_task_unmetered("k", spec, {})
        return (time.perf_counter() - t) / calls * 1e6

    times = rounds({"metered": metered, "unmetered": unmetered}, repeats)
    extra = [m - u for m, u in zip(times["metered"], times["unmetered"], strict=True)]
    return {
        "metered_us": statistics.median(times["metered"]),
        "unmetered_us": statistics.median(times["unmetered"]),
        "extra_us": statistics.median(extra),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        help="measure these workloads only (more rounds in the same time); the other "
        "results stay as they are in the results file",
    )
    args = parser.parse_args(argv)
    repeats = 4 if args.quick else args.rounds
    chosen = args.only or WORKLOADS
    report: dict = {"task_runner": task_runner_cost()}
    if args.only and RESULTS.exists():
        report = {**json.loads(RESULTS.read_text()), **report}
    modes = tuple(m for m in ("embedded", "processes") if any(w.startswith(m) for w in chosen))
    for mode, client in one_cluster_per_mode(modes):
        for name, work in [("trivial", trivial), ("numpy", numpy_work)]:
            if f"{mode}/{name}" not in chosen:
                continue
            cpu: dict[str, list[float]] = {"on": [], "off": []}
            runs = {"on": partial(switched, client, work, True, cpu["on"])}
            runs["off"] = partial(switched, client, work, False, cpu["off"])
            times = rounds(runs, repeats)
            on, off = times["on"], times["off"]
            cpu_on, cpu_off = cpu["on"][1:], cpu["off"][1:]  # past the warm-up runs
            report[f"{mode}/{name}"] = {
                "on_s": statistics.median(on),
                "off_s": statistics.median(off),
                **overhead(on, off),
                "cpu": overhead(cpu_on, cpu_off),
                "on_runs": on,
                "off_runs": off,
                "cpu_on_runs": cpu_on,
                "cpu_off_runs": cpu_off,
            }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"overhead: median over {repeats} rounds of (on / off - 1), its 90% interval,")
    print("quartiles of the rounds; and the ratio of the medians")
    print(
        f"{'workload':20} {'on (s)':>7} {'off (s)':>7} {'overhead':>9} {'90% interval':>16} "
        f"{'q1..q3':>15} {'medians':>8}"
    )
    for name, r in report.items():
        if name not in chosen:
            continue
        print(
            f"{name:20} {r['on_s']:7.3f} {r['off_s']:7.3f} {r['median_of_rounds']:9.1%} "
            f"{_interval(r):>16} {r['q1']:7.1%}..{r['q3']:<6.1%} {r['of_medians']:8.1%}"
        )
    print("CPU time (this process and the worker processes), the same way:")
    for name, r in report.items():
        if name in chosen:
            c = r["cpu"]
            print(
                f"{name:36} {c['median_of_rounds']:9.1%} {_interval(c):>16} "
                f"{c['q1']:7.1%}..{c['q3']:<6.1%} {c['of_medians']:8.1%}"
            )
    cost = report["task_runner"]
    print(
        f"task runner: {cost['metered_us']:.2f} us per trivial task with metrics, "
        f"{cost['unmetered_us']:.2f} without: {cost['extra_us']:.2f} us added per task"
    )
    for mode in ("embedded", "processes"):
        if f"{mode}/trivial" not in chosen:
            continue
        per_task = report[f"{mode}/trivial"]["off_s"] / 10_000 * 1e6
        print(
            f"  {mode}: the engine spends {per_task:.0f} us of wall time per trivial task "
            f"(metrics off): {cost['extra_us'] / per_task:.1%} of it"
        )
    return report


def _interval(r: dict) -> str:
    return f"{r['ci_low']:.1%}..{r['ci_high']:.1%}"


if __name__ == "__main__":
    main(sys.argv[1:])
