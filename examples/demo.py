"""The demo workload: sensor readings, from raw text to a per-sensor summary.

    make demo            (or: .venv/bin/python examples/demo.py)

A fleet of sensors reports temperature and humidity as CSV text, one chunk per
upload. The pipeline runs on the embedded cluster that ``Client()`` starts in
this process, in four stages, each a batch of tasks whose inputs are the
previous stage's futures:

    generate   make the CSV text of each chunk (a seeded RNG: same data every run)
    parse      text -> numpy arrays, with plain Python and numpy (no pandas)
    transform  drop glitch readings, apply per-sensor calibration, derive dew point
    reduce     per-chunk partial aggregates, then a pairwise tree of merges

The script prints the summary table, how long each stage took, and then checks
the answer against a serial recomputation that shares none of the reduction
code; it exits with status 1 if they disagree.

Stages are separate functions on purpose: the demo will grow to show fine
metrics and spans per stage, and each stage is the natural unit for those.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from kernel_cluster.client.client import Client
from kernel_cluster.client.futures import wait

N_CHUNKS = 32
ROWS_PER_CHUNK = 5_000
N_SENSORS = 8
SEED = 20240501

HEADER = "timestamp,sensor,temperature_c,humidity_pct"
SENSOR_IDS = [f"S{i:02d}" for i in range(N_SENSORS)]
# Each sensor reads warm or cold by a fixed amount, measured once at installation;
# transform() subtracts it so that sensors can be compared with one another.
CALIBRATION_C = np.linspace(-0.8, 0.8, N_SENSORS)
# Readings outside these ranges are hardware faults, not weather.
VALID_TEMPERATURE_C = (-40.0, 60.0)
VALID_HUMIDITY_PCT = (0.0, 100.0)
GLITCH_RATE = 0.005

TABLE_HEADER = f"{'sensor':<8}{'rows':>8}{'mean C':>10}{'max C':>10}{'mean dew pt C':>16}"


# -- the work each task does ------------------------------------------------------------
# Plain functions of their inputs: the cluster calls them, and so does the serial
# check at the end, which is what makes the comparison meaningful.


def generate_chunk(index: int) -> str:
    """One upload: ROWS_PER_CHUNK readings from random sensors, as CSV text."""
    # Seeding per chunk (not one global stream) keeps each chunk reproducible no
    # matter which thread makes it or in which order.
    rng = np.random.default_rng([SEED, index])
    start = np.datetime64("2024-05-01T00:00:00") + np.timedelta64(index * ROWS_PER_CHUNK, "s")
    stamps = np.datetime_as_string(start + np.arange(ROWS_PER_CHUNK).astype("timedelta64[s]"))
    sensor = rng.integers(0, N_SENSORS, ROWS_PER_CHUNK)
    hours = (index * ROWS_PER_CHUNK + np.arange(ROWS_PER_CHUNK)) / 3600.0
    daily = 6.0 * np.sin(2 * np.pi * (hours - 9.0) / 24.0)
    temperature = 18.0 + daily + CALIBRATION_C[sensor] + rng.normal(0.0, 0.7, ROWS_PER_CHUNK)
    humidity = np.clip(65.0 - 1.5 * daily + rng.normal(0.0, 4.0, ROWS_PER_CHUNK), 5.0, 99.0)
    # Real sensors occasionally send sentinel values when they fault.
    glitch = rng.random(ROWS_PER_CHUNK) < GLITCH_RATE
    temperature[glitch] = rng.choice([-999.0, 999.9], glitch.sum())
    lines = [HEADER]
    lines.extend(
        f"{t},{SENSOR_IDS[s]},{x:.2f},{h:.1f}"
        for t, s, x, h in zip(stamps, sensor.tolist(), temperature.tolist(), humidity.tolist())
    )
    return "\n".join(lines)


def parse_chunk(text: str) -> dict[str, np.ndarray]:
    """CSV text -> one numpy array per column."""
    header, *rows = text.splitlines()
    if header != HEADER:
        raise ValueError(f"Unexpected CSV header {header!r}")
    stamps, sensors, temperature, humidity = zip(*(row.split(",") for row in rows))
    sensor_index = {name: i for i, name in enumerate(SENSOR_IDS)}
    return {
        "timestamp": np.array(stamps, dtype="datetime64[s]"),
        "sensor": np.array([sensor_index[s] for s in sensors], dtype=np.int64),
        "temperature": np.array(temperature, dtype=np.float64),
        "humidity": np.array(humidity, dtype=np.float64),
    }


def transform_chunk(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop faulty readings, remove each sensor's bias, add the dew point."""
    t, h = cols["temperature"], cols["humidity"]
    ok = (t > VALID_TEMPERATURE_C[0]) & (t < VALID_TEMPERATURE_C[1])
    ok &= (h > VALID_HUMIDITY_PCT[0]) & (h <= VALID_HUMIDITY_PCT[1])
    sensor = cols["sensor"][ok]
    temperature = t[ok] - CALIBRATION_C[sensor]
    return {
        "sensor": sensor,
        "temperature": temperature,
        "dew_point": dew_point(temperature, h[ok]),
        "dropped": np.array(np.count_nonzero(~ok)),
    }


def dew_point(temperature_c: np.ndarray, humidity_pct: np.ndarray) -> np.ndarray:
    # Magnus approximation; good to about 0.4 C over the range these sensors see.
    b, c = 17.62, 243.12
    gamma = np.log(humidity_pct / 100.0) + b * temperature_c / (c + temperature_c)
    return c * gamma / (b - gamma)


@dataclass
class Partial:
    """What the reduction carries: sums rather than means, so that merging is exact."""

    count: np.ndarray
    temp_sum: np.ndarray
    temp_max: np.ndarray
    dew_sum: np.ndarray
    dropped: int


def aggregate_chunk(cols: dict[str, np.ndarray]) -> Partial:
    s = cols["sensor"]
    temp_max = np.full(N_SENSORS, -np.inf)
    np.maximum.at(temp_max, s, cols["temperature"])
    return Partial(
        count=np.bincount(s, minlength=N_SENSORS),
        temp_sum=np.bincount(s, weights=cols["temperature"], minlength=N_SENSORS),
        temp_max=temp_max,
        dew_sum=np.bincount(s, weights=cols["dew_point"], minlength=N_SENSORS),
        dropped=int(cols["dropped"]),
    )


def merge(a: Partial, b: Partial) -> Partial:
    return Partial(
        count=a.count + b.count,
        temp_sum=a.temp_sum + b.temp_sum,
        temp_max=np.maximum(a.temp_max, b.temp_max),
        dew_sum=a.dew_sum + b.dew_sum,
        dropped=a.dropped + b.dropped,
    )


# -- the stages, as batches of tasks ----------------------------------------------------
# Explicit keys such as ("parse", 3) name each task after its stage, so that the
# task stream and per-prefix metrics will group work by stage.
# Each stage waits for its tasks before the next starts, so that its time is its
# own; the data stays on the cluster, where the next stage finds it.


@dataclass
class StageLog:
    rows: list[tuple[str, int, float]]

    def record(self, name: str, n_tasks: int, start: float) -> None:
        self.rows.append((name, n_tasks, time.perf_counter() - start))


def stage_generate(client: Client, log: StageLog) -> list:
    start = time.perf_counter()
    futures = client.map(
        generate_chunk, range(N_CHUNKS), key=[("generate", i) for i in range(N_CHUNKS)]
    )
    wait(futures)
    log.record("generate", len(futures), start)
    return futures


def stage_parse(client: Client, log: StageLog, texts: list) -> list:
    start = time.perf_counter()
    futures = client.map(parse_chunk, texts, key=[("parse", i) for i in range(len(texts))])
    wait(futures)
    log.record("parse", len(futures), start)
    return futures


def stage_transform(client: Client, log: StageLog, tables: list) -> list:
    start = time.perf_counter()
    futures = client.map(
        transform_chunk, tables, key=[("transform", i) for i in range(len(tables))]
    )
    wait(futures)
    log.record("transform", len(futures), start)
    return futures


def stage_reduce(client: Client, log: StageLog, tables: list) -> Partial:
    """Partial aggregates per chunk, then merge pairs until one is left.

    A tree rather than one task over every chunk: merges at the same level run in
    parallel, and no single task needs all chunks at once.
    """
    start = time.perf_counter()
    level = client.map(aggregate_chunk, tables, key=[("aggregate", i) for i in range(len(tables))])
    n_tasks = len(level)
    depth = 0
    while len(level) > 1:
        depth += 1
        merged = [
            client.submit(merge, level[i], level[i + 1], key=("merge", depth, i // 2))
            for i in range(0, len(level) - 1, 2)
        ]
        n_tasks += len(merged)
        if len(level) % 2:
            merged.append(level[-1])  # odd one out moves up a level unmerged
        level = merged
    total = level[0].result()
    log.record("reduce", n_tasks, start)
    return total


# -- output and verification ------------------------------------------------------------


def summary_rows(p: Partial) -> list[tuple[str, int, float, float, float]]:
    mean_temp = p.temp_sum / p.count
    mean_dew = p.dew_sum / p.count
    return [
        (SENSOR_IDS[i], int(p.count[i]), mean_temp[i], p.temp_max[i], mean_dew[i])
        for i in range(N_SENSORS)
    ]


def print_table(p: Partial) -> None:
    print(TABLE_HEADER)
    print("-" * len(TABLE_HEADER))
    for name, count, mean, peak, dew in summary_rows(p):
        print(f"{name:<8}{count:>8}{mean:>10.2f}{peak:>10.2f}{dew:>16.2f}")
    total = int(p.count.sum())
    print(f"{'all':<8}{total:>8}   ({p.dropped} faulty readings dropped)")


def print_timings(log: StageLog, total_s: float) -> None:
    print(f"{'stage':<12}{'tasks':>7}{'seconds':>10}")
    for name, n, seconds in log.rows:
        print(f"{name:<12}{n:>7}{seconds:>10.3f}")
    n_total = sum(n for _, n, _ in log.rows)
    print(f"{'total':<12}{n_total:>7}{total_s:>10.3f}")


def print_fine_metrics(metrics, total_s: float, nthreads: int) -> None:
    """Where the worker threads' time went: the seeds' by-function and by-activity views.

    The seconds add up to the run's wall time times the number of threads; lots of
    thread-noncpu in pure-Python stages is the GIL at work (threads take turns).
    """
    import pandas as pd

    from kernel_cluster.diagnostics.queries.fine_metrics import by_activity, by_function

    table = by_function(metrics, "seconds")
    shown = [c for c in ("thread-cpu", "thread-noncpu", "executor", "other") if c in table]
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 100):
        print("task execution, by function (seconds)")
        print(table[[*shown, "total"]].to_string())
        print()
        print("task execution, by activity (seconds)")
        print(by_activity(metrics, "seconds").to_string())
    seconds = by_activity(metrics, "seconds").sum()
    print(
        f"\n{seconds:.2f} thread-seconds measured for {total_s:.2f} s x {nthreads} threads "
        f"= {total_s * nthreads:.2f} available ({seconds / (total_s * nthreads):.0%})"
    )


def serial_check(result: Partial) -> list[str]:
    """Recompute without the cluster, reducing with a different method; list mismatches.

    The per-chunk functions are shared, but aggregation here concatenates every
    chunk and aggregates once, so a lost, repeated or mis-wired task in the
    cluster's tree would show up as a difference.
    """
    chunks = [transform_chunk(parse_chunk(generate_chunk(i))) for i in range(N_CHUNKS)]
    sensor = np.concatenate([c["sensor"] for c in chunks])
    temperature = np.concatenate([c["temperature"] for c in chunks])
    dew = np.concatenate([c["dew_point"] for c in chunks])
    dropped = sum(int(c["dropped"]) for c in chunks)
    count = np.bincount(sensor, minlength=N_SENSORS)
    problems = []
    if not np.array_equal(count, result.count):
        problems.append(f"counts differ: serial {count.tolist()} vs {result.count.tolist()}")
    if dropped != result.dropped:
        problems.append(f"dropped differ: serial {dropped} vs {result.dropped}")
    if int(count.sum()) + dropped != N_CHUNKS * ROWS_PER_CHUNK:
        problems.append("kept + dropped rows do not add up to the rows generated")
    for i in range(N_SENSORS):
        mine = sensor == i
        expected = (temperature[mine].mean(), temperature[mine].max(), dew[mine].mean())
        got = (
            result.temp_sum[i] / result.count[i],
            result.temp_max[i],
            result.dew_sum[i] / result.count[i],
        )
        if not np.allclose(expected, got, rtol=1e-9, atol=1e-9):
            problems.append(f"{SENSOR_IDS[i]}: serial {expected} vs cluster {got}")
    return problems


def main() -> int:
    client = Client()  # the default embedded cluster: threads in this process
    try:
        print(
            f"{N_CHUNKS} chunks x {ROWS_PER_CHUNK} rows, {N_SENSORS} sensors, on {client.cluster}"
        )
        log = StageLog([])
        start = time.perf_counter()
        texts = stage_generate(client, log)
        tables = stage_parse(client, log, texts)
        clean = stage_transform(client, log, tables)
        result = stage_reduce(client, log, clean)
        total_s = time.perf_counter() - start
        metrics = client.fine_metrics(unit=None)
        nthreads = client.scheduler_info()["total_nthreads"]
    finally:
        client.close()

    print()
    print_table(result)
    print()
    print_timings(log, total_s)
    print()
    print_fine_metrics(metrics, total_s, nthreads)
    print()
    check_start = time.perf_counter()
    problems = serial_check(result)
    check_s = time.perf_counter() - check_start
    if problems:
        print("CHECK FAILED: the cluster's answer differs from a serial recomputation:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"check: matches a serial recomputation ({check_s:.3f} s, no cluster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
