"""What the run history costs: throughput with it on and off, bytes per span, compare time.

    .venv/bin/python benchmarks/history_cost.py [--quick] [--rounds N]

1. Throughput. 10,000 trivial tasks in 1,000 spans (each span maps 10 ``inc`` and
   gathers them, so every span finishes and is recorded), on an embedded cluster
   (one worker, two threads), with the history's recorder on and off. Both run on
   the same cluster, switched between runs (the recorder is started and stopped);
   runs are interleaved in rounds in rotating order (benchmarks/interleave.py) and
   the overhead is read per round, summarised by the median over rounds with a
   90% bootstrap interval. Target: under 2%. The recorder writes the spans of a
   run's last second after it: that write is done (untimed) before the next run,
   so it never lands on the other configuration; its cost is in the recorder's
   CPU time per span, measured apart (the thread's own CPU time over whole runs,
   reading, snapshotting and writing every span), and by part afterwards
   (``per_span_parts``: the copies on the engine loop's clock, the snapshots and
   rows on the recorder's thread), over the engine's CPU per span with the history off:
   the overhead accounted for, which a busy machine's noise does not hide. The
   process's CPU seconds per run (every thread: the engine's loop and workers, the
   recorder, the final write included) are compared too.
2. Bytes per stored span: the history file's used pages (not counting free ones)
   over the spans stored, for spans of 1, 10 and 100 task prefixes (each prefix
   with the engine's usual metrics: thread-cpu, thread-noncpu, executor, other,
   tasks, output bytes).
3. Compare time on runs of 1,000 prefixes: ``kernel_cluster.compare`` of two stored
   runs (read from the file, decoded, lined up, sorted, the verdict), and of two
   live spans of the engine (read through the DiagnosticsSource). Target: under
   100 ms. Median of repeats, wall and the calling thread's CPU seconds (a busy
   machine stretches wall time by the share of the cores the process gets).

The machine is shared (2 cores, other jobs): compare ratios from one invocation.
Results go to benchmarks/results/history_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["KERNEL_CLUSTER_HISTORY"] = "off"  # the script turns it on where it measures it

from interleave import overhead, rounds

import kernel_cluster
from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.history import recorder as recorders
from kernel_cluster.diagnostics.history import schema, store
from kernel_cluster.diagnostics.history.settings import HistorySettings
from kernel_cluster.diagnostics.snapshots import FinishedSpan
from kernel_cluster.diagnostics.spans import SpanInfo

RESULTS = Path(__file__).resolve().parent / "results" / "history_cost.json"
SPANS, PER_SPAN = 1000, 10


def inc(x: int) -> int:
    return x + 1


def spans_run(client: Client, n_spans: int) -> float:
    t = time.perf_counter()
    for i in range(n_spans):
        with span(f"s{i % 10}"):
            out = client.gather(client.map(inc, range(PER_SPAN), pure=False))
        assert out[-1] == PER_SPAN
    return time.perf_counter() - t


class ThreadClock:
    """CPU seconds of the recorder's thread, read from /proc (Linux) by thread id."""

    def __init__(self, recorder: recorders.Recorder) -> None:
        thread = recorder._thread._thread
        self.tid = thread.native_id

    def seconds(self) -> float:
        try:
            fields = Path(f"/proc/self/task/{self.tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def throughput(n_spans: int, repeats: int, path: Path) -> dict:
    settings = HistorySettings(path)
    cluster = KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0)
    client = Client(cluster, set_as_default=False)
    source = client.diagnostics
    state: dict = {"recorder": None, "cpu": 0.0, "spans": 0}
    process_cpu: dict[str, list[float]] = {"on": [], "off": []}

    def on() -> float:
        rec = recorders.Recorder(
            source, kind="embedded", cluster="bench", settings=lambda: settings
        )
        # only what this run makes (the tree's log without snapshots: the "off" runs'
        # spans are in it, and reading them would land on this run's CPU seconds)
        tree = cluster.scheduler.spans
        rec.cursor = cluster.loop_thread.run(tree.finished_since, 0).cursor
        rec.start()
        clock = ThreadClock(rec)
        written = rec.written
        cpu0 = time.process_time()
        seconds = spans_run(client, n_spans)
        cpu = clock.seconds()
        t = time.thread_time()
        rec.close()  # untimed: the last second's spans, written before the next run
        state["cpu"] += cpu + time.thread_time() - t
        state["spans"] += rec.written - written
        process_cpu["on"].append(time.process_time() - cpu0)
        return seconds

    def off() -> float:
        cpu0 = time.process_time()
        seconds = spans_run(client, n_spans)
        process_cpu["off"].append(time.process_time() - cpu0)
        return seconds

    try:
        times = rounds({"on": on, "off": off}, repeats)
        parts = per_span_parts(cluster, client, n_spans, settings)
    finally:
        client.close()
        cluster.close()
    return {
        "tasks": n_spans * PER_SPAN,
        "spans": n_spans,
        "on_seconds": times["on"],
        "off_seconds": times["off"],
        "overhead": overhead(times["on"], times["off"]),
        # past the warm-up runs (one each)
        "cpu_on_seconds": process_cpu["on"][1:],
        "cpu_off_seconds": process_cpu["off"][1:],
        "cpu_overhead": overhead(process_cpu["on"][1:], process_cpu["off"][1:]),
        "recorder_cpu_us_per_span": 1e6 * state["cpu"] / max(state["spans"], 1),
        "spans_recorded": state["spans"],
        # the same spans' cost by part (per_span_parts), over the engine's CPU per span
        "parts_us_per_span": parts,
        "engine_cpu_us_per_span": 1e6 * statistics.median(process_cpu["off"][1:]) / n_spans,
        "accounted_overhead": sum(parts.values())
        / (1e6 * statistics.median(process_cpu["off"][1:]) / n_spans),
    }


def loop_cpu(cluster: KernelCluster) -> float:
    return cluster.loop_thread.run(time.thread_time)


def settle(cluster: KernelCluster, timeout: float = 60.0) -> None:
    """Wait until the engine has forgotten the run's tasks: the loop's clock then counts
    the history's reads, not the releases still on their way."""
    deadline = time.monotonic() + timeout
    while cluster.loop_thread.run(lambda: len(cluster.scheduler.state.tasks)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the engine still holds tasks after {timeout} s")
        time.sleep(0.05)


def per_span_parts(cluster: KernelCluster, client: Client, n_spans: int, settings) -> dict:
    """What recording a span costs, by part, in CPU microseconds (median of 3): the
    engine loop's (the finished spans' copies, on the loop thread's clock, and the
    one heartbeat read per look, spread over the spans) and the recorder's (the
    snapshots summed from those copies, on the calling thread's clock; the rows made
    and written in one transaction). The cost that competes with the engine, as the
    throughput runs cannot resolve it on a busy machine."""
    source = client.diagnostics
    tree = cluster.scheduler.spans
    conn = schema.connect(settings.path)
    row = store.add_session(conn, _session())
    loop, snap, write = [], [], []
    try:
        for _ in range(3):
            cursor = cluster.loop_thread.run(tree.finished_since, 0).cursor
            spans_run(client, n_spans)
            settle(cluster)
            before, t = loop_cpu(cluster), time.thread_time()
            got = source.finished_spans(cursor)
            snap.append((time.thread_time() - t) / len(got.spans))  # off the loop
            loop.append((loop_cpu(cluster) - before) / len(got.spans))
            t = time.thread_time()
            store.write_spans(conn, row, got.spans)
            write.append((time.thread_time() - t) / len(got.spans))
    finally:
        conn.close()
    return {
        "loop_snapshot": 1e6 * statistics.median(loop),
        "recorder_snapshot": 1e6 * statistics.median(snap),
        "write": 1e6 * statistics.median(write),
    }


def synthetic(span_id: str, prefixes: int, stop: float, slow: str = "") -> FinishedSpan:
    metrics: dict = {}
    tasks, nbytes = {}, {}
    for p in range(prefixes):
        name = f"prefix-{p}"
        extra = 0.5 if name == slow else 0.0
        for activity, value in (
            ("thread-cpu", 0.01 + p * 1e-5),
            ("thread-noncpu", 0.002 + extra),
            ("executor", 0.0003),
            ("other", 0.0001),
        ):
            metrics[("execute", name, activity, "seconds")] = value
        metrics[("execute", name, "tasks", "count")] = 10
        metrics[("execute", name, "output", "bytes")] = 280
        tasks[name] = {"memory": 10}
        nbytes[name] = 280
    metrics[("execute", None, "idle", "seconds")] = 0.05
    info = SpanInfo(
        id=span_id,
        name=("run",),
        parent=None,
        children=(),
        enqueued=stop - 1.1,
        start=stop - 1.0,
        stop=stop,
        duration=1.0,
        nbytes_total=280 * prefixes,
        states={"memory": 10 * prefixes},
        done=True,
        active_cpu_seconds=2.0,
        metrics=metrics,
        code=((("analysis.py", 12, "<module>", "with span('run'):"),),),
    )
    return FinishedSpan(info, span_id, tasks, nbytes, 1, 2)


def bytes_per_span(tmp: Path, spans: int) -> dict:
    out = {}
    for prefixes in (1, 10, 100):
        path = tmp / f"size-{prefixes}.sqlite"
        conn = schema.connect(path)
        row = store.add_session(conn, _session())
        batch = [synthetic(f"r{prefixes}-{i}", prefixes, 1000.0 + i) for i in range(spans)]
        for i in range(0, spans, 100):  # as the recorder writes: batches
            store.write_spans(conn, row, batch[i : i + 100])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        used = store.used_bytes(conn)
        conn.close()
        out[str(prefixes)] = {
            "spans": spans,
            "bytes_per_span": used / spans,
            "file_bytes_per_span": path.stat().st_size / spans,
        }
    return out


def _session() -> store.Session:
    return store.Session(
        "bench", time.time(), None, "host", os.getpid(), None, "embedded", "bench", {}, None
    )


def compare_stored(tmp: Path, repeats: int) -> dict:
    path = tmp / "compare.sqlite"
    kernel_cluster.history.configure(path=path)
    conn = schema.connect(path)
    row = store.add_session(conn, _session())
    store.write_spans(
        conn,
        row,
        [synthetic("big-a", 1000, 1000.0), synthetic("big-b", 1000, 2000.0, slow="prefix-7")],
    )
    conn.close()
    times, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.thread_time()
        table = kernel_cluster.compare("run@-2", "run@-1")
        times.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    top = table.iloc[0]
    assert (top.function, top.activity) == ("prefix-7", "thread-noncpu"), table.head()
    assert len(table) == 4 * 1000 + 1
    kernel_cluster.history.configure(path=None)
    return {
        "prefixes": 1000,
        "rows": len(table),
        "median_ms": 1e3 * statistics.median(times),
        "min_ms": 1e3 * min(times),
        "cpu_median_ms": 1e3 * statistics.median(cpu),
        "repeats": repeats,
    }


def prefix_task(i: int) -> int:
    return i


def compare_live(repeats: int) -> dict:
    cluster = KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0, history=False)
    client = Client(cluster, set_as_default=False)
    ids = []
    try:
        for run in range(2):
            with span("live") as span_id:
                futures = [
                    client.submit(prefix_task, i, key=f"fn{i:04d}-{run}") for i in range(1000)
                ]
                client.gather(futures)
            ids.append(span_id)
        prefixes = {k[1] for k in client.diagnostics.spans()[-1].metrics if len(k) == 4}
        times, cpu = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.thread_time()
            table = client.compare(ids[0], ids[1])
            times.append(time.perf_counter() - t)
            cpu.append(time.thread_time() - c)
    finally:
        client.close()
        cluster.close()
    return {
        "prefixes": len(prefixes),
        "rows": len(table),
        "median_ms": 1e3 * statistics.median(times),
        "min_ms": 1e3 * min(times),
        "cpu_median_ms": 1e3 * statistics.median(cpu),
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and spans")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.rounds or (4 if args.quick else 12)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        report = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "load_before": load0,
            },
            "throughput": throughput(SPANS, repeats, tmp / "throughput.sqlite"),
            "bytes_per_span": bytes_per_span(tmp, 200 if args.quick else 1000),
            "compare_stored_1000_prefixes": compare_stored(tmp, 5 if args.quick else 20),
            "compare_live_1000_prefixes": compare_live(5 if args.quick else 20),
        }
    report["machine"]["load_after"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    t = report["throughput"]
    o = t["overhead"]
    on, off = statistics.median(t["on_seconds"]), statistics.median(t["off_seconds"])
    print(
        f"throughput, {t['tasks']:,} tasks in {t['spans']:,} spans: on {on:.2f} s, off {off:.2f} s"
    )
    print(
        f"  overhead (median of rounds) {o['median_of_rounds']:+.1%} "
        f"[90% interval {o['ci_low']:+.1%} .. {o['ci_high']:+.1%}]; "
        f"recorder thread CPU {t['recorder_cpu_us_per_span']:.0f} µs per span"
    )
    parts = t["parts_us_per_span"]
    print(
        f"  per span: loop {parts['loop_snapshot']:.0f} µs, recorder: snapshot "
        f"{parts['recorder_snapshot']:.0f} µs, write {parts['write']:.0f} µs, "
        f"engine {t['engine_cpu_us_per_span']:.0f} µs: {t['accounted_overhead']:+.1%}"
    )
    c = t["cpu_overhead"]
    print(
        f"  process CPU overhead (median of rounds) {c['median_of_rounds']:+.1%} "
        f"[90% interval {c['ci_low']:+.1%} .. {c['ci_high']:+.1%}]"
    )
    for k, v in report["bytes_per_span"].items():
        used, file = v["bytes_per_span"], v["file_bytes_per_span"]
        print(f"bytes per stored span, {k} prefixes: {used:.0f} (file: {file:.0f})")
    for k in ("compare_stored_1000_prefixes", "compare_live_1000_prefixes"):
        c = report[k]
        print(
            f"{k}: median {c['median_ms']:.1f} ms (min {c['min_ms']:.1f}; CPU "
            f"{c['cpu_median_ms']:.1f} ms), {c['rows']} rows"
        )
    print(f"load average before {load0}, after {report['machine']['load_after']}")
    return report


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
