"""fine-performance-metrics.txt: the document's examples, run as written
(``from kernel_cluster import context_meter, sizeof`` for distributed's and dask's),
and what it says the metrics are.
"""

from __future__ import annotations

import sys
import textwrap
import time

import numpy as np
import pytest

from kernel_cluster import Client, KernelCluster, context_meter, sizeof, span
from kernel_cluster.core.metrics import MeterOutput

NAP = 0.2  # seconds each "network read" sleeps: the I/O time is at least this


def read_from_network() -> np.ndarray:
    time.sleep(NAP)
    return np.arange(200_000, dtype=float)


def preprocess(data: np.ndarray) -> float:
    return float(sum(x * x for x in data[:100_000]))  # pure Python: CPU, holding the GIL


def metrics_of(client: Client, span_name: str, unit: str = "seconds") -> dict[str, float]:
    frame = client.fine_metrics(unit=unit, span=span_name)
    return frame.groupby("activity")["value"].sum().to_dict()


@context_meter.meter("I/O")
def read_some_files():
    data = read_from_network()
    return len(data)


def test_a_decorated_function_logs_its_wall_time_as_its_label(client):
    """``@context_meter.meter("I/O")``: "the wall time spent by the custom function
    read_some_files will be logged as "I/O"", not as thread-noncpu."""
    with span("decorated"):
        future = client.submit(read_some_files)
        assert future.result() == 200_000
    m = metrics_of(client, "decorated")
    assert m["I/O"] >= NAP
    assert m.get("thread-noncpu", 0.0) < m["I/O"]  # the sleep is I/O, not noncpu


def read_and_preprocess():
    with context_meter.meter("I/O"):
        data = read_from_network()
    return preprocess(data)


def test_part_of_a_task_logged_as_io_and_the_rest_as_cpu(client):
    """The I/O phase under its label; ``preprocess`` "still logged as a mix of
    thread-cpu and thread-noncpu"."""
    with span("split"):
        assert client.submit(read_and_preprocess, pure=False).result() > 0
    m = metrics_of(client, "split")
    assert m["I/O"] >= NAP
    assert m["thread-cpu"] > 0
    assert m.get("thread-noncpu", 0.0) < m["I/O"]


def read_infrequent_access():
    data = read_from_network()
    context_meter.digest_metric("S3 Infrequent Access", sizeof(data), "bytes")
    return data


def test_a_metric_in_bytes_of_your_own(client):
    """``digest_metric("S3 Infrequent Access", sizeof(data), "bytes")``: an arbitrary
    label in an arbitrary unit, summed per function."""
    with span("s3"):
        futures = client.map(lambda i: read_infrequent_access(), range(3))
        client.gather(futures)
    m = metrics_of(client, "s3", unit="bytes")
    assert m["S3 Infrequent Access"] == 3 * sizeof(np.arange(200_000, dtype=float))


def test_a_meter_in_client_code_records_nothing(client):
    """ "It won't work if used to decorate client-side code that defines the Dask
    graph": no task runs it, nobody listens; the block still measures itself."""
    before = client.fine_metrics(unit=None)
    with context_meter.meter("client side") as m:
        time.sleep(0.01)
    assert isinstance(m, MeterOutput) and m.delta >= 0.01 and m.stop > m.start
    after = client.fine_metrics(unit=None)
    assert "client side" not in set(after["activity"]) | set(before["activity"])


class Counter:
    """A cumulative reading for ``meter(func=...)``: each call returns the next of
    ``values`` (as a byte counter read before and after would)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0)


def meters_with_func_and_floor() -> list[tuple[float, float, float]]:
    out = []
    with context_meter.meter("received", unit="bytes", func=Counter(1_000, 3_500)) as m:
        pass
    out.append((m.start, m.stop, m.delta))
    with context_meter.meter("glitch", unit="count", func=Counter(10, 4)) as m:  # floor 0
        pass
    out.append((m.start, m.stop, m.delta))
    with context_meter.meter("signed", unit="count", func=Counter(10, 4), floor=False) as m:
        pass
    out.append((m.start, m.stop, m.delta))
    with context_meter.meter("at least", unit="count", func=Counter(0, 1), floor=5) as m:
        pass
    out.append((m.start, m.stop, m.delta))
    return out


def test_meter_takes_func_and_floor_and_yields_start_stop_delta(client):
    """``context_meter.meter(label, unit="seconds", func=time.perf_counter, floor=0)``
    as Dask's: ``func`` read before and after, the difference floored, and ``as m``
    gives ``m.start``, ``m.stop``, ``m.delta``."""
    with span("meters"):
        got = client.submit(meters_with_func_and_floor, pure=False).result()
    assert got == [(1_000, 3_500, 2_500), (10, 4, 0), (10, 4, -6), (0, 1, 5)]
    assert metrics_of(client, "meters", unit="bytes")["received"] == 2_500
    counts = metrics_of(client, "meters", unit="count")
    assert counts["signed"] == -6 and counts["at least"] == 5
    with pytest.raises(TypeError, match="floor"):
        context_meter.meter("x", floor="no")


def test_the_grand_total_is_the_runtime_times_the_threads(client):
    """ "The grand total of the time shown should roughly add up to the end-to-end
    runtime of your workload, multiplied by the number of threads on the cluster":
    per span, every second of every thread is some activity (idle included)."""
    with span("total") as span_id:
        client.gather(client.map(preprocess, [np.arange(100_000.0)] * 4))
    client.fine_metrics()

    def read(dask_scheduler):
        s = dask_scheduler.extensions["spans"].spans[span_id]
        seconds = sum(v for k, v in s.cumulative_worker_metrics.items() if k[-1] == "seconds")
        return seconds, s.active_cpu_seconds, (s.stop - s.enqueued)

    seconds, offered, runtime = client.run_on_scheduler(read)
    threads = client.scheduler_info()["total_nthreads"]
    assert seconds == pytest.approx(offered)
    assert offered == pytest.approx(runtime * threads)


def test_the_formats_the_developer_section_describes(client):
    """Workers: ``digests_total`` keyed ("execute", span_id, prefix, activity, unit);
    the scheduler's ``cumulative_worker_metrics`` ("execute", prefix, activity, unit);
    a span's the same, for its tasks alone."""
    with span("formats") as span_id:
        client.submit(read_and_preprocess, pure=False).result()
    client.fine_metrics()
    per_worker = client.run(
        lambda dask_worker: [k for k in dask_worker.digests_total if k[0] == "execute"]
    )
    keys = [k for ks in per_worker.values() for k in ks]
    assert ("execute", span_id, "read_and_preprocess", "I/O", "seconds") in keys
    assert all(len(k) == 5 for k in keys)

    def read(dask_scheduler):
        cumulative = dask_scheduler.cumulative_worker_metrics
        spans = dask_scheduler.extensions["spans"]
        return (
            ("execute", "read_and_preprocess", "I/O", "seconds") in cumulative,
            list(spans.spans[span_id].cumulative_worker_metrics),
        )

    on_scheduler, in_span = client.run_on_scheduler(read)
    assert on_scheduler
    assert ("execute", "read_and_preprocess", "I/O", "seconds") in in_span
    assert all(k[0] == "execute" and len(k) == 4 for k in in_span)


HEAVY_MODULE = textwrap.dedent(
    """
    import time

    def _burn(seconds):
        t = time.thread_time()
        while time.thread_time() - t < seconds:
            pass

    _burn(0.5)  # importing this module takes half a second of CPU

    def work(seconds):
        _burn(seconds)
        return seconds
    """
)


def test_unpickling_a_tasks_function_is_deserialize_not_the_tasks_time(tmp_path, monkeypatch):
    """A task whose module takes 0.5 s of CPU to import, run first in a fresh worker
    process: the import happens as the task is unpickled, and is ``deserialize``;
    ``thread-cpu`` is the task's own 0.3 s. The unpickling's time was taken to be all
    CPU: what of it waited showed as the task's thread-noncpu, and came off its CPU
    time (which read 0 on a busy machine), which looks like GIL contention."""
    (tmp_path / "heavy_import_for_seeds.py").write_text(HEAVY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    from heavy_import_for_seeds import work  # type: ignore[import-not-found]

    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        with span("first run"):
            assert client.submit(work, 0.3).result() == 0.3
        m = metrics_of(client, "first run")
    sys.modules.pop("heavy_import_for_seeds", None)
    assert m["deserialize"] >= 0.5  # the import's CPU, at least
    assert 0.3 <= m["thread-cpu"] < 0.45, m  # the task's own CPU, read on its clock
