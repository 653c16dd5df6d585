"""What the views cost on a Dask cluster, and what they send, against the engine.

    .venv/bin/python benchmarks/dask_views.py [--quick] [--rounds N]

1. Overhead. A Dask ``LocalCluster(processes=True, n_workers=2,
   threads_per_worker=1)`` runs the same work with no view and with the
   ``FineMetrics``, ``TaskStream`` and ``SpanTree`` widgets attached to it (each
   polling the DaskSource at its normal rate, 0.5 s, from its own thread, and
   publishing deltas as to a browser that asked for them). Workloads:
     trivial   2,000 independent trivial tasks (map + gather): per-task cost dominates
     numpy     100 tasks sorting 250,000 random floats each: real work
   Each run is one ``with span(...)`` block; the configurations alternate in
   rounds (``interleave.rounds``) and the overhead is the median over rounds of
   (views / no views - 1), with a 90% bootstrap interval. Target: under 3%.
2. Cost of one read: the DaskSource reads a widget makes per tick, timed alone.
3. Bytes per update: the same workload (``WORKLOAD_TASKS`` tasks under a span, then
   their sum) with the three widgets on a Dask cluster and on a
   ``KernelCluster(processes=True)`` of the same shape: messages sent and bytes
   per message (content as JSON plus binary buffers, ``publisher.message_size``) after
   the first full state, per widget, until the widget has shown every task.

The machine is shared: its load average is recorded before and after.
Results go to benchmarks/results/dask_views.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from interleave import overhead, rounds

RESULTS = Path(__file__).resolve().parent / "results" / "dask_views.json"
WIDGETS = ("FineMetrics", "TaskStream", "SpanTree")
WORKLOAD_TASKS = 500


def inc(x: int) -> int:
    return x + 1


def sort_random(seed: int) -> float:
    return float(np.sort(np.random.default_rng(seed).random(250_000))[0])


def trivial(client: Any) -> None:
    out = client.gather(client.map(inc, range(2_000), pure=False))
    assert sum(out) == 2_000 * 2_001 // 2


def numpy_work(client: Any) -> None:
    assert len(client.gather(client.map(sort_random, range(100), pure=False))) == 100


def make_widgets(client: Any) -> list[Any]:
    """The three widgets, polling at their default rate, each as if a browser had
    just asked for the full state (from then on: deltas)."""
    from kernel_cluster.jupyter import widgets

    made = [getattr(widgets, name)(client) for name in WIDGETS]
    for w in made:
        w._on_browser_message(w, {"type": "refresh"}, [])
    return made


class Probe:
    """One timed run of ``work`` in a span, with or without the widgets attached."""

    def __init__(self, client: Any, work: Any, views: bool) -> None:
        self.client, self.work, self.views = client, work, views

    def __call__(self) -> float:
        from kernel_cluster import span

        attached = make_widgets(self.client) if self.views else []
        try:
            t = time.perf_counter()
            with span("bench"):
                self.work(self.client)
            return time.perf_counter() - t
        finally:
            for w in attached:
                w.close()


def read_costs(source: Any, n: int = 50) -> dict[str, float]:
    """Median milliseconds of each read a live widget makes per tick."""
    reads = {
        "fine_metrics(refresh=False)": lambda: source.fine_metrics(refresh=False),
        "spans(refresh=False)": lambda: source.spans(refresh=False),
        "progress()": source.progress,
        "task_stream_index()": source.task_stream_index,
        "task_stream_since(last 100)": lambda: source.task_stream_since(
            source.task_stream_index() - 100
        ),
    }
    out = {}
    for name, read in reads.items():
        times = []
        for _ in range(n):
            t = time.perf_counter()
            read()
            times.append(time.perf_counter() - t)
        out[name] = 1000 * statistics.median(times)
    return out


def bytes_per_update(client: Any, source: Any) -> dict[str, dict[str, float]]:
    """Messages and bytes each widget sends while the workload runs, after its full
    state went out, until it has shown every task of the workload."""
    from kernel_cluster import span

    widgets = make_widgets(client)
    base = {id(w): (w.publisher.sent_messages, w.publisher.sent_bytes) for w in widgets}
    index0 = source.task_stream_index()
    with span("bytes"):
        futures = client.map(inc, range(10_000, 10_000 + WORKLOAD_TASKS), pure=False)
        assert client.submit(sum, futures).result() > 0
    source.fine_metrics()  # every worker's numbers are in: the widgets' next tick shows them
    target = WORKLOAD_TASKS + 1
    stream = widgets[1].publisher.feeds["tasks"]
    deadline = time.monotonic() + 30
    while stream.next_index < index0 + target and time.monotonic() < deadline:
        time.sleep(0.1)  # the widgets poll at their own rate; nothing to wait on but them
    out = {}
    for w in widgets:
        w.update(force=True)  # what their next tick would send: the last numbers
        messages0, bytes0 = base[id(w)]
        messages = w.publisher.sent_messages - messages0
        sent = w.publisher.sent_bytes - bytes0
        out[type(w).__name__] = {
            "full_bytes": bytes0,
            "messages": messages,
            "bytes": sent,
            "bytes_per_message": sent / messages if messages else 0.0,
        }
        w.close()
    del futures
    return out


def dask_cluster() -> tuple[Any, Any]:
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return cluster, Client(cluster)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else args.rounds

    import kernel_cluster
    from kernel_cluster import Client, KernelCluster
    from kernel_cluster.diagnostics.attach import set_default_source, source_of

    report: dict[str, Any] = {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
        },
        "rounds": repeats,
    }
    cluster, client = dask_cluster()
    try:
        source = kernel_cluster.attach(client)  # spans go to Dask
        for name, work in (("trivial", trivial), ("numpy", numpy_work)):
            walls = rounds(
                {"off": Probe(client, work, False), "views": Probe(client, work, True)}, repeats
            )
            report[f"overhead/{name}"] = {
                "off_s": statistics.median(walls["off"]),
                "views_s": statistics.median(walls["views"]),
                "overhead": overhead(walls["views"], walls["off"]),
                "runs_s": walls,
            }
        report["read_ms"] = read_costs(source)
        report["bytes/dask"] = bytes_per_update(client, source)
    finally:
        set_default_source(None)
        client.close()
        cluster.close()
    engine = KernelCluster(n_workers=2, threads_per_worker=1, processes=True)
    try:
        with Client(engine) as ours:
            report["bytes/engine"] = bytes_per_update(ours, source_of(ours))
    finally:
        engine.close()
    report["machine"]["load_after"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")

    print(f"load average before {report['machine']['load_before']}, after", end=" ")
    print(report["machine"]["load_after"])
    for name in ("trivial", "numpy"):
        r = report[f"overhead/{name}"]
        o = r["overhead"]
        print(
            f"{name:8} off {r['off_s']:.3f} s  views {r['views_s']:.3f} s  overhead "
            f"{o['median_of_rounds']:+.1%} [{o['ci_low']:+.1%}..{o['ci_high']:+.1%}]"
        )
    for read, ms in report["read_ms"].items():
        print(f"  {read:32} {ms:7.2f} ms")
    print(f"{'widget':12} {'engine msgs':>11} {'B/msg':>8} | {'dask msgs':>9} {'B/msg':>8}")
    for w in WIDGETS:
        e, d = report["bytes/engine"][w], report["bytes/dask"][w]
        print(
            f"{w:12} {e['messages']:11d} {e['bytes_per_message']:8.0f} | "
            f"{d['messages']:9d} {d['bytes_per_message']:8.0f}"
        )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
