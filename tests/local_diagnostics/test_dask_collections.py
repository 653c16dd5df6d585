"""The local diagnostics on dask collections computed by the engine: dask.compute with
scheduler=client, client.compute, and the seed's QR story under the three profilers."""

from __future__ import annotations

import itertools
import threading

import psutil
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from kernel_cluster import (  # noqa: E402
    CacheProfiler,
    Callback,
    Profiler,
    ProgressBar,
    ResourceProfiler,
)
from kernel_cluster.engine.trim import trim_memory  # noqa: E402
from tests.engine.helpers import is_idle, wait_for  # noqa: E402


class Keys(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.pre: list = []
        self.post: list = []
        self.finished = threading.Event()
        self.errored = None

    def _pretask(self, key, dsk, state):
        self.pre.append(key)

    def _posttask(self, key, result, dsk, state, id):
        self.post.append(key)

    def _finish(self, dsk, state, errored):
        self.errored = errored
        self.finished.set()


def test_dask_compute_with_the_client_as_scheduler(client):
    x = da.ones((100, 10), chunks=(10, 10))
    total = (x + 1).sum()
    cb = Keys()
    with cb, Profiler() as prof:
        (value,) = dask.compute(total, scheduler=client)
    assert value == 2000
    assert cb.finished.is_set() and cb.errored is False
    assert sorted(map(str, cb.pre)) == sorted(map(str, cb.post))
    assert len(cb.post) >= 10  # the chunks, the sums, the aggregate
    assert {r.key for r in prof.results} == set(cb.post)
    assert all(r.task is not None for r in prof.results)  # the graph, indexed by key


def test_client_compute_fires_the_callbacks_until_its_future_is_done(client):
    x = da.ones((100, 10), chunks=(10, 10))
    cb = Keys()
    with cb:
        future = client.compute(x.sum())
    assert future.result() == 1000
    assert cb.finished.wait(30) and cb.errored is False
    assert len(cb.post) >= 10


def tsqr_story(client, cluster_processes):
    a = da.random.random((200_000, 100), chunks=(10_000, 100))
    q, r = da.linalg.qr(a)
    error = abs(q.dot(r) - a).max()
    family = [psutil.Process(), *psutil.Process().children(recursive=True)]
    cpu_before = sum(sum(p.cpu_times()[:2]) for p in family)
    workers_before = worker_cpu(client, cluster_processes)
    with (
        Profiler() as prof,
        ResourceProfiler(dt=0.1) as rprof,
        CacheProfiler() as cprof,
        ProgressBar(minimum=60),
    ):
        _, err = dask.compute(r, error, scheduler=client)
        # the values are freed on the workers, and the C allocator hands the pages
        # back (the workers' memory monitor does it now and then; here at once): the
        # last sample (at the block's end) sees memory after the computation
        wait_for(lambda: is_idle(client.cluster), 30, "the engine to free every value")
        client.run(trim_memory)
        trim_memory()
    cpu_used = sum(sum(p.cpu_times()[:2]) for p in family) - cpu_before
    workers_used = worker_cpu(client, cluster_processes) - workers_before
    return err, prof, rprof, cprof, cpu_used, workers_used


def worker_cpu(client, processes):
    """CPU seconds the workers used so far: their processes, or (embedded) their task
    threads, read from the system (psutil), not from the engine."""
    if processes:
        pids = [w["pid"] for w in client.scheduler_info()["workers"].values()]
        return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)
    tids = {t.native_id for w in client.cluster.workers.values() for t in w.pool.threads}
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in tids)


@pytest.mark.slow
@pytest.mark.timeout(240)  # ten seconds on an idle two-core machine
def test_qr_story_under_the_three_profilers(client, processes):
    err, prof, rprof, cprof, cpu_used, workers_used = tsqr_story(client, processes)
    assert err < 1e-8
    keys = {r.key for r in prof.results}
    assert any("qr" in str(k) for k in keys)
    assert {r.key for r in cprof.results} == keys

    # CPU: what the samples add up to is the CPU the processes used, and the samples
    # taken while the tasks ran hold the CPU the workers used (measured apart, by the
    # system): the QR's parallel work shows where it happened. (How many cores that is
    # at a time depends on what else the machine runs: not asserted.)
    samples = rprof.results
    pairs = list(itertools.pairwise(samples))
    sampled = sum(b.cpu / 100 * (b.time - a.time) for a, b in pairs)
    assert sampled > 0.6 * cpu_used
    start = min(r.start_time for r in prof.results)
    end = max(r.end_time for r in prof.results)
    during = sum(
        b.cpu / 100 * (b.time - a.time) for a, b in pairs if b.time > start and a.time < end
    )
    assert workers_used > 0.5  # the QR's work, a second of CPU or more
    assert during > 0.6 * workers_used

    # memory: up while the blocks are held (the array is 160 MB), down once freed
    first, peak, last = samples[0].mem, max(s.mem for s in samples), samples[-1].mem
    assert peak - first > 50
    assert last - first < (peak - first) / 2

    # the cache: results pile up (the reduction needs all of stage one's), then drop
    # as each is released once its dependents are done, before the computation ends
    changes = sorted(
        [(r.cache_time, 1) for r in cprof.results] + [(r.free_time, -1) for r in cprof.results]
    )
    counts = list(itertools.accumulate(d for _, d in changes))
    peak_count = max(counts)
    assert peak_count >= 20  # the twenty blocks' results at least
    freed_early = [r for r in cprof.results if r.free_time < end]
    assert len(freed_early) >= 20
    in_cache_at_end = sum(1 for r in cprof.results if r.cache_time <= end < r.free_time)
    assert in_cache_at_end < peak_count / 2


def test_get_sync_runs_dask_collections_with_the_callbacks():
    from kernel_cluster import get_sync

    x = da.ones((100, 10), chunks=(10, 10))
    cb = Keys()
    with cb, Profiler() as prof:
        (value,) = dask.compute((x + 1).sum(), scheduler=get_sync)
    assert value == 2000
    assert cb.errored is False and len(cb.post) >= 10
    assert len({r.worker_id for r in prof.results}) == 1  # one thread: this one
    assert {r.key for r in prof.results} == set(cb.post)


def test_a_computation_whose_future_is_dropped_finishes_its_callbacks(client, new_event):
    from tests.engine.helpers import blocked_until

    event = new_event()
    cb = Keys()
    with cb:
        future = client.compute(dask.delayed(blocked_until)(event, 1))
    del future  # never waited for: the key is released
    try:
        assert cb.finished.wait(30), "finish never ran"
        assert cb.errored is True
    finally:
        event.set()
    wait_for(lambda: not [t for t in threading.enumerate() if t.name.startswith("callbacks-")])
