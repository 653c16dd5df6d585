"""Nested spans against flat ones: what a deep tree of spans costs to make and to read.

Issue 32 found ``client.spans()`` taking 21 s with 3,000 nested spans (0.6 s at 300):
every span's numbers summed its whole subtree, so a chain of spans cost the square of
its depth. Here each shape gets N spans and one trivial task in each:

- **nested**: ``with span("s0"): ... with span("s1"): ...`` N deep, a task submitted
  at each level;
- **flat**: N spans side by side, a task in each.

and the time is taken for submitting and gathering the tasks, ``client.spans()``,
``.to_pandas()`` of it, and ``client.fine_metrics(span=...)`` of the innermost (or
last) span. The two shapes alternate in rounds (``interleave.rounds``) on one
embedded cluster each, so the machine's drift falls on both; ``nested/flat`` is the
median over rounds of the per-round ratio. Nested spans should cost what flat ones
do: a ratio near 1 at every N.

    .venv/bin/python benchmarks/nested_spans.py [--sizes 300 1000 3000] [--rounds 3]

Another checkout first on PYTHONPATH measures that one (the "before").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))  # the old code recursed

from interleave import rounds  # noqa: E402  (benchmarks/ is on sys.path when run)

import kernel_cluster  # noqa: E402
from kernel_cluster import Client, KernelCluster, span  # noqa: E402


def inc(x: int) -> int:
    return x + 1


def build(client: Client, n: int, nested: bool, tag: str) -> tuple[float, str]:
    """N spans of one shape, a task in each; seconds to submit and gather, and the
    tag of the innermost (or last) span."""
    t0 = time.perf_counter()
    futures = []
    last = ""
    with ExitStack() as stack:
        for i in range(n):
            last = f"{tag}-{i}"
            if nested:
                stack.enter_context(span(last))
                futures.append(client.submit(inc, i, pure=False))
            else:
                with span(last):
                    futures.append(client.submit(inc, i, pure=False))
    client.gather(futures)
    return time.perf_counter() - t0, last


def measure(client: Client, n: int, nested: bool, counter: list[int]) -> dict[str, float]:
    counter[0] += 1
    submit, last = build(client, n, nested, f"{'n' if nested else 'f'}{counter[0]}")
    t0 = time.perf_counter()
    view = client.spans()
    t1 = time.perf_counter()
    view.to_pandas()
    t2 = time.perf_counter()
    client.fine_metrics(span=last)
    t3 = time.perf_counter()
    return {
        "submit_and_gather": submit,
        "spans": t1 - t0,
        "to_pandas": t2 - t1,
        "fine_metrics_span": t3 - t2,
        "n_spans_seen": len(view),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[300, 1000, 3000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "nested_spans.json")
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results: dict[str, dict] = {}
    for n in args.sizes:
        # one cluster per shape: each round adds N spans to it, as a session would
        with (
            KernelCluster(n_workers=1, threads_per_worker=2) as c1,
            Client(c1, set_as_default=False) as nested_client,
            KernelCluster(n_workers=1, threads_per_worker=2) as c2,
            Client(c2, set_as_default=False) as flat_client,
        ):
            records: dict[str, list[dict[str, float]]] = {"nested": [], "flat": []}
            counter = [0]

            def run(
                shape: str,
                client: Client,
                n: int = n,
                counter: list[int] = counter,
                records: dict = records,
            ) -> float:
                r = measure(client, n, shape == "nested", counter)
                records[shape].append(r)
                return r["spans"]

            rounds(
                {
                    "nested": lambda: run("nested", nested_client),
                    "flat": lambda: run("flat", flat_client),
                },
                args.rounds,
                warm_up=False,
            )
        row: dict[str, dict[str, float]] = {}
        for what in ("submit_and_gather", "spans", "to_pandas", "fine_metrics_span"):
            nested_t = [r[what] for r in records["nested"]]
            flat_t = [r[what] for r in records["flat"]]
            ratios = [a / b for a, b in zip(nested_t, flat_t, strict=True)]
            row[what] = {
                "nested_median_s": statistics.median(nested_t),
                "flat_median_s": statistics.median(flat_t),
                "nested_over_flat": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
        results[str(n)] = row
        print(f"N={n}")
        for what, r in row.items():
            print(
                f"  {what:18} nested {r['nested_median_s']:8.3f} s  flat "
                f"{r['flat_median_s']:8.3f} s  nested/flat {r['nested_over_flat']:6.2f} "
                f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
            )
    out = {
        "results": results,
        "rounds": args.rounds,
        "kernel_cluster": os.path.dirname(kernel_cluster.__file__),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"load average {load_before:.1f} before, {out['load_average_after']:.1f} after")


if __name__ == "__main__":
    main()
