"""Soak: a million tasks, then worker processes killed with SIGKILL every few seconds.

Not part of ``make test``: it takes minutes. Two phases, one report:

1. **Memory over many tasks** (run first, on a kernel that has held nothing yet).
   ``--million`` trivial tasks in batches on fresh worker processes (and embedded,
   unless ``--processes-only``): the kernel's RSS and each worker's, every 10 % of
   the way, to show whether anything grows with the number of tasks run.
2. **Chaos.** A graph of about 50,000 tasks on worker processes with a small memory
   limit: numpy leaves, pairwise sums (transfers between workers), a tree reduction,
   a checksum per leaf, and half of the pair sums kept until the end (so workers
   spill to disk). A thread SIGKILLs a random worker every ``--kill-every`` seconds,
   ``--max-kills`` times (or until the graph is done). Checked: every result is
   exact; the scheduler's metric totals never decrease (sampled while it runs); the
   span ends with every task done; after ``close()`` no worker process, engine
   thread or ``kernel-cluster-*`` directory is left.

    .venv/bin/python benchmarks/soak.py                 # about 10 minutes
    .venv/bin/python benchmarks/soak.py --quick         # a smaller graph, 100,000 tasks

Results go to ``benchmarks/results/soak.json``.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import platform
import random
import signal
import tempfile
import threading
import time
from typing import Any

import numpy as np
import psutil

from kernel_cluster import Client, KernelCluster, span

HERE = os.path.dirname(os.path.abspath(__file__))


def leaf(i: int, n: int) -> np.ndarray:
    return np.full(n, i, dtype=np.int64)


def pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def checksum(x: np.ndarray) -> int:
    return int(x.sum())


def total(a: Any, b: Any) -> int:
    return (a if isinstance(a, int) else int(a.sum())) + (b if isinstance(b, int) else int(b.sum()))


def inc(x: int) -> int:
    return x + 1


def chaos_graph(n_leaves: int, n: int, keep_every: int) -> tuple[dict, list, dict]:
    """The graph, the keys to fetch, and the value each must have."""
    dsk: dict = {}
    expected: dict = {}
    for i in range(n_leaves):
        dsk[f"leaf-{i}"] = (leaf, i, n)
        dsk[f"check-{i}"] = (checksum, f"leaf-{i}")
        expected[f"check-{i}"] = i * n
    level = []
    for j in range(n_leaves // 2):
        dsk[f"pair-{j}"] = (pair, f"leaf-{2 * j}", f"leaf-{2 * j + 1}")
        level.append(f"pair-{j}")
        if j % keep_every == 0:
            expected[f"pair-{j}"] = (4 * j + 1) * n  # summed over the array
    depth = 0
    while len(level) > 1:
        nxt = []
        for k in range(0, len(level) - 1, 2):
            key = f"sum-{depth}-{k // 2}"
            dsk[key] = (total, level[k], level[k + 1])
            nxt.append(key)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    expected[level[0]] = n * n_leaves * (n_leaves - 1) // 2
    return dsk, list(expected), expected


class Killer(threading.Thread):
    """SIGKILLs a random worker process every ``every`` seconds, ``limit`` times at most.

    Each kill loses a third of the results in memory, recomputed from their lineage:
    killing on and on faster than that takes would never let the graph end.
    """

    def __init__(self, cluster: KernelCluster, every: float, limit: int, seed: int = 0):
        super().__init__(name="soak-killer", daemon=True)
        self.cluster = cluster
        self.every = every
        self.limit = limit
        self.stopped = threading.Event()
        self.kills: list[tuple[float, int]] = []
        self.rng = random.Random(seed)

    def run(self) -> None:
        t0 = time.monotonic()
        while len(self.kills) < self.limit and not self.stopped.wait(self.every):
            pids = list(self.cluster.worker_pids().values())
            if not pids:
                continue
            pid = self.rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append((round(time.monotonic() - t0, 2), pid))


class MetricWatch(threading.Thread):
    """Reads the scheduler's cumulative metrics twice a second: no total may shrink."""

    def __init__(self, cluster: KernelCluster):
        super().__init__(name="soak-metrics", daemon=True)
        self.cluster = cluster
        self.stopped = threading.Event()
        self.samples = 0
        self.decreases: list[tuple] = []
        self.max_spilled = 0  # bytes on disk, summed over workers, at the most

    def read(self) -> dict:
        sched = self.cluster.scheduler

        def on_loop() -> dict:
            spilled = sum(info.get("spilled", 0) for info in sched.worker_info.values())
            self.max_spilled = max(self.max_spilled, spilled)
            return dict(sched.cumulative_worker_metrics)

        return self.cluster.loop_thread.run(on_loop)

    def progress(self) -> str:
        state = self.cluster.scheduler.state

        def on_loop() -> str:
            counts: dict[str, int] = {}
            for group in state.task_groups.values():
                for name, n in group.states.items():
                    if n:
                        counts[name] = counts.get(name, 0) + n
            return f"{len(state.workers)} workers, tasks by state {counts}"

        return self.cluster.loop_thread.run(on_loop)

    def run(self) -> None:
        last = self.read()
        t0 = time.monotonic()
        while not self.stopped.wait(0.5):
            now = self.read()
            self.samples += 1
            if self.samples % 20 == 0:
                print(f"  {time.monotonic() - t0:5.0f} s: {self.progress()}", flush=True)
            for key, value in last.items():
                if now.get(key, 0.0) < value - 1e-9:
                    self.decreases.append((key, value, now.get(key)))
            last = now


def engine_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("KernelCluster")}


def our_directories() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"kernel-cluster-{os.getpid()}-*")))


def wait_until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def chaos(args: argparse.Namespace) -> dict:
    n_leaves = args.leaves
    dsk, keys, expected = chaos_graph(n_leaves, args.array_len, keep_every=2)
    print(
        f"chaos: {len(dsk):,} tasks, {args.array_len * 8 / 1e3:.0f} KB leaves, "
        f"a SIGKILL every {args.kill_every} s ({args.max_kills} at most), "
        f"memory_limit={args.memory_limit}"
    )
    dirs_before = our_directories()
    threads_before = engine_threads()
    cluster = KernelCluster(
        processes=True,
        n_workers=args.workers,
        threads_per_worker=2,
        memory_limit=args.memory_limit,
        allowed_failures=args.allowed_failures,
    )
    client = Client(cluster)
    killer = Killer(cluster, args.kill_every, args.max_kills)
    watch = MetricWatch(cluster)
    t0 = time.perf_counter()
    watch.start()
    killer.start()
    error = None
    try:
        with span("soak") as span_id:
            results = client.get(dsk, keys)
    except Exception as exc:  # reported, not hidden: the soak failed
        error, results = repr(exc), None
    finally:
        killer.stopped.set()
        killer.join()
    elapsed = time.perf_counter() - t0
    watch.stopped.set()
    watch.join()
    wrong = []
    if results is not None:
        got = dict(zip(keys, results))
        for key, value in expected.items():
            v = got[key]
            v = int(v.sum()) if isinstance(v, np.ndarray) else v
            if v != value:
                wrong.append((key, v, value))
    spans = client.spans()
    soak = spans[span_id] if span_id in spans.by_id else None
    span_ended = soak is not None and soak.done and soak.stop is not None
    children = psutil.Process().children(recursive=True)
    client.close()
    cluster.close()
    procs_gone = wait_until(lambda: not any(p.is_running() for p in children), 15)
    threads_gone = wait_until(lambda: engine_threads() <= threads_before, 15)
    leaked_dirs = sorted(our_directories() - dirs_before)
    out = {
        "tasks": len(dsk),
        "seconds": round(elapsed, 1),
        "kills": len(killer.kills),
        "error": error,
        "wrong_results": wrong[:10],
        "n_wrong": len(wrong),
        "metric_samples": watch.samples,
        "metric_decreases": watch.decreases[:10],
        "span_ended": span_ended,
        "max_spilled_bytes": watch.max_spilled,
        "worker_processes_left": [p.pid for p in children if p.is_running()],
        "processes_gone": procs_gone,
        "engine_threads_gone": threads_gone,
        "leaked_directories": leaked_dirs,
    }
    out["ok"] = (
        error is None
        and not wrong
        and not watch.decreases
        and span_ended
        and procs_gone
        and threads_gone
        and not leaked_dirs
    )
    return out


def rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def many_tasks(total_tasks: int, processes: bool, batch: int = 10_000) -> dict:
    """``total_tasks`` trivial tasks in batches; memory every tenth of the way."""
    cluster = KernelCluster(processes=processes, n_workers=2, threads_per_worker=1)
    client = Client(cluster)
    me = os.getpid()
    samples = []
    t0 = time.perf_counter()
    done = 0
    step = max(total_tasks // 10, batch)
    try:
        while done < total_tasks:
            futures = client.map(inc, range(done, done + batch), key=f"inc-{done}")
            results = client.gather(futures)
            assert results[-1] == done + batch, results[-1]
            del futures, results
            done += batch
            if done % step == 0 or done >= total_tasks:
                gc.collect()
                workers = cluster.worker_pids() if processes else {}
                samples.append(
                    {
                        "tasks": done,
                        "seconds": round(time.perf_counter() - t0, 1),
                        "kernel_rss_mb": round(rss(me) / 2**20, 1),
                        "worker_rss_mb": [round(rss(p) / 2**20, 1) for p in workers.values()],
                        "scheduler_tasks": client.scheduler_info()["tasks"],
                        "spans": len(client.spans()),
                    }
                )
                print("  ", samples[-1])
    finally:
        client.close()
        cluster.close()
    first, last = samples[0], samples[-1]
    return {
        "mode": "processes" if processes else "embedded",
        "tasks": done,
        "tasks_per_second": round(done / (time.perf_counter() - t0)),
        "samples": samples,
        "kernel_rss_growth_mb": round(last["kernel_rss_mb"] - first["kernel_rss_mb"], 1),
        "worker_rss_growth_mb": [
            round(b - a, 1) for a, b in zip(first["worker_rss_mb"], last["worker_rss_mb"])
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller graph, 100,000 tasks")
    parser.add_argument("--leaves", type=int, default=16_384, help="leaves of the chaos graph")
    parser.add_argument("--array-len", type=int, default=32_768, help="int64s per leaf")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--memory-limit", default="300MB")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--max-kills", type=int, default=20, help="then the graph may end")
    parser.add_argument(
        "--allowed-failures",
        type=int,
        default=3,
        help="deaths a running task may witness before it fails with KilledWorker",
    )
    parser.add_argument("--million", type=int, default=1_000_000, help="tasks of phase 2")
    parser.add_argument("--processes-only", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.leaves, args.million = 4096, 100_000
    report: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        },
        "args": vars(args),
    }
    # many tasks first, while the kernel's memory is its own: the chaos phase gathers
    # a gigabyte of arrays, whose pages the process keeps
    report["many_tasks"] = []
    for processes in [True] if args.processes_only else [True, False]:
        if args.million:
            print(f"{args.million:,} tasks, {'processes' if processes else 'embedded'}:")
            report["many_tasks"].append(many_tasks(args.million, processes))
    report["chaos"] = chaos(args)
    print(json.dumps(report["chaos"], indent=1))
    path = os.path.join(HERE, "results", "soak.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"written to {path}; chaos ok={report['chaos']['ok']}")


if __name__ == "__main__":
    main()
