"""Write the local profilers' plots of a QR-like run: ``make_profile.py OUT``.

The records are synthetic but shaped as a run records them: four worker threads make
random blocks, factor them (qr), gather them in one reduction, then interleave dot and
sum; CPU and memory are sampled every 0.1 s; each result stays in the cache until its
last consumer has run.
"""

import random
import sys
import time

from kernel_cluster.local_diagnostics.plots import visualize
from kernel_cluster.local_diagnostics.records import CacheData, ResourceData, TaskData


def random_sample(seed):
    return random.Random(seed).random()


def qr(block):
    return block, block


def concatenate(blocks):
    return list(blocks)


def dot(a):
    return a


def records(t0: float):
    rng = random.Random(0)
    tasks: list[TaskData] = []
    free_at: dict[object, float] = {}
    clock = [t0 + 0.02 * w for w in range(4)]  # when each worker is next free

    def run(key, task, worker, duration, after=0.0):
        start = max(clock[worker], after)
        end = start + duration
        clock[worker] = end + 0.005
        tasks.append(TaskData(key, task, start, end, worker))
        return end

    blocks = []
    for i in range(8):
        key = ("random_sample-5d1f0e2a", i)
        end = run(key, (random_sample, i), i % 4, 0.25 + 0.1 * rng.random())
        blocks.append((key, end))
    factors = []
    for i, (block, ready) in enumerate(blocks):
        key = ("qr-9c3b7e11", i)
        end = run(key, (qr, block), i % 4, 0.18 + 0.05 * rng.random(), after=ready)
        free_at[block] = end
        factors.append((key, end))
    ready = max(end for _, end in factors)
    reduced = run(
        ("concatenate-77aa01fe", 0), (concatenate, [k for k, _ in factors]), 0, 0.15, ready
    )
    for key, _ in factors:
        free_at[key] = reduced
    last = reduced
    for i in range(8):
        dot = ("dot-3e5f9a40", i)
        d_end = run(
            dot, (dot, ("concatenate-77aa01fe", 0)), i % 4, 0.05 + 0.04 * rng.random(), reduced
        )
        s_end = run(("sum-b81c2d07", i), (sum, dot), (i + 1) % 4, 0.03, d_end)
        free_at[dot] = s_end
        last = max(last, s_end)
    free_at[("concatenate-77aa01fe", 0)] = last
    cache = [
        CacheData(t.key, t.task, 8_000_000.0, t.end_time, free_at.get(t.key, last + 0.01))
        for t in tasks
    ]
    resource = []
    t = t0
    while t <= last + 0.2:
        busy = sum(1 for r in tasks if r.start_time <= t <= r.end_time)
        held = sum(c.metric for c in cache if c.cache_time <= t < c.free_time) / 1e6
        resource.append(ResourceData(t, 75.0 + held, min(400.0, 100.0 * busy * 0.95)))
        t += 0.1
    return tasks, resource, cache


def main(filename: str) -> None:
    tasks, resource, cache = records(time.time() - 5)
    visualize([tasks, resource, cache], filename=filename, title="QR: profiler plots")


if __name__ == "__main__":
    main(sys.argv[1])
