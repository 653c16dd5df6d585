"""Workloads of realistic shape: many small tasks, long chains, trees, diamonds, many clients."""

from __future__ import annotations

import threading
from operator import add

import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.client.futures import wait

from .helpers import (
    CallLog,
    blocked_until,
    held_keys,
    keys_in_memory,
    on_loop,
    on_workers,
    scheduler_keys,
    settled,
    wait_for,
)


def inc(x):
    return x + 1


def double(x):
    return 2 * x


def total(*xs):
    return sum(xs)


# -- many independent tasks -----------------------------------------------------------


def test_ten_thousand_tasks_with_map(client, cluster):
    fs = client.map(inc, range(10_000))
    assert len({f.key for f in fs}) == 10_000
    assert client.gather(fs) == list(range(1, 10_001))
    counts = on_loop(cluster, lambda: cluster.scheduler.state.task_prefixes["inc"].states)
    assert counts["memory"] == 10_000


def test_ten_thousand_tasks_with_get(client):
    dsk = {("x", i): (inc, i) for i in range(10_000)}
    keys = list(dsk)
    assert client.get(dsk, keys) == list(range(1, 10_001))


def test_ten_thousand_tasks_share_the_work_between_workers(client, cluster):
    fs = client.map(inc, range(10_000))
    assert sum(client.gather(fs)) == sum(range(1, 10_001))
    held = on_loop(
        cluster, lambda: [len(ws.has_what) for ws in cluster.scheduler.state.workers.values()]
    )
    # independent tasks are never copied: each result lives on the worker that made it
    assert sum(held) == 10_000
    assert all(n > 0 for n in held), held
    del fs


# -- long chains ----------------------------------------------------------------------


def test_a_chain_of_two_thousand_tasks_as_a_dict_graph(client, cluster):
    n = 2_000
    dsk = {("c", 0): 0}
    for i in range(1, n):
        dsk[("c", i)] = (inc, ("c", i - 1))
    assert client.get(dsk, ("c", n - 1)) == n - 1
    assert client.get(dsk, [("c", 10), ("c", n - 1)]) == [10, n - 1]


def test_a_chain_of_two_thousand_chained_submits(client, cluster):
    n = 2_000
    f = client.submit(inc, 0)
    for _ in range(n - 1):
        f = client.submit(inc, f)
    assert f.result() == n
    # each link's value was dropped once its successor had read it; the scheduler keeps
    # the released links only as lineage to recompute from
    settled(cluster, lambda: held_keys(cluster), {f.key}, "values held")
    assert keys_in_memory(cluster) == {f.key}
    assert len(scheduler_keys(cluster)) == n


def went_straight_to_executing(dask_worker) -> list:
    """Keys this worker ran on the thread of their input, right after it (ExecuteAfter):
    from waiting to executing with no stop in the ready queue."""
    return [
        k
        for k, old, new, _ in dask_worker.state.transition_log
        if (old, new) == ("waiting", "executing")
    ]


def fail_at(x: int, bad: int) -> int:
    if x == bad:
        raise ValueError(f"link {bad} failed")
    return x + 1


def test_a_chain_runs_link_after_link_on_the_thread_of_its_input(client, cluster):
    n = 300
    dsk = {("c", 0): (inc, 0)}
    for i in range(1, n):
        dsk[("c", i)] = (inc, ("c", i - 1))
    assert client.get(dsk, ("c", n - 1)) == n
    # the scheduler sent links ahead of their inputs to the worker running the chain,
    # and that worker's thread went on from each link to the next without the loop
    followed = [k for keys in on_workers(cluster, went_straight_to_executing).values()
                for k in keys if k in dsk]  # fmt: skip
    assert len(followed) > n // 2, len(followed)


def test_a_failing_link_fails_the_rest_of_the_chain_and_nothing_else(client, cluster):
    n, bad = 100, 60
    dsk = {("c", 0): (fail_at, 0, bad)}
    for i in range(1, n):
        dsk[("c", i)] = (fail_at, ("c", i - 1), bad)
    with pytest.raises(ValueError, match=f"link {bad} failed"):
        client.get(dsk, ("c", n - 1))
    assert client.get(dsk, ("c", bad - 1)) == bad  # the links before it are fine
    futures = [client.submit(fail_at, 0, -1)]
    for _ in range(n - 1):
        futures.append(client.submit(fail_at, futures[-1], bad))
    with pytest.raises(ValueError, match=f"link {bad} failed"):
        futures[-1].result()
    assert futures[bad - 1].result() == bad
    assert [f.status for f in futures[bad:]] == ["error"] * (n - bad)


def test_cancelling_a_chain_sent_ahead_of_a_running_link(client, cluster, new_event):
    event = new_event()
    first = client.submit(blocked_until, event, 0)
    links = [first]
    for _ in range(30):
        links.append(client.submit(inc, links[-1]))
    # the links wait on the worker for the blocked first one: cancel them all there
    wait_for(lambda: sum(on_workers(cluster, lambda dask_worker: len(dask_worker.state.tasks))
                         .values()) > 1, what="links to reach the worker")  # fmt: skip
    client.cancel(links[1:])
    event.set()
    assert first.result() == 0
    assert all(f.cancelled() for f in links[1:])
    # and the engine carries on: the same chain again runs to the end
    again = client.submit(inc, first)
    for _ in range(29):
        again = client.submit(inc, again)
    assert again.result() == 30


def test_a_chain_whose_links_read_a_second_input_held_on_the_worker(client, cluster):
    offset = client.submit(inc, 9)  # 10, on one worker: the chain runs there
    f = client.submit(add, 0, offset)
    for _ in range(199):
        f = client.submit(add, f, offset)
    assert f.result() == 2_000


@pytest.mark.embedded_only("hands events to a worker object in this process")
def test_a_task_offered_and_freed_in_one_batch_is_not_run(client, cluster, new_event):
    from kernel_cluster.core.worker_messages import ComputeRequested, FreeKeysRequested

    event = new_event()
    a = client.submit(blocked_until, event, 1)

    def running_a():
        for w in cluster.workers.values():
            ts = w.state.tasks.get(a.key)
            if ts is not None and ts.state == "executing":
                return w
        return None

    wait_for(running_a, what="a to start")
    worker = running_a()
    # b waits on a alone (it is offered to a's thread), and is freed in the same batch
    b = ComputeRequested("b", None, {a.key: ()}, {}, (0, 0, 0), "b")
    on_loop(cluster, worker.handle, b, FreeKeysRequested(["b"]))
    assert "b" not in worker.state.tasks and not worker._follow
    event.set()
    assert a.result() == 1


# -- trees and diamonds ---------------------------------------------------------------


def tree_reduction(leaves: int, fan_in: int = 2) -> tuple[dict, tuple]:
    dsk: dict = {("leaf", i): (inc, i) for i in range(leaves)}
    level, names = 0, [("leaf", i) for i in range(leaves)]
    while len(names) > 1:
        level += 1
        nxt = []
        for j in range(0, len(names), fan_in):
            key = ("sum", level, j // fan_in)
            dsk[key] = (total, *names[j : j + fan_in])
            nxt.append(key)
        names = nxt
    return dsk, names[0]


def test_tree_reduction_over_a_thousand_leaves(client, cluster):
    leaves = 1_024
    dsk, root = tree_reduction(leaves)
    in_memory = 0
    peak = 0

    def track(ts, old, new, info):
        # runs on the loop thread, inside the scheduler's own transitions
        nonlocal in_memory, peak
        if new == "memory":
            in_memory += 1
            peak = max(peak, in_memory)
        elif old == "memory":
            in_memory -= 1

    state = cluster.scheduler.state
    original = state.on_transition

    def chained(ts, old, new, info):
        track(ts, old, new, info)
        if original is not None and (only is None or (old, new) in only):
            original(ts, old, new, info)

    def install(hook, queue_seconds, only):
        state.on_transition = hook
        state.transition_filter = only  # None: this hook sees every transition
        state.queue_seconds = queue_seconds

    # No queue beyond worker_saturation: with one sized by the (microsecond) task
    # durations, every leaf is sent at once, and the peak measures how many leaves a
    # worker process finishes during one round trip rather than how soon they go.
    queue_seconds = state.queue_seconds
    only = state.transition_filter
    on_loop(cluster, lambda: install(chained, 0, None))
    try:
        assert client.get(dsk, root) == sum(range(1, leaves + 1))
    finally:
        on_loop(cluster, lambda: install(original, queue_seconds, only))
    # intermediates are released as soon as their parent has them: the number of
    # results held at once stays far below the number of leaves
    assert 1 <= peak <= leaves // 8, peak


def test_tree_reduction_with_futures(client, cluster):
    layer = client.map(inc, range(1_024))
    while len(layer) > 1:
        layer = [client.submit(add, a, b) for a, b in zip(layer[::2], layer[1::2])]
    (root,) = layer
    assert root.result() == sum(range(1, 1_025))
    settled(cluster, lambda: held_keys(cluster), {root.key}, "values held")
    assert keys_in_memory(cluster) == {root.key}


def test_a_diamond(client):
    dsk = {
        "top": (inc, 1),
        "left": (double, "top"),
        "right": (inc, "top"),
        "bottom": (add, "left", "right"),
    }
    assert client.get(dsk, "bottom") == 4 + 3
    assert client.get(dsk, ["left", "right", "bottom"]) == [4, 3, 7]


def test_diamonds_of_futures_share_their_top(client, tmp_path):
    calls = CallLog(tmp_path / "calls")

    def record(x):
        calls.append(x)
        return x

    top = client.submit(record, 5)
    lefts = client.map(add, [top] * 10, range(10))
    rights = client.map(double, [top] * 10)
    bottoms = client.map(add, lefts, rights)
    assert client.gather(bottoms) == [5 + i + 10 for i in range(10)]
    assert calls.read() == [5]


def test_wide_fan_in(client):
    parts = client.map(inc, range(500))
    assert client.submit(total, *parts).result() == sum(range(1, 501))
    assert client.submit(sum, parts).result() == sum(range(1, 501))


# -- many clients -----------------------------------------------------------------------


def test_five_clients_from_five_threads_at_once(cluster):
    n_clients = 5
    start = threading.Barrier(n_clients)
    results: dict[int, object] = {}

    def session(i: int) -> None:
        try:
            with Client(cluster, set_as_default=False) as c:
                start.wait(timeout=10)
                shared = c.map(inc, range(500))  # the same keys in every client
                own = c.map(add, range(500), [i] * 500)
                chain = c.submit(inc, i)
                for _ in range(50):
                    chain = c.submit(inc, chain)
                # keys name results across the cluster: each client's graph has its own
                dsk = {
                    f"a{i}": (add, i, 1),
                    f"b{i}": (double, f"a{i}"),
                    f"c{i}": (add, f"a{i}", f"b{i}"),
                }
                wait(shared + own)
                results[i] = (
                    sum(c.gather(shared)),
                    c.gather(own)[-1],
                    chain.result(),
                    c.get(dsk, f"c{i}"),
                )
                del shared, own, chain
        except BaseException as exc:  # reported by the main thread
            results[i] = exc

    threads = [threading.Thread(target=session, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not any(t.is_alive() for t in threads)
    for i in range(n_clients):
        assert results[i] == (sum(range(1, 501)), 499 + i, i + 51, 3 * (i + 1)), results[i]
    assert on_loop(cluster, lambda: len(cluster.scheduler.state.clients)) == 0


def test_one_client_shared_by_five_threads(client, cluster):
    start = threading.Barrier(5)
    results: dict[int, object] = {}

    def work(i: int) -> None:
        try:
            start.wait(timeout=10)
            fs = client.map(add, range(200), [i] * 200)
            chain = client.submit(inc, i)
            for _ in range(20):
                chain = client.submit(inc, chain)
            shared = client.map(inc, range(200))
            results[i] = (sum(client.gather(fs)), chain.result(), sum(client.gather(shared)))
        except BaseException as exc:  # reported by the main thread
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not any(t.is_alive() for t in threads)
    for i in range(5):
        assert results[i] == (sum(range(200)) + 200 * i, i + 21, sum(range(1, 201))), results[i]
