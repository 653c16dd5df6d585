"""What live views cost the engine: trivial tasks with the dashboard plus four views
alive against none, in a session already holding 0, 2,000 or 10,000 spans.

Issue 25: with 2,000 spans, the dashboard and four widgets or panels cut the
throughput of trivial tasks to 0.22-0.55 of what it was with none (each view copied
the whole state on the engine's loop, every half second). The target is a cost
under 3%.

The views are the inline widgets' publishers without a browser (their messages are
made and dropped): the dashboard (metrics, spans, progress), FineMetrics (metrics,
spans), SpanTree, Progress and TaskStream, at the widgets' default interval
(0.5 s). On this checkout they are fed by the kernel's one hub; on a checkout
without ``jupyter/hub.py`` each gets its own poller thread, as widgets had then.

Rounds alternate views on and off (``interleave.rounds``), so that the machine's
drift falls on both; a round runs ``--tasks`` trivial tasks (``client.map`` then
``gather``) in ``--batches`` batches, and the result is the median over rounds of
the on/off ratio of tasks per second (1.0: free)::

    .venv/bin/python benchmarks/hub_overhead.py [--spans 0 2000 10000] [--rounds 5]
        [--tasks 2000] [--label after]

run from ``benchmarks/`` (another checkout first on PYTHONPATH for a "before").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import kernel_cluster
from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.jupyter import publisher as publisher_module
from kernel_cluster.jupyter.publisher import Publisher

try:
    from kernel_cluster.jupyter.hub import hub as kernel_hub
except ImportError:  # before the hub: a poller per view
    kernel_hub = None

VIEWS = [
    ("metrics", "spans", "progress"),  # the dashboard
    ("metrics", "spans"),  # FineMetrics
    ("spans",),  # SpanTree
    ("progress",),  # Progress
    ("tasks",),  # TaskStream
]


def inc(x: int) -> int:
    return x + 1


def drop(content: dict[str, Any], buffers: list[bytes]) -> None:
    pass


class Views:
    def __init__(self, source: Any) -> None:
        self.source = source
        self.live: list[Any] = []

    def start(self) -> None:
        for feeds in VIEWS:
            options = {"tasks": {"max_tasks": 100_000}} if "tasks" in feeds else {}
            pub = Publisher(self.source, feeds, drop, min_interval=0.5, options=options)
            pub.send_full()
            if kernel_hub is not None:
                kernel_hub().subscribe(pub)
                self.live.append(pub)
            else:
                poller = publisher_module.Poller(pub, 0.5)  # type: ignore[attr-defined]
                poller.start()
                self.live.append(poller)

    def stop(self) -> None:
        for item in self.live:
            if kernel_hub is not None:
                item.close()
            else:
                item.stop()
        self.live = []


def make_spans(client: Client, n: int) -> None:
    futures = []
    for i in range(n):
        with span(f"old-{i}"):
            futures.append(client.submit(inc, i, key=f"old-{i}"))
        if len(futures) >= 500:
            client.gather(futures)
            futures = []
    client.gather(futures)


def one_round(client: Client, tasks: int, batches: int, tag: str) -> float:
    t0 = time.perf_counter()
    per = tasks // batches
    for b in range(batches):
        keys = [f"{tag}-{b}-{i}" for i in range(per)]
        client.gather(client.map(inc, range(per), key=keys))
    return tasks / (time.perf_counter() - t0)


def measure(n_spans: int, args: argparse.Namespace) -> dict[str, Any]:
    with KernelCluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster) as client:
        make_spans(client, n_spans)
        views = Views(client.diagnostics)
        one_round(client, args.tasks, args.batches, "warm")
        on: list[float] = []
        off: list[float] = []
        ratios: list[float] = []
        for r in range(args.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            rates = {}
            for mode in order:
                if mode == "on":
                    views.start()
                    time.sleep(0.6)  # the views' first tick has happened
                rates[mode] = one_round(client, args.tasks, args.batches, f"{mode}-{r}")
                if mode == "on":
                    views.stop()
            on.append(rates["on"])
            off.append(rates["off"])
            ratios.append(rates["on"] / rates["off"])
        return {
            "spans": n_spans,
            "tasks_per_s_on": statistics.median(on),
            "tasks_per_s_off": statistics.median(off),
            "on_over_off_median": statistics.median(ratios),
            "ratios": ratios,
            "load_average_after": os.getloadavg(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[0, 2000, 10000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    results = []
    for n in args.spans:
        result = measure(n, args)
        print(json.dumps(result))
        results.append(result)
    out = {
        "label": args.label,
        "kernel_cluster": os.path.dirname(kernel_cluster.__file__),
        "hub": kernel_hub is not None,
        "rounds": args.rounds,
        "tasks": args.tasks,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "results": results,
    }
    path = Path(__file__).parent / "results" / f"hub_overhead_{args.label}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
