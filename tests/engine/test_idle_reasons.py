"""Idle split by reason on a running engine: what ``fine_metrics()`` shows, per
cluster and per span, against what the workers' threads measured undivided."""

from __future__ import annotations

import random
import time

import pytest

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.core.idle_reasons import IDLE_ACTIVITIES, REASONS, is_idle
from kernel_cluster.diagnostics.queries.fine_metrics import idle_by_reason

from .helpers import wait_for


def nap(seconds, *inputs):
    time.sleep(seconds)
    return len(inputs)


def idle_parts(client, span_id=None) -> dict[str, float]:
    return idle_by_reason(client.fine_metrics(span=span_id)).to_dict()


def undivided_idle(cluster) -> float:
    """What the workers' threads measured as idle, before any split."""
    return sum(w.timeline.idle for w in cluster.workers.values())


def random_graph(seed: int) -> tuple[dict, list]:
    """A random DAG of short naps: each task takes up to three earlier ones as inputs."""
    rng = random.Random(seed)
    graph: dict = {}
    for i in range(rng.randint(5, 40)):
        inputs = rng.sample(sorted(graph), k=min(len(graph), rng.randint(0, 3)))
        graph[f"t{i}"] = (nap, rng.choice([0.0, 0.001, 0.005]), *inputs)
    return graph, sorted(graph)


@pytest.mark.parametrize("seed", range(6))
def test_idle_parts_sum_to_the_idle_they_replace(seed):
    """Random graphs on random clusters: the parts, as the views read them, add up
    to the idle the threads measured, and the undivided activity is gone."""
    rng = random.Random(seed)
    n_workers, threads = rng.randint(1, 3), rng.randint(1, 2)
    with KernelCluster(n_workers=n_workers, threads_per_worker=threads, memory_limit=0,
                       worker_saturation=rng.choice([1.0, 1.5])) as cluster, \
            Client(cluster) as client:  # fmt: skip
        for round_ in range(2):
            graph, keys = random_graph(seed * 10 + round_)
            client.get(graph, keys)

        def adds_up() -> bool:
            return sum(idle_parts(client).values()) == pytest.approx(undivided_idle(cluster))

        # the idle after the last task is filed when the worker hears the cluster went
        # quiet, a message that may come after the results
        wait_for(adds_up, what="the idle parts to add up to the threads' idle")
        assert undivided_idle(cluster) > 0
        frame = client.fine_metrics()
        assert "idle" not in set(frame.activity)
        assert set(frame.activity[frame.activity.map(is_idle)]) <= set(IDLE_ACTIVITIES)
        assert frame[frame.activity.map(is_idle)].function.isna().all()


def test_a_chain_leaves_the_other_thread_with_no_ready_task():
    """One link at a time on one worker: a free thread had nothing to run, never for
    any other reason."""
    with KernelCluster(n_workers=1, threads_per_worker=2, memory_limit=0) as cluster, \
            Client(cluster) as client:  # fmt: skip
        graph = {"c0": (nap, 0.01)}
        for i in range(1, 8):
            graph[f"c{i}"] = (nap, 0.01, f"c{i - 1}")
        with span("chain") as span_id:
            client.get(graph, "c7")
        wait_for(lambda: sum(idle_parts(client).values()) >= 0.07, what="the chain's idle")
        parts = idle_parts(client)
        assert list(parts) == list(REASONS)
        assert parts["no-ready-task"] >= 0.07  # the other thread, all along the chain
        for reason in ("waiting-for-data", "scheduler-queued", "paused"):
            assert parts[reason] == 0.0, reason
        # per span: its idle by reason, and the rest of its thread-seconds as other
        mine = idle_parts(client, span_id)
        assert mine["no-ready-task"] >= 0.07
        seconds = client.fine_metrics(span=span_id).value.sum()
        assert seconds == pytest.approx(client.spans()[span_id].active_cpu_seconds)


class Unspillable:
    """8 MB that refuse to be pickled, so they cannot be moved to disk."""

    def __init__(self) -> None:
        self.data = bytearray(8_000_000)

    def __sizeof__(self) -> int:
        return 8_000_000

    def __reduce__(self):
        raise TypeError("this value stays in memory")


def unspillable(i):
    return Unspillable()


def test_a_paused_worker_idles_as_paused():
    with KernelCluster(n_workers=1, threads_per_worker=1, memory_limit="20 MB") as cluster, \
            Client(cluster) as client:  # fmt: skip
        worker = next(iter(cluster.workers.values()))
        held = client.map(unspillable, range(3), pure=False)  # 24 MB > 80% of 20 MB
        client.gather(held)
        wait_for(lambda: worker.state.paused, what="the worker to pause")
        later = client.submit(nap, 0.0, 5)
        wait_for(lambda: cluster.scheduler.state.busy, what="the cluster to be busy")
        del held
        assert later.result(timeout=30) == 1
        wait_for(lambda: idle_parts(client)["paused"] > 0, what="idle while paused")
