"""Instructions per task, counted by valgrind: a measure that machine noise cannot blur.

    .venv-bench/bin/python benchmarks/instructions.py chain [--tasks 500] [--no-metrics]

Wall-clock comparisons on this kind of VM move by 10-15% from run to run; the
number of instructions the engine executes per task does not. Each task is run
inline on the loop thread (the worker's pool is replaced), so there are no
thread hand-offs: what is counted is the engine's own work per task, scheduler
and worker passes, metrics and task-running included. The script runs itself
twice under ``valgrind --tool=callgrind``, with 1 and 3 computations of the
graph, and prints (count(3) - count(1)) / (2 * tasks): start-up cancels out.
Kernel time (system calls, wake-ups) is not counted. Code runs some 50 times slower
under valgrind, so the task runner's time thresholds (below which a task skips its
CPU-clock reading) are stretched by as much: the same share of trivial tasks reads
the clock as natively.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from run import chain_graph, independent_graph, tree_graph

GRAPHS = {"chain": chain_graph, "independent": independent_graph, "tree": tree_graph}
VALGRIND_SLOWDOWN = 50


def compute_inline(workload: str, tasks: int, repeats: int, metrics: bool) -> None:
    from kernel_cluster import Client, KernelCluster
    from kernel_cluster.engine import execute

    execute._SHORT_TASK *= VALGRIND_SLOWDOWN
    execute._STALE_READING *= VALGRIND_SLOWDOWN
    with KernelCluster(
        n_workers=1, threads_per_worker=2, profile=False, fine_metrics=metrics
    ) as cluster:
        client = Client(cluster, set_as_default=False)
        (worker,) = cluster.workers.values()
        pool, loop = worker.pool, cluster.loop_thread.loop
        pending: list = []

        def run_pending() -> None:
            while pending:
                fn, args = pending.pop(0)
                pool.done.append(fn(*args))
            worker._on_tasks_done()

        def submit(fn, *args) -> None:  # the pool, minus its threads
            pending.append((fn, args))
            if len(pending) == 1:
                loop.call_soon(run_pending)

        pool.submit = submit
        worker.timeline.add_threads([cluster.loop_thread.thread.ident], time.perf_counter())
        dsk, keys, check = GRAPHS[workload](tasks)
        for _ in range(repeats):
            if not check(client.get(dsk, keys)):
                raise AssertionError(f"{workload} computed a wrong result")
        client.close()


def count(args: argparse.Namespace, repeats: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    cmd += [__file__, args.workload, "--tasks", str(args.tasks), "--inline", str(repeats)]
    cmd += ["--no-metrics"] if args.no_metrics else []
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=GRAPHS)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--no-metrics", action="store_true", help="fine_metrics=False")
    parser.add_argument("--inline", type=int, help=argparse.SUPPRESS)  # the counted child
    args = parser.parse_args()
    if args.inline:
        compute_inline(args.workload, args.tasks, args.inline, not args.no_metrics)
        return
    n = len(GRAPHS[args.workload](args.tasks)[0])
    per_task = (count(args, 3) - count(args, 1)) / (2 * n)
    print(
        f"{args.workload}, {n} tasks, metrics {'off' if args.no_metrics else 'on'}: "
        f"{per_task:,.0f} instructions per task"
    )


if __name__ == "__main__":
    main()
