"""The statistical profiler on real workers (embedded and in subprocesses).

Every test selects its own task prefix (and a window starting with it): process
clusters are shared by the tests of this module, and a window takes whole cycles.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import threading
import time

import pytest

from kernel_cluster import Client, KernelCluster
from kernel_cluster.core.profile_tree import depth, inclusive_counts, iter_nodes, new_tree, validate
from kernel_cluster.core.spec import Call, evaluate
from kernel_cluster.diagnostics.feeds.profile_codec import unflatten
from kernel_cluster.engine.stack_sampler import StackSampler

from .helpers import wait_for


def names(tree: dict) -> dict[str, int]:
    """Samples in which each function name was on the stack."""
    return {name: n for (_, name), n in inclusive_counts(tree).items()}


def g(seconds):
    time.sleep(seconds)


def h(seconds):
    time.sleep(seconds)


def g_then_h(i):
    g(0.4)
    h(0.2)
    return i


def in_alpha():
    time.sleep(0.3)


def in_beta():
    time.sleep(0.3)


def alpha(i):
    in_alpha()
    return i


def beta(i):
    in_beta()
    return i


def napper(i):
    time.sleep(0.3)
    return i


def recurse(n):
    if n == 0:
        time.sleep(0.3)
        return 0
    return recurse(n - 1) + 1


def deep(n):
    # Python's default limit (sys.getrecursionlimit(), 1000) would stop the task itself
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, n + 500))
    try:
        return recurse(n)
    finally:
        sys.setrecursionlimit(limit)


def profiler_threads(dask_worker) -> tuple:
    names = [t.name for t in threading.enumerate() if t.name == f"{dask_worker.name}-profile"]
    return dask_worker.profiler is None, names


def profiler_settings(dask_worker) -> tuple:
    return dask_worker.profiler.interval, dask_worker.profiler.cycle_interval


def test_sleeping_twice_as_long_in_g_as_in_h(client):
    t0 = time.time()
    # enough samples for the share to tell 2:1 from 1:1: one round on an idle machine;
    # on a busy one the sampler thread runs late, and in bursts, and more rounds go by
    for _ in range(10):
        assert client.gather(client.map(g_then_h, range(4), pure=False)) == [0, 1, 2, 3]
        tree = client.profile(start=t0, prefix="g_then_h")
        if tree["count"] >= 200:
            break
    validate(tree)
    counts = names(tree)
    # the tree starts at the task's function: no engine frame above it
    assert {c["description"]["name"] for c in tree["children"].values()} == {"g_then_h"}
    assert counts["g_then_h"] == tree["count"] >= 60, counts
    share = counts["g"] / (counts["g"] + counts["h"])
    assert 0.55 < share < 0.78, counts
    # the leaves are the lines that ran
    leaves = {n["description"]["line"] for _, n in iter_nodes(tree) if not n["children"]}
    assert leaves == {"time.sleep(seconds)"}


def test_prefix_and_key_select_one_function(client):
    t0 = time.time()
    futures = client.map(alpha, range(2)) + client.map(beta, range(2))
    client.gather(futures)
    only_alpha = client.profile(start=t0, prefix="alpha")
    assert set(names(only_alpha)) == {"alpha", "in_alpha"}
    assert only_alpha["count"] > 0
    by_key = client.profile(start=t0, key=futures[0].key)
    assert set(names(by_key)) == {"alpha", "in_alpha"}
    by_future = client.profile(start=t0, key=futures[2])
    assert set(names(by_future)) == {"beta", "in_beta"}
    both = names(client.profile(start=t0))
    assert {"alpha", "beta"} <= set(both)
    with pytest.raises(ValueError, match="prefix"):
        client.profile(key=futures[0].key, prefix="beta")


def test_merging_workers_sums_shared_paths(client):
    t0 = time.time()
    client.gather(client.map(napper, range(4)))
    stop = time.time()
    info = client.scheduler_info()["workers"]
    trees = {
        w: client.profile(start=t0, stop=stop, prefix="napper", workers=[w]) for w in sorted(info)
    }
    assert all(t["count"] > 0 for t in trees.values()), {w: t["count"] for w, t in trees.items()}
    merged = client.profile(start=t0, stop=stop, prefix="napper")
    validate(merged)
    assert merged["count"] == sum(t["count"] for t in trees.values())
    (ident,) = merged["children"]
    assert merged["children"][ident]["count"] == sum(
        t["children"][ident]["count"] for t in trees.values()
    )
    first = sorted(info)[0]
    by_name = client.profile(start=t0, stop=stop, prefix="napper", workers=info[first]["name"])
    assert by_name == trees[first]
    with pytest.raises(ValueError, match="No worker"):
        client.profile(workers=["nobody"])


def test_deep_recursion_does_not_hit_the_recursion_limit(client, tmp_path):
    n = 2_000
    t0 = time.time()
    assert client.submit(deep, n).result() == n
    page = tmp_path / "deep.html"
    tree = client.profile(start=t0, prefix="deep", filename=page)
    validate(tree)
    assert depth(tree) > n
    assert names(tree)["recurse"] == tree["count"] > 0
    assert "recurse" in page.read_text()


def test_a_window_in_the_future_is_empty(client):
    client.submit(napper, 1).result()
    future = time.time() + 3600
    assert client.profile(start=future) == new_tree()
    assert client.profile_metadata(start=future) == {"counts": [], "keys": {}}
    assert client.profile(start="1h", prefix="napper")["count"] > 0
    with pytest.raises(ValueError, match="before"):
        client.profile(start=future, stop=future - 1)


def test_filename_writes_a_self_contained_flame_graph(client, tmp_path):
    t0 = time.time()
    client.gather(client.map(g_then_h, range(2)))
    path = tmp_path / "profile.html"
    tree = client.profile(start=t0, prefix="g_then_h", filename=path)
    page = path.read_text()
    data = json.loads(
        re.search(r'id="kc-report-data">(.*?)</script>', page, re.S).group(1)  # type: ignore[union-attr]
    )
    entry = data["profiles"]["trees"][""]
    shown = unflatten(entry["header"], [base64.b64decode(b) for b in entry["buffers"]])
    assert shown == tree  # the page carries the whole profile
    names = {n["description"]["name"] for _, n in iter_nodes(shown)}
    assert {"g_then_h", "g", "h"} <= names
    assert data["title"] == "Profile of tasks 'g_then_h'"
    assert f"{tree['count']} samples" in page
    for attr in ("src=", "href="):
        for scheme in ("http:", "https:", "//"):
            assert f'{attr}"{scheme}' not in page and f"{attr}'{scheme}" not in page
    # nothing fetched: no element loads from elsewhere (XML namespace names are not fetches)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)


def test_profile_off_starts_no_sampler(processes):
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes, profile=False) as c,
        Client(c, set_as_default=False) as client,
    ):
        client.submit(napper, 1).result()
        assert list(client.run(profiler_threads).values()) == [(True, [])]
        assert client.profile() == new_tree()
        assert client.profile_metadata() == {"counts": [], "keys": {}}


def test_intervals_reach_the_workers_and_cycle_the_history(processes):
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=processes,
            profile_interval=0.005,
            profile_cycle_interval=0.2,
        ) as c,
        Client(c, set_as_default=False) as client,
    ):
        assert list(client.run(profiler_settings).values()) == [(0.005, 0.2)]
        assert list(client.run(profiler_threads).values()) == [(False, ["worker-0-profile"])]
        t0 = time.time()
        client.submit(napper, 1).result()
        client.submit(napper, 2).result()
        tree = client.profile(start=t0, prefix="napper")
        meta = client.profile_metadata(start=t0)
        t2 = time.time()
        assert tree["count"] > 0
        points = meta["keys"]["napper"]
        assert sum(n for _, n in points) == tree["count"]
        assert sum(n for _, n in meta["counts"]) == tree["count"]
        assert len([n for _, n in points if n]) >= 2  # the samples span several cycles
        # times are the scheduler's, rounded down to the cycle (cycles go on closing
        # while the profile is read)
        assert all(t0 - 0.5 <= t <= t2 + 0.5 for t, _ in meta["counts"]), (t0, t2, meta)


def profiling_at(dask_worker, interval) -> None:
    dask_worker.set_profiling(interval)


def profiler_cost(dask_worker) -> float:
    return 0.0 if dask_worker.profiler is None else dask_worker.profiler.cpu_seconds


def test_profiling_switches_off_and_on_on_running_workers(processes):
    """What the overhead benchmark does: the same workers, sampled or not."""
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=processes) as c,
        Client(c, set_as_default=False) as client,
    ):
        client.run(profiling_at, interval=None)
        assert list(client.run(profiler_threads).values()) == [(True, [])]
        client.submit(napper, 1).result()
        assert client.profile() == new_tree()

        client.run(profiling_at, interval=0.005)
        assert list(client.run(profiler_settings).values()) == [(0.005, 1.0)]
        assert list(client.run(profiler_threads).values()) == [(False, ["worker-0-profile"])]
        client.submit(napper, 2).result()
        # sampling again (at the interval set above: profiler_settings); how many samples
        # depends on how often a busy machine lets the sampling thread run
        assert client.profile(prefix="napper")["count"] > 0
        # what the sampling thread cost, read from its CPU clock while it runs
        (cost,) = client.run(profiler_cost).values()
        assert cost > 0.0
        with pytest.raises(ValueError, match="positive"):
            client.run(profiling_at, interval=0)
        assert list(client.run(profiler_settings).values()) == [(0.005, 1.0)]


@pytest.mark.embedded_only("reads the workers' threads in this process")
def test_sampler_threads_stop_with_their_workers(processes):
    cluster = KernelCluster(n_workers=2, threads_per_worker=1)
    try:
        threads = {w.name: w.profiler._thread for w in cluster.workers.values()}
        assert sorted(t.name for t in threads.values()) == ["worker-0-profile", "worker-1-profile"]
        assert all(t.is_alive() for t in threads.values())
        cluster.scale(1)
        assert not threads["worker-1"].is_alive()
        assert threads["worker-0"].is_alive()
    finally:
        cluster.close()
    assert not threads["worker-0"].is_alive()


# -- the sampler's cut, with scripted threads and clock -----------------------------------


def outer(value):
    return value


def helper(event):
    event.wait(30)


def blocking(event):
    helper(event)
    return 1


def inner(event):
    event.wait(30)
    return 2


class TaskThread:
    """A thread evaluating ``expr`` as a worker does; it blocks until ``release()``."""

    def __init__(self, make_expr):
        self.event = threading.Event()
        self.started = threading.Event()
        self.expr = make_expr(self.event)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.started.set()
        evaluate(self.expr, {})

    def __enter__(self):
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc):
        self.event.set()
        self.thread.join(10)


def wait_until_blocked(profiler: StackSampler, ident: int) -> None:
    def blocked() -> bool:
        stack = profiler.frames.task_stack(sys._current_frames().get(ident))
        return (
            bool(stack)
            and stack[-1][1]["name"] == "wait"
            and ("threading" in stack[-1][1]["filename"])
        )

    wait_for(blocked, what="the task thread to block")


def test_samples_are_cut_at_the_task_function():
    clock = [10.0]
    executing: dict[int, tuple] = {}
    profiler = StackSampler(executing, lambda: clock[0], interval=0.01, cycle_interval=1.0)
    assert profiler.sample() == 0  # no task running: nothing to read

    with TaskThread(lambda ev: Call(blocking, (ev,))) as task:
        executing[task.thread.ident] = ("blocking-1", "blocking")
        wait_until_blocked(profiler, task.thread.ident)
        assert [profiler.sample() for _ in range(3)] == [1, 1, 1]
    # a nested call: only the function running now is the task's, from its frame inward
    with TaskThread(lambda ev: Call(outer, (Call(inner, (ev,)),))) as task:
        executing.clear()
        executing[task.thread.ident] = ("outer-1", "outer")
        wait_until_blocked(profiler, task.thread.ident)
        profiler.sample()
    clock[0] = 11.0
    profiler.cycle()

    tree = profiler.get(prefix="blocking")
    validate(tree)
    assert tree["count"] == 3
    path = []
    node = tree
    while node["children"]:
        (node,) = node["children"].values()
        path.append(node["description"]["name"])
    assert path[:3] == ["blocking", "helper", "wait"]  # then threading's own frames
    assert node["own"] == 3

    nested = profiler.get(prefix="outer")
    assert [c["description"]["name"] for c in nested["children"].values()] == ["inner"]
    assert profiler.get(start=10.5, stop=10.9)["count"] == 4  # the cycle (10, 11]
    assert profiler.get(start=11.5)["count"] == 0
    assert profiler.metadata()["counts"] == [(11.0, 4), (11.0, 0)]


def test_a_thread_outside_any_task_function_is_not_counted():
    event = threading.Event()
    thread = threading.Thread(target=event.wait, args=(30,), daemon=True)
    thread.start()
    try:
        profiler = StackSampler({thread.ident: ("k", "k")}, time.time)
        assert profiler.sample() == 0  # the engine's own frames only: nothing of a task
    finally:
        event.set()
        thread.join(10)


def test_sampling_keeps_no_user_objects_alive():
    """A stack snapshot must not outlive the sample: it holds every thread's locals."""
    import gc
    import weakref

    class Marker:
        pass

    executing: dict = {}
    profiler = StackSampler(executing, now=time.time, interval=0.01)
    marker = Marker()
    ref = weakref.ref(marker)
    executing[threading.get_ident()] = ("k", "p")

    def holds_marker(m):
        return profiler.sample()

    gc.disable()
    try:
        holds_marker(marker)
        del marker
        assert ref() is None  # freed at once, without waiting for the cycle collector
    finally:
        gc.enable()


class _CountingSignal:
    """The sampler's wake-up lock, counting how often task threads released it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.releases = 0

    def acquire(self, *args) -> bool:
        return self.lock.acquire(*args)

    def release(self) -> None:
        self.releases += 1
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


def test_a_stream_of_short_tasks_does_not_wake_the_sampler_per_task():
    """Tasks shorter than the gap between looks come and go unseen; the first one must
    keep the sampler awake, or each of them costs the worker a thread wake-up.

    Counted, not timed: the sampler stays awake ``rest_after`` seconds after a task
    starts, longer here than the stream takes on however busy a machine."""
    executing: dict = {}
    profiler = StackSampler(
        executing, time.time, interval=0.05, cycle_interval=10.0, rest_after=60.0
    )
    signal = profiler._signal = _CountingSignal()
    profiler.start()
    try:
        wait_for(lambda: profiler.resting, what="the idle sampler to rest")  # no task yet
        for _ in range(50):  # short tasks, one after another
            executing[1] = ("k", "short")
            profiler.wake()
            del executing[1]
            time.sleep(0.002)
        assert signal.releases == 1, f"{signal.releases} wake-ups for 50 short tasks"
    finally:
        profiler.stop()


def tiny(i):
    return i + 1


def test_tiny_tasks_make_the_sampler_look_less_often():
    """Tasks of a microsecond are almost never caught in their own code: the sampler
    backs off to a few looks a second rather than one per interval (core.sampling).

    The rate is taken over a number of looks: a busy machine can only make them rarer."""
    executing: dict = {}
    profiler = StackSampler(executing, time.time, interval=0.005, cycle_interval=10.0)
    ident = threading.get_ident()
    expr = Call(tiny, (1,))
    profiler.start()
    try:
        started = time.monotonic()
        deadline = started + 30
        looks0 = profiler.looks
        while profiler.looks - looks0 < 30:
            assert time.monotonic() < deadline, "the sampler stopped looking"
            executing[ident] = ("tiny-1", "tiny")
            if profiler.resting:
                profiler.wake()
            # the engine's work around a task, which lets the sampler have the GIL
            time.sleep(0)
            evaluate(expr, {})
            del executing[ident]
        elapsed = time.monotonic() - started
        looks = profiler.looks - looks0
    finally:
        profiler.stop()
    # 200 looks a second at the full rate; about 20 backed off, plus the few that catch
    # a task
    assert looks / elapsed <= 80, f"{looks} looks in {elapsed:.2f} s"
