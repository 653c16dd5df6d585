"""How long ``client.critical_path()`` and ``client.diagnose()`` take on a span of
many tasks (issue 30: under 1 s for 100,000).

    .venv/bin/python benchmarks/critical_path.py [--tasks 100000] [--repeats 3]

Runs one span of ``--tasks`` trivial tasks (a tree of sums over independent leaves,
so the walk has dependencies and thread waits to choose between), then times the
whole call (reading the span's task runs through the DiagnosticsSource, `task_runs`,
the walk) and the walk alone (core/critical_path.py), best and median of
the repeats, in wall and CPU seconds (on a shared machine, wall time is mostly
waiting for a core: the load average is kept beside them), into
results/critical_path.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "critical_path.json"


def add(*xs: int) -> int:
    return sum(xs) + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from kernel_cluster import Client, KernelCluster, span
    from kernel_cluster.core.critical_path import critical_path
    from kernel_cluster.diagnostics.queries.critical_path import select_spans

    leaves = args.tasks * 3 // 4
    graph: dict = {f"leaf-{i}": (add, i) for i in range(leaves)}
    level = [f"leaf-{i}" for i in range(leaves)]
    n = 0
    while len(graph) < args.tasks and len(level) > 1:
        nxt = []
        for i in range(0, len(level), 4):
            key = f"sum-{n}"
            n += 1
            graph[key] = (add, *level[i : i + 4])
            nxt.append(key)
        level = nxt
    with KernelCluster(n_workers=2, threads_per_worker=2, profile=False,
                       task_stream_length=2 * len(graph)) as cluster, \
            Client(cluster) as client:  # fmt: skip
        t0 = time.perf_counter()
        with span("many tasks") as span_id:
            client.get(graph, level)
        ran = time.perf_counter() - t0
        whole, whole_cpu, walk, diag, diag_cpu = [], [], [], [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            path = client.critical_path(span_id)
            whole.append(time.perf_counter() - t)
            whole_cpu.append(time.process_time() - c)
            t, c = time.perf_counter(), time.process_time()
            client.diagnose(span_id)
            diag.append(time.perf_counter() - t)
            diag_cpu.append(time.process_time() - c)
            source = client.diagnostics
            chosen, ids = select_spans(source.spans(), span_id)
            runs = source.task_runs(ids)
            c = time.process_time()
            critical_path(runs, chosen[0].enqueued, chosen[0].stop)
            walk.append(time.process_time() - c)
    text = json.dumps(
        {
            "tasks": len(graph),
            "ran_seconds": round(ran, 2),
            "steps": len(path.steps),
            "covered": round(path.covered, 3),
            "critical_path_seconds": {
                "best": round(min(whole), 3),
                "median": round(statistics.median(whole), 3),
                "max": round(max(whole), 3),
            },
            # CPU seconds of this process (its engine threads included): on a
            # shared machine, wall time is mostly waiting for a core
            "critical_path_cpu_seconds": {
                "best": round(min(whole_cpu), 3),
                "median": round(statistics.median(whole_cpu), 3),
            },
            "diagnose_seconds": {
                "best": round(min(diag), 3),
                "median": round(statistics.median(diag), 3),
            },
            "diagnose_cpu_seconds": {
                "best": round(min(diag_cpu), 3),
                "median": round(statistics.median(diag_cpu), 3),
            },
            "walk_alone_cpu_seconds": {
                "best": round(min(walk), 3),
                "median": round(statistics.median(walk), 3),
            },
            "load_average": [round(x, 1) for x in os.getloadavg()],
        },
        indent=1,
    )
    print(text)
    RESULTS.write_text(text + "\n")


if __name__ == "__main__":
    main()
