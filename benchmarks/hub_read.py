"""How long a live view's read holds the engine's loop, in a big session.

Issue 25: every widget and panel used to copy the scheduler's whole state on each
look (``fine_metrics``, ``spans``, ``progress``, the task stream's tail), and
``spans()`` rebuilt every span snapshot on the loop. The hub reads
``changes_since(cursor)`` instead: what changed, in short calls.

The session: ``--spans`` spans (10,000), ``--prefixes`` task prefixes (1,000) and
``--tasks`` task-stream records (100,000), made by running trivial tasks. Then, with a
little new work between reads (one span of ``--new`` tasks), it times every call the
reads make on the loop thread (the call itself, measured on the loop):

- **per-view reads** (what each publisher read per tick before): ``fine_metrics
  (refresh=False)``, ``spans(refresh=False)``, ``progress()``, ``task_stream_index()``
  and ``task_stream_since`` of the new records;
- **changes_since** (the hub's one read per tick), incremental, and a full one (a
  first read or a resync), which copies everything in chunks.

It reports the longest single hold and the total per read, and garbage collections
that ran during the reads (``gc.callbacks``). ``--freeze`` calls ``gc.freeze()`` once
the session is built. Run from ``benchmarks/`` (or with it on sys.path); another
checkout first on PYTHONPATH measures that one (a checkout without ``changes_since``
gets the per-view reads only)::

    .venv/bin/python benchmarks/hub_read.py [--spans 10000 --prefixes 1000 --tasks 100000]
        [--reads 20] [--freeze] [--label after]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import kernel_cluster
from kernel_cluster import Client, KernelCluster, span


def inc(x: int) -> int:
    return x + 1


class TimedLoop:
    """The engine's loop thread, timing each call made on it (on the loop)."""

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self.holds: list[float] = []

    def run(self, fn: Any, *args: Any, **kw: Any) -> Any:
        holds = self.holds

        def timed(*a: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                holds.append(time.perf_counter() - t0)

        return self._loop.run(timed, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


class GcWatch:
    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._t0)


def build(client: Client, n_spans: int, n_prefixes: int, n_tasks: int) -> None:
    per_span = max(1, n_tasks // n_spans)
    made = 0
    futures = []
    for s in range(n_spans):
        with span(f"step-{s}"):
            keys = [f"p{(made + j) % n_prefixes}-{made + j}" for j in range(per_span)]
            futures.append(client.map(inc, range(per_span), key=keys))
        made += per_span
        if len(futures) >= 200:
            client.gather(futures)
            futures = []
    client.gather(futures)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with KernelCluster(n_workers=2, threads_per_worker=2) as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        build(client, args.spans, args.prefixes, args.tasks)
        source = client.diagnostics
        source.fine_metrics(refresh=True)
        built = time.perf_counter() - t0
        state = cluster.scheduler.state
        sizes = {
            "spans": len(cluster.scheduler.spans.spans),
            "prefixes": len(state.task_prefixes),
            "task_stream": len(cluster.scheduler.task_stream.buffer),
            "metric_rows": len(cluster.scheduler.worker_metrics),
        }
        if args.freeze:
            gc.collect()
            gc.freeze()
        timed = TimedLoop(cluster.loop_thread)
        cluster.loop_thread = timed  # the source reads through cluster.loop_thread
        watch = GcWatch()
        gc.callbacks.append(watch)
        out: dict[str, Any] = {"sizes": sizes, "build_seconds": built}
        has_changes = hasattr(source, "changes_since")
        cursor = source.changes_since(0).cursor if has_changes else 0
        index = source.task_stream_index()
        kinds: dict[str, list[tuple[float, float]]] = {"per_view": [], "changes_since": []}
        gc_during: dict[str, list[float]] = {"per_view": [], "changes_since": []}
        for i in range(args.reads):
            with span(f"new-{i}"):
                keys = [f"new-{i}-{j}" for j in range(args.new)]
                client.gather(client.map(inc, range(args.new), key=keys))
            # the per-view reads, as one publisher made them each tick
            timed.holds.clear()
            watch.pauses.clear()
            source.fine_metrics(refresh=False)
            source.spans(refresh=False)
            source.progress()
            if source.task_stream_index() != index:
                index = source.task_stream_since(index)[-1].index + 1
            kinds["per_view"].append((max(timed.holds), sum(timed.holds)))
            gc_during["per_view"].extend(watch.pauses)
            if has_changes:
                timed.holds.clear()
                watch.pauses.clear()
                cursor = source.changes_since(cursor).cursor
                kinds["changes_since"].append((max(timed.holds), sum(timed.holds)))
                gc_during["changes_since"].extend(watch.pauses)
        if has_changes:
            timed.holds.clear()
            watch.pauses.clear()
            source.changes_since(0)
            out["full_read"] = {
                "max_hold_ms": max(timed.holds) * 1e3,
                "total_ms": sum(timed.holds) * 1e3,
                "calls": len(timed.holds),
                "gc_ms": [p * 1e3 for p in watch.pauses],
            }
        gc.callbacks.remove(watch)
        cluster.loop_thread = timed._loop
        for kind, values in kinds.items():
            if not values:
                continue
            out[kind] = {
                "max_hold_ms_median": statistics.median(v[0] for v in values) * 1e3,
                "max_hold_ms_worst": max(v[0] for v in values) * 1e3,
                "total_ms_median": statistics.median(v[1] for v in values) * 1e3,
                "gc_pauses": len(gc_during[kind]),
                "gc_ms_max": max(gc_during[kind], default=0.0) * 1e3,
            }
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--prefixes", type=int, default=1_000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=20, help="tasks between two reads")
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() once built")
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    result = measure(args)
    result.update(
        {
            "label": args.label,
            "kernel_cluster": os.path.dirname(kernel_cluster.__file__),
            "freeze": args.freeze,
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
        }
    )
    print(json.dumps(result, indent=2))
    name = f"hub_read_{args.label}{'_frozen' if args.freeze else ''}.json"
    path = Path(__file__).parent / "results" / name
    path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
