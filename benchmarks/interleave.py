"""Comparing configurations on a shared, noisy machine: interleaved rounds.

On this kind of VM a run's wall time moves by 20% from one minute to the next,
far more than the few percent an overhead target is about. So every round runs
each configuration once, in a rotating order, right after a garbage collection,
and the overhead is read per round (a run against the baseline's run in the same
round), then summarised by the median over rounds: drift between rounds cancels,
and one disturbed run moves the median little.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable


def rounds(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each run, ``repeats`` rounds; each run callable returns its seconds."""
    names = list(runs)
    for name in names:
        runs[name]()  # warm up
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            times[name].append(runs[name]())
    return times


def overhead(times: list[float], baseline: list[float]) -> dict[str, float]:
    """How much slower ``times`` are than ``baseline`` (both from ``rounds``)."""
    per_round = [t / b - 1 for t, b in zip(times, baseline, strict=True)]
    quartiles = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else per_round * 3
    return {
        "median_of_rounds": statistics.median(per_round),
        "q1": quartiles[0],
        "q3": quartiles[-1],
        "of_medians": statistics.median(times) / statistics.median(baseline) - 1,
        "of_fastest": min(times) / min(baseline) - 1,
    }
