"""Fine performance metrics end to end: the seeds' stories, on real workers."""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
import time

import numpy as np
import pytest

from kernel_cluster import Client, KernelCluster, context_meter, get_task_stream
from kernel_cluster.client.futures import wait

from .helpers import wait_for


def inc(x):
    return x + 1


def sleeper(x):
    time.sleep(0.1)
    return x


def python_loop(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def random_array(seed):
    return np.random.default_rng(seed).random(2_000_000)


def numpy_work(array):
    # sorting floats releases the GIL: the threads truly run side by side
    used = time.thread_time()
    np.sort(array)
    return time.thread_time() - used  # the CPU seconds this thread spent


GIL_HELD = threading.Event()


def hold_the_gil(seconds):
    """Sleeps in C *without* releasing the GIL (ctypes.PyDLL keeps it): no CPU used,
    and no other Python thread of the process runs meanwhile."""
    GIL_HELD.set()
    ctypes.PyDLL(None).usleep(int(seconds * 1e6))


def loop_past_the_hold(n):
    """Loops until the GIL holder started, and n steps more: it is running, wanting the
    GIL, while the holder keeps it."""
    used = time.thread_time()
    deadline = time.monotonic() + 20  # a holder that never starts fails the test, not CI
    while not GIL_HELD.is_set() and time.monotonic() < deadline:
        python_loop(10_000)
    python_loop(n)
    return time.thread_time() - used


def metered_io(x):
    with context_meter.meter("I/O"):
        time.sleep(0.2)
    return x


@context_meter.meter("download")
def decorated(x):
    time.sleep(0.05)
    return x


def s3_read(nbytes):
    context_meter.digest_metric("S3 Infrequent Access", nbytes, "bytes")
    return nbytes


def labelled(label, seconds):
    context_meter.digest_metric(label, 1, "count")
    time.sleep(seconds)
    return label


def bad_metric(kind):
    if kind == "nan":
        context_meter.digest_metric("x", math.nan, "seconds")
    else:
        context_meter.digest_metric(["unhashable"], 1, "count")


def make_array(i):
    return np.zeros(1_000_000) + i  # 8 MB, compressible


def execute(client, function, unit="seconds") -> dict:
    df = client.fine_metrics(unit=unit)
    rows = df[(df.context == "execute") & (df.function == function)]
    return dict(zip(rows.activity, rows.value))


@pytest.fixture(params=["embedded", "processes"])
def mclient(request):
    processes = request.param == "processes"
    with KernelCluster(n_workers=1, threads_per_worker=2, processes=processes,
                       memory_limit=0) as cluster, Client(cluster) as client:  # fmt: skip
        yield client


@pytest.fixture
def eclient():
    with (
        KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        yield client


def test_sleeping_tasks_are_mostly_thread_noncpu(mclient):
    mclient.gather(mclient.map(sleeper, range(4)))
    m = execute(mclient, "sleeper")
    assert m["thread-noncpu"] > 0.35
    assert m["thread-cpu"] < 0.05
    assert execute(mclient, "sleeper", "count")["tasks"] == 4
    # a worker process unpickles each task it runs; an embedded worker has nothing to load
    if mclient.cluster.processes:
        assert m["deserialize"] > 0
    else:
        assert "deserialize" not in m


def fails_after_sleeping(x):
    time.sleep(0.1)
    raise ValueError(x)


def fails_after_working(n):
    used = time.thread_time()
    python_loop(n)
    raise ValueError(time.thread_time() - used)  # the CPU seconds this thread spent


def test_failed_tasks_split_their_time_into_cpu_and_noncpu(mclient):
    """A task that fails still spent its time on something: the CPU clock is read at
    the failure, so a crash after heavy computing is not reported as waiting."""
    sleeping = mclient.map(fails_after_sleeping, range(2))
    wait(sleeping)
    working = mclient.submit(fails_after_working, 1_000_000)
    wait([working])
    assert all(f.status == "error" for f in [*sleeping, working])
    slept = execute(mclient, "fails_after_sleeping")
    worked = execute(mclient, "fails_after_working")
    assert slept["thread-noncpu"] > 0.15
    assert slept.get("thread-cpu", 0) < 0.02
    # all the CPU the task's thread spent is thread-cpu, however busy the machine is
    (spent,) = working.exception().args
    assert spent > 0.01
    assert worked["thread-cpu"] >= 0.9 * spent
    assert execute(mclient, "fails_after_sleeping", "count")["tasks"] == 2


def nap(x):
    time.sleep(0.002)
    return x


def test_short_sleeps_among_trivial_tasks_stay_noncpu():
    """Trivial tasks skip the CPU clock (it costs more than they do); the sleeps that
    follow them on the same thread must still come out as waiting, not CPU."""
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, memory_limit=0) as cluster,
        Client(cluster) as client,
    ):
        futures = []
        for i in range(60):
            futures += [client.submit(inc, i, pure=False), client.submit(nap, i, pure=False)]
        client.gather(futures)
        naps = execute(client, "nap")
        incs = execute(client, "inc")
    slept = 60 * 0.002
    assert naps["thread-noncpu"] > 0.8 * slept
    assert naps["thread-cpu"] < 0.2 * slept
    assert incs.get("thread-cpu", 0) + incs.get("thread-noncpu", 0) < 0.1 * slept


def test_the_task_runner_partitions_its_threads_time_exactly():
    """Every second between a thread's first and last task is a task's (its CPU,
    waiting, executor hand-off, other) or idle, whichever path the runner takes:
    tiny tasks of one group in a row (the short path), a change of group, a task
    handed over after the thread was free (idle before it), one that sleeps, one
    that meters, one that fails; some of them pickled, as from another process."""
    import threading

    import cloudpickle

    from kernel_cluster.core.spec import Call, TaskSpec
    from kernel_cluster.core.thread_accounts import ThreadTimeline
    from kernel_cluster.core.worker_messages import ExecuteFailed, ExecuteSucceeded
    from kernel_cluster.engine.execute import TaskRunner

    def metered(x):
        with context_meter.meter("I/O"):
            return x

    def fails(x):
        raise ValueError(x)

    def nap(x):
        time.sleep(0.002)
        return x

    def pick(i: int) -> tuple[str, object]:
        for every, name, fn in [
            (1000, "fails", fails),
            (300, "metered", metered),
            (250, "nap", nap),
            (7, "other", inc),
        ]:
            if i % every == every - 1:
                return name, fn
        return "inc", inc

    clock = time.perf_counter
    timeline = ThreadTimeline(busy=True)
    start = clock()
    timeline.add_threads([threading.get_ident()], start)
    account = timeline.accounts[threading.get_ident()]
    runner = TaskRunner(account)
    tasks: dict[str, int] = {}
    for i in range(3000):
        name, fn = pick(i)
        submitted = clock() if i % 100 == 0 else 0.0  # now and then, handed over late
        spec = TaskSpec(Call(fn, (i,)), frozenset())
        if i % 5 == 0:  # as it comes from another process: unpickled on the task thread
            spec = cloudpickle.dumps(spec)
        ev = runner.run(f"{name}-{i}", spec, {}, submitted, (None, name))
        assert isinstance(ev, ExecuteFailed if name == "fails" else ExecuteSucceeded)
        tasks[name] = tasks.get(name, 0) + 1
    end = account.mark
    total: dict = {}
    timeline.take(lambda key, value: total.__setitem__(key, total.get(key, 0) + value))
    for name, n in tasks.items():
        assert total[("execute", None, name, "tasks", "count")] == n
    seconds = sum(v for k, v in total.items() if k[-1] == "seconds")
    assert seconds == pytest.approx(end - start, rel=1e-9, abs=1e-9)
    assert total[("execute", None, "metered", "I/O", "seconds")] > 0
    assert total[("execute", None, "inc", "deserialize", "seconds")] > 0
    assert min(total.values()) >= 0


def test_gil_contention_is_noncpu_while_gil_free_numpy_is_cpu(eclient):
    GIL_HELD.clear()
    looping = eclient.submit(loop_past_the_hold, 1_000_000, pure=False)
    holding = eclient.submit(hold_the_gil, 0.5, pure=False)
    spent = looping.result(timeout=30)
    holding.result(timeout=30)
    loop = execute(eclient, "loop_past_the_hold")
    # the half second the loop waited for the GIL is noncpu, however busy the machine;
    # what it computed is cpu
    assert loop["thread-noncpu"] > 0.4
    assert loop["thread-cpu"] >= 0.9 * spent
    assert execute(eclient, "hold_the_gil").get("thread-cpu", 0) < 0.05
    arrays = eclient.map(random_array, range(2))
    sorted_in = eclient.gather(eclient.map(numpy_work, arrays * 3, pure=False))
    np_ = execute(eclient, "numpy_work")
    # no GIL in the way: all the CPU the sorting threads spent is cpu
    assert np_["thread-cpu"] >= 0.9 * sum(sorted_in) > 0


def test_user_meter_is_its_own_activity_and_not_noncpu(mclient):
    t0 = time.perf_counter()
    mclient.gather(mclient.map(metered_io, range(2)))
    t1 = time.perf_counter()
    mclient.gather(mclient.map(decorated, range(2)))
    t2 = time.perf_counter()
    # each task's sleep, inside its meter: no less than it slept, no more than the tasks
    # took (a sleep overruns on a busy machine)
    m = execute(mclient, "metered_io")
    assert 0.39 <= m["I/O"] <= 2 * (t1 - t0)
    assert m.get("thread-noncpu", 0) < 0.5 * m["I/O"]  # not counted as waiting too
    d = execute(mclient, "decorated")
    assert 0.099 <= d["download"] <= 2 * (t2 - t1)
    assert d.get("thread-noncpu", 0) < 0.5 * d["download"]


def test_digest_metric_adds_any_value_in_any_unit(mclient):
    assert mclient.gather(mclient.map(s3_read, [1000, 2000])) == [1000, 2000]
    assert execute(mclient, "s3_read", "bytes")["S3 Infrequent Access"] == 3000


def test_concurrent_tasks_do_not_leak_into_each_other(eclient):
    a = eclient.submit(labelled, "from-a", 0.3, key="task_a-1")
    b = eclient.submit(labelled, "from-b", 0.3, key="task_b-1")
    assert eclient.gather([a, b]) == ["from-a", "from-b"]
    assert set(execute(eclient, "task_a", "count")) == {"from-a", "tasks"}
    assert set(execute(eclient, "task_b", "count")) == {"from-b", "tasks"}


def test_bad_metric_fails_that_task_only(mclient):
    with pytest.raises(ValueError, match="finite"):
        mclient.submit(bad_metric, "nan").result()
    with pytest.raises(TypeError, match="hashable"):
        mclient.submit(bad_metric, "label").result()
    assert mclient.submit(sleeper, 1).result() == 1
    # outside a task, the same calls do nothing
    context_meter.digest_metric("client side", 1, "count")
    with context_meter.meter("client side"):
        pass


def test_integers_stay_integers_and_nothing_is_negative(mclient):
    mclient.gather(mclient.map(s3_read, range(5)))
    mclient.gather(mclient.map(sleeper, range(3)))
    raw = mclient._diagnostics.fine_metrics()
    assert raw
    for key, value in raw.items():
        assert value >= 0, key
        if key[-1] in ("bytes", "count"):
            assert isinstance(value, int), (key, value)


def test_memory_pressure_shows_disk_and_compression_with_bytes():
    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit="20 MB") as cluster, \
            Client(cluster) as client:  # fmt: skip
        arrays = client.map(make_array, range(8))  # 64 MB through a 20 MB worker
        wait(arrays)  # all made (most spilled) before they are read back
        sums = client.gather(client.map(np.sum, arrays))
        assert sums == [1_000_000.0 * i for i in range(8)]
        df = client.fine_metrics(unit=None)
        execute_rows = df[df.context == "execute"]
        totals = execute_rows.groupby(["activity", "unit"])["value"].sum()
        for activity in ("disk-write", "disk-read"):
            assert totals[(activity, "seconds")] > 0
            assert totals[(activity, "bytes")] > 0
            assert totals[(activity, "count")] >= 1
        assert totals[("compress", "seconds")] > 0
        assert totals[("decompress", "seconds")] > 0
        # what the seed calls cache hits: bytes read from memory next to those from disk
        reads = df[df.unit == "bytes"].groupby("activity")["value"].sum()
        assert reads["memory-read"] > 0 and reads["disk-read"] > 0


@pytest.mark.parametrize("processes", [False, True], ids=["embedded", "processes"])
def test_execute_seconds_add_up_to_wall_time_times_threads(processes):
    """While the cluster is busy, every second of every worker thread goes to some
    activity (idle included). Bounded by what happened, however long it took: at least
    each worker's thread-seconds from its first task of a batch to the batch's last
    task's end (the cluster was busy all along), at most both threads' seconds from
    the first submission to the last read."""
    with KernelCluster(n_workers=2, threads_per_worker=1, processes=processes,
                       memory_limit=0) as cluster, Client(cluster) as client:  # fmt: skip
        client.submit(sleeper, -1).result()  # warm: imports, connections
        baseline = seconds_total(client)
        t0 = time.perf_counter()
        busy = 0.0
        for fn, args in [
            (sleeper, range(12)),
            (python_loop, [300_000] * 6),
            (sleeper, range(100, 103)),  # one thread idles here
        ]:
            with get_task_stream(client) as ts:
                client.gather(client.map(fn, args, pure=False))
            busy += busy_thread_seconds(ts.data)
        measured = seconds_total(client) - baseline
        wall = time.perf_counter() - t0
        # the task stream's times are the scheduler's clock: a worker process's are
        # shifted by an estimate of the offset between their clocks
        slack = 0.01 if processes else 1e-6
        assert busy - 6 * slack <= measured <= wall * 2, (busy, measured, wall)


def busy_thread_seconds(records: list[dict]) -> float:
    """Per worker (of one thread), from its first task's start to the last task's end."""
    computes = [
        (r["worker"], s["start"], s["stop"])
        for r in records
        for s in r["startstops"]
        if s["action"] == "compute"
    ]
    end = max(stop for _, _, stop in computes)
    first: dict[str, float] = {}
    for worker, start, _ in computes:
        first[worker] = min(start, first.get(worker, start))
    assert len(first) == 2, "a batch ran on one worker only"
    return sum(end - start for start in first.values())


def seconds_total(client) -> float:
    df = client.fine_metrics(unit="seconds")
    return float(df[df.context == "execute"].value.sum())


def test_collection_can_be_switched_off():
    with KernelCluster(n_workers=1, threads_per_worker=2, fine_metrics=False) as cluster, \
            Client(cluster) as client:  # fmt: skip
        assert client.gather(client.map(metered_io, range(2))) == [0, 1]
        assert client.fine_metrics(unit=None).empty


def metrics_on(dask_worker, on) -> None:
    dask_worker.set_fine_metrics(on)


def test_collection_switches_off_and_on_on_running_workers(mclient):
    """What the overhead benchmark does: the same workers, metered or not."""
    mclient.gather(mclient.map(inc, range(4)))  # the task threads have read their CPU
    mclient.run(metrics_on, on=False)
    mclient.gather(mclient.map(python_loop, [300_000] * 4, pure=False))
    assert execute(mclient, "python_loop") == {}
    mclient.run(metrics_on, on=True)
    mclient.gather(mclient.map(sleeper, range(4)))
    m = execute(mclient, "sleeper")
    assert execute(mclient, "sleeper", "count")["tasks"] == 4
    assert m["thread-noncpu"] > 0.35
    # the CPU the threads used while unmetered is not charged to the next tasks
    assert m["thread-cpu"] < 0.05


def test_heartbeat_deltas_are_summed_exactly_once(mclient):
    mclient.gather(mclient.map(sleeper, range(6)))
    mclient.gather(mclient.map(s3_read, range(6)))
    scheduler_side = mclient._diagnostics.fine_metrics()  # forces a heartbeat first
    worker_side: dict = {}
    for totals in mclient.run(lambda dask_worker: dict(dask_worker.digests_total)).values():
        for key, value in totals.items():
            worker_side[key] = worker_side.get(key, 0) + value
    assert set(worker_side) == set(scheduler_side)
    for key, value in worker_side.items():
        assert scheduler_side[key] == pytest.approx(value), key


def test_a_dead_worker_keeps_what_it_reported():
    with KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:  # fmt: skip
        client.gather(client.map(sleeper, range(4)))
        before = client._diagnostics.fine_metrics()
        os.kill(next(iter(cluster.worker_pids().values())), signal.SIGKILL)
        assert client.submit(sleeper, 99).result(timeout=60) == 99
        after = client._diagnostics.fine_metrics()
        for key, value in before.items():
            assert after[key] >= value, key


def test_transfers_record_both_sides():
    # over the socket (shared memory off: test_shared_memory.py has its own path)
    with (
        KernelCluster(
            n_workers=2, threads_per_worker=1, processes=True, shared_memory_limit=0
        ) as cluster,
        Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        x = client.submit(np.random.random, 1_000_000, workers=[a], pure=False)
        assert client.submit(len, x, workers=[b]).result() == 1_000_000
        df = client.fine_metrics(unit=None)
        got = df[df.context == "gather-dep"].set_index(["activity", "unit"]).value
        sent = df[df.context == "get-data"].set_index(["activity", "unit"]).value
        assert got[("network", "bytes")] >= 8_000_000
        assert got[("network", "seconds")] > 0
        assert got[("deserialize", "seconds")] > 0
        assert sent[("network", "bytes")] >= 8_000_000
        assert sent[("serialize", "seconds")] > 0


class Unspillable(np.ndarray):
    """An array that refuses to be pickled, so it cannot be moved to disk."""

    def __reduce__(self):
        raise TypeError("this array stays in memory")


def unspillable(i):
    return (np.zeros(1_000_000) + i).view(Unspillable)  # 8 MB


def test_worker_pauses_past_the_pause_fraction_until_memory_falls():
    with KernelCluster(n_workers=1, threads_per_worker=1, memory_limit="20 MB") as cluster, \
            Client(cluster) as client:  # fmt: skip
        worker = next(iter(cluster.workers.values()))
        held = client.map(unspillable, range(3), pure=False)  # 24 MB > 80% of 20 MB
        client.gather(held)
        wait_for(lambda: worker.state.paused, what="the worker to pause")
        later = client.submit(sleeper, 5)
        time.sleep(0.3)  # long enough for the task to run, were the worker not paused
        assert not later.done()
        del held
        assert later.result(timeout=30) == 5
        assert not worker.state.paused


def test_memory_fractions_are_configurable_and_checked():
    with pytest.raises(ValueError, match="target <= spill <= pause"):
        KernelCluster(n_workers=0, memory_target_fraction=0.9, memory_pause_fraction=0.5)
    fractions = {
        "memory_target_fraction": 0.1,
        "memory_spill_fraction": 0.2,
        "memory_pause_fraction": 0.9,
    }
    with (
        KernelCluster(
            n_workers=1, threads_per_worker=1, memory_limit="100 MB", **fractions
        ) as cluster,
        Client(cluster) as client,
    ):
        worker = next(iter(cluster.workers.values()))
        assert worker.data.target == 10_000_000
        arrays = client.map(make_array, range(3))  # 24 MB: past a 10 MB target
        client.gather(arrays)
        assert worker.data.spilled > 0
