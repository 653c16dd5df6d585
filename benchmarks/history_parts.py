"""What recording a finished span costs, stage by stage, in CPU microseconds per span.

    .venv/bin/python benchmarks/history_parts.py [--batches N]

history_cost.py's breakdown, steadier on a busy machine: 1,000 spans of 10 trivial
tasks are run once, then each stage of their recording is timed over the whole
batch ``--batches`` times (7 by default) on its own thread's clock, and the fastest
is kept (another job's load only ever adds to a batch): the copies on the engine's
loop (``engine_source._capture``), then on the recorder's thread the sums
(``summarize_capture``) and snapshots (``_finished_span``, sums included), the
rows (``store.span_row``) and the writing of the batch (``store.write_spans``,
rows included) in one transaction to a new file. Prints the parts over the
engine's CPU per span, history off, read from history_cost.py's last results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["KERNEL_CLUSTER_HISTORY"] = "off"

from history_cost import RESULTS, _session, settle, spans_run

from kernel_cluster import Client, KernelCluster
from kernel_cluster.core.span_summary import summarize_capture
from kernel_cluster.diagnostics.history import schema, store
from kernel_cluster.diagnostics.sources import engine_source


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=7)
    batches = parser.parse_args(argv).batches
    cluster = KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0, history=False)
    client = Client(cluster, set_as_default=False)
    loop = cluster.loop_thread
    tree = cluster.scheduler.spans
    try:
        spans_run(client, 100)  # warm up
        cursor = loop.run(tree.finished_since, 0).cursor
        spans_run(client, 1000)
        settle(cluster)
        spans = loop.run(tree.finished_since, cursor).spans
        n = len(spans)

        def fastest(stage, on_loop=False):
            best, out = float("inf"), None
            for _ in range(batches):

                def timed():
                    t = time.thread_time()
                    result = stage()
                    return time.thread_time() - t, result

                seconds, out = loop.run(timed) if on_loop else timed()
                best = min(best, seconds)
            return 1e6 * best / n, out

        parts: dict[str, float] = {}
        parts["loop: copies"], copies = fastest(
            lambda: [engine_source._capture(s) for s in spans], on_loop=True
        )
        parts["recorder: sums"], _ = fastest(
            lambda: [summarize_capture(c.numbers) for c in copies]  # type: ignore[union-attr]
        )

        # the sums take the copies as their own: each batch of snapshots copies again
        def copy() -> list:
            return [engine_source._capture(s) for s in spans]

        fresh = [loop.run(copy) for _ in range(batches)]
        parts["recorder: snapshots (sums included)"], records = fastest(
            lambda: [engine_source._finished_span(c, 1, 2) for c in fresh.pop()]
        )
        parts["recorder: rows"], _ = fastest(lambda: [store.span_row(r, 1, 0.0) for r in records])
        with tempfile.TemporaryDirectory() as tmp:
            conn = schema.connect(Path(tmp) / "parts.sqlite")
            row = store.add_session(conn, _session())
            parts["recorder: rows written (rows included)"], _ = fastest(
                lambda: store.write_spans(conn, row, records)
            )
            conn.close()
    finally:
        client.close()
        cluster.close()
    total = (
        parts["loop: copies"]
        + parts["recorder: snapshots (sums included)"]
        + parts["recorder: rows written (rows included)"]
    )
    for name, us in parts.items():
        print(f"{name}: {us:.1f} µs per span")
    print(f"total: {total:.1f} µs per span")
    if RESULTS.exists():
        engine = json.loads(RESULTS.read_text())["throughput"]["engine_cpu_us_per_span"]
        share = total / engine
        print(f"over the engine's {engine:.0f} µs per span (history_cost.py): {share:+.1%}")
    print(f"load average {os.getloadavg()}")
    return parts


if __name__ == "__main__":
    main()
