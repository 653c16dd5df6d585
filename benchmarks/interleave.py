"""Comparing configurations on a shared, noisy machine: interleaved rounds.

On this kind of VM a run's wall time moves by 20% from one minute to the next,
far more than the few percent an overhead target is about. So every round runs
each configuration once, in a rotating order, right after a garbage collection,
and the overhead is read per round (a run against the baseline's run in the same
round), then summarised by the median over rounds: drift between rounds cancels,
and one disturbed run moves the median little.

Configurations are compared on the same workers, switched between runs: two
identical clusters kept side by side here ran 10-15% apart for as long as they
lived (which one was faster changed from one pair to the next), a bias that would
land on one configuration only.
"""

from __future__ import annotations

import gc
import random
import statistics
from collections.abc import Callable, Iterator
from typing import Any


def rounds(
    runs: dict[str, Callable[[], float]], repeats: int, warm_up: bool = True
) -> dict[str, list[float]]:
    """Seconds of each run, ``repeats`` rounds; each run callable returns its seconds."""
    names = list(runs)
    for name in names if warm_up else ():
        runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            times[name].append(runs[name]())
    return times


def overhead(times: list[float], baseline: list[float]) -> dict[str, float]:
    """How much slower ``times`` are than ``baseline`` (both from ``rounds``).

    ``ci_low``/``ci_high``: a 90% bootstrap interval of the median over rounds, so a
    reader can tell a few percent of overhead from the machine's noise.
    """
    per_round = [t / b - 1 for t, b in zip(times, baseline, strict=True)]
    quartiles = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else per_round * 3
    low, high = median_interval(per_round)
    return {
        "median_of_rounds": statistics.median(per_round),
        "q1": quartiles[0],
        "q3": quartiles[-1],
        "ci_low": low,
        "ci_high": high,
        "of_medians": statistics.median(times) / statistics.median(baseline) - 1,
        "of_fastest": min(times) / min(baseline) - 1,
    }


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float]:
    """A percentile-bootstrap interval of the median (fixed seed: reruns agree)."""
    if len(values) < 2:
        return values[0], values[0]
    rng = random.Random(0)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(2000))
    tail = (1 - level) / 2
    return medians[int(tail * len(medians))], medians[int((1 - tail) * len(medians)) - 1]


def one_cluster_per_mode(
    modes: tuple[str, ...] = ("embedded", "processes"),
) -> Iterator[tuple[str, Any]]:
    """("embedded", client) then ("processes", client): one cluster each, two worker
    threads in all, closed when the caller moves on."""
    from kernel_cluster import Client, KernelCluster

    for mode in modes:
        processes = mode == "processes"
        cluster = KernelCluster(
            n_workers=2 if processes else 1,
            threads_per_worker=1 if processes else 2,
            processes=processes,
            memory_limit=0,
        )
        client = Client(cluster, set_as_default=False)
        try:
            yield mode, client
        finally:
            close_client(client)


def close_client(client: Any) -> None:
    """Close a client and the cluster it was made with (``compare``'s usual ``close``)."""
    cluster = client.cluster
    client.close()
    cluster.close()
