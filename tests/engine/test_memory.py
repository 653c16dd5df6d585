"""Memory end to end: what the user lets go of is freed, and intermediates go early."""

from __future__ import annotations

import gc

from kernel_cluster.client.client import Client
from kernel_cluster.core.scheduler_state import SEND_AHEAD

from .helpers import (
    held_keys,
    is_idle,
    keys_in_memory,
    on_loop,
    on_workers,
    scheduler_keys,
    settled,
    wait_for,
)


def inc(x):
    return x + 1


def payload(i: int) -> bytes:
    return bytes(10_000) + str(i).encode()


def concat(a: bytes, b: bytes) -> bytes:
    return a[:100] + b[:100]


def engine_is_empty(cluster) -> bool:
    return not scheduler_keys(cluster) and not held_keys(cluster)


def test_released_futures_free_their_data(client, cluster):
    fs = client.map(payload, range(1_000))
    client.gather(fs)
    assert len(held_keys(cluster)) == 1_000
    nbytes = on_loop(
        cluster, lambda: sum(ws.nbytes for ws in cluster.scheduler.state.workers.values())
    )
    assert nbytes >= 1_000 * 10_000
    del fs
    gc.collect()
    wait_for(lambda: engine_is_empty(cluster), what="released results to be freed")
    nbytes = on_loop(
        cluster, lambda: sum(ws.nbytes for ws in cluster.scheduler.state.workers.values())
    )
    assert nbytes == 0


def test_one_released_future_among_many(client, cluster):
    a, b, c = client.map(payload, range(3))
    client.gather([a, b, c])
    key = b.key
    del b
    wait_for(lambda: key not in scheduler_keys(cluster), what="b to be forgotten")
    settled(cluster, lambda: held_keys(cluster), {a.key, c.key}, "values held")


def test_data_lives_while_any_future_for_its_key_does(client, cluster):
    first = client.submit(payload, 1)
    second = client.submit(payload, 1)
    assert first.key == second.key
    first.result()
    key = first.key
    del first
    gc.collect()
    # a round trip through the loop: any release the client sent has been handled
    assert held_keys(cluster) == {key}
    assert second.result() == payload(1)
    del second
    wait_for(lambda: engine_is_empty(cluster))


def test_get_leaves_nothing_behind(client, cluster):
    dsk = {("p", i): (payload, i) for i in range(100)}
    dsk["out"] = (len, (concat, ("p", 0), ("p", 1)))
    assert client.get(dsk, "out") == 200
    assert client.get(dsk, [("p", 5)]) == [payload(5)]
    wait_for(lambda: engine_is_empty(cluster), what="get() to release its keys")


def count_values_held(dask_worker):
    """Record the most values this worker holds at once, from now on."""
    state = dask_worker.state
    original = state.on_transition
    dask_worker.test_peak = len(dask_worker.data)

    def hook(ts, old, new):
        dask_worker.test_peak = max(dask_worker.test_peak, len(dask_worker.data))
        if original is not None:
            original(ts, old, new)

    state.on_transition = hook
    dask_worker.test_original_hook = original


def stop_counting(dask_worker) -> int:
    dask_worker.state.on_transition = dask_worker.test_original_hook
    return dask_worker.test_peak


def test_chain_intermediates_are_freed_while_it_runs(client, cluster):
    n = 300
    dsk = {("link", 0): (payload, 0)}
    for i in range(1, n):
        dsk[("link", i)] = (concat, ("link", i - 1), ("link", i - 1))
    on_workers(cluster, count_values_held)
    try:
        assert len(client.get(dsk, ("link", n - 1))) == 200
    finally:
        peaks = on_workers(cluster, stop_counting)
    # a link is needed only until the next has run, and is freed when the scheduler
    # hears so. A worker's thread may run ahead of that news by the links sent ahead
    # (a couple of threads plus SEND_AHEAD), never by the length of the chain (the sum
    # of each worker's peak bounds the peak of the sum)
    assert 1 <= sum(peaks.values()) <= 2 + 2 + SEND_AHEAD, peaks
    wait_for(lambda: engine_is_empty(cluster))


def test_intermediates_of_held_futures_are_freed(client, cluster):
    leaves = client.map(payload, range(64))
    pairs = [client.submit(concat, a, b) for a, b in zip(leaves[::2], leaves[1::2])]
    del leaves
    final = client.submit(sum, [client.submit(len, p) for p in pairs])
    del pairs
    assert final.result() == 32 * 200
    # only the result the user still holds keeps its data
    settled(cluster, lambda: held_keys(cluster), {final.key}, "values held")
    assert keys_in_memory(cluster) == {final.key}
    del final
    wait_for(lambda: engine_is_empty(cluster))


def test_closing_a_client_frees_what_it_held(cluster):
    other = Client(cluster, set_as_default=False)
    fs = other.map(payload, range(100))
    other.gather(fs)
    assert len(held_keys(cluster)) == 100
    other.close()
    # futures outlive their client, but no longer hold anything on the cluster
    assert all(f.done() for f in fs)
    wait_for(lambda: engine_is_empty(cluster), what="a closed client's keys to be freed")
    del fs


def test_a_key_two_clients_hold_lives_until_both_let_go(client, cluster):
    with Client(cluster, set_as_default=False) as other:
        mine = client.submit(payload, 7)
        theirs = other.submit(payload, 7)
        assert mine.key == theirs.key
        assert theirs.result() == payload(7)
        key = mine.key
        del mine
        gc.collect()
        assert held_keys(cluster) == {key}
        assert theirs.result() == payload(7)
        del theirs
        wait_for(lambda: engine_is_empty(cluster))


def test_released_while_running_is_dropped_when_it_finishes(client, cluster, new_event):
    event, started = new_event(), new_event()

    def blocked():
        started.set()
        assert event.wait(30)
        return payload(0)

    f = client.submit(blocked)
    assert started.wait(10)
    del f
    gc.collect()
    wait_for(lambda: not scheduler_keys(cluster), what="the running task to be released")
    event.set()
    wait_for(lambda: is_idle(cluster), what="the worker to drop the late result")
