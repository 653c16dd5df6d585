"""The profiler's look schedule on simulated timelines: samples must add up to time.

A task thread's timeline is a sorted list of ``(start, stop, caught)`` stretches:
``caught`` stretches are a task's own code (a look there counts the task), the others
are tasks too short to be caught (the engine's frames around a tiny function). The
simulation drives ``SampleSchedule`` as the sampling thread does, including the
wake-up when a task starts on a resting worker, and compares what the looks counted
with the time the caught stretches really took.
"""

from __future__ import annotations

import bisect
import random

import pytest

from kernel_cluster.core.sampling import SampleSchedule

INTERVAL, BACKOFF, REST, REST_AFTER = 0.01, 0.05, 0.2, 0.1

Timeline = list[tuple[float, float, bool]]


def simulate(timelines: list[Timeline], seed: int) -> list[list[int]]:
    """Weighted samples counted in each caught stretch, per thread."""
    schedule = SampleSchedule(INTERVAL, BACKOFF, REST, random.Random(seed))
    starts = [[s for s, _, _ in line] for line in timelines]
    counts = [[0] * len(line) for line in timelines]
    end = max(line[-1][1] for line in timelines)
    now = 0.0
    last_busy = -REST_AFTER
    rest = True
    due = schedule.first(now)
    while due < end:
        if rest:  # a task starting before the look wakes the sampler
            start = min(
                (s[i] for s in starts if (i := bisect.bisect_left(s, now)) < len(s)),
                default=end,
            )
            if start < due:
                now = last_busy = start
                rest = False
                due = schedule.woken(now)
                continue
        now = due
        hits = 0
        executing = False
        for n, line in enumerate(timelines):
            i = bisect.bisect_right(starts[n], now) - 1
            if i >= 0 and now < line[i][1]:
                executing = True
                if line[i][2]:
                    counts[n][i] += schedule.weight
                    hits += 1
        if executing:
            last_busy = now
        rest = now - last_busy >= REST_AFTER
        due = schedule.seen(hits, not rest, due, now)
    return counts


def caught_ratio(timelines: list[Timeline], counts: list[list[int]], lo: float, hi: float):
    """Counted samples over true samples for caught stretches lasting [lo, hi)."""
    counted = true = 0.0
    for line, line_counts in zip(timelines, counts, strict=True):
        for (start, stop, caught), n in zip(line, line_counts, strict=True):
            if caught and lo <= stop - start < hi:
                counted += n
                true += (stop - start) / INTERVAL
    return counted / true


def mixed_timeline(rng: random.Random, n_tasks: int, idle: float) -> Timeline:
    """Bursts of tasks too short to catch, then a task of any length, then maybe
    ``idle`` seconds with nothing running (long enough for the sampler to rest)."""
    line: Timeline = []
    t = 0.0
    for _ in range(n_tasks):
        burst = rng.uniform(0.0, 0.3)
        if burst:
            line.append((t, t + burst, False))
            t += burst
        length = rng.choice([0.002, 0.02, 0.2]) * rng.uniform(0.5, 1.5)
        line.append((t, t + length, True))
        t += length
        if rng.random() < 0.3:
            t += idle * rng.uniform(1.0, 3.0)
    return line


@pytest.mark.parametrize("idle", [0.0, 0.5])
def test_every_task_length_gets_its_time_in_samples(idle):
    rng = random.Random(1)
    timelines = [mixed_timeline(rng, 3000, idle), mixed_timeline(rng, 3000, idle)]
    counts = simulate(timelines, seed=2)
    # Tasks much longer than a sparse gap, of a few intervals, and shorter than one: the
    # fewer samples a task gets, the more its count varies (the seeds are fixed). A
    # grid without the random phase, or sparse gaps without memory, count the long
    # tasks 2% short or 6% over.
    for lo, hi, error in [(0.05, 1.0, 0.01), (0.005, 0.05, 0.08), (0.0, 0.005, 0.15)]:
        ratio = caught_ratio(timelines, counts, lo, hi)
        assert ratio == pytest.approx(1.0, abs=error), (lo, hi)


def test_a_long_task_after_a_stream_of_tiny_ones_is_counted_in_full():
    """The sampler backs off during the tiny tasks; the long task that follows must
    not lose the stretch before its first look, nor be counted twice for it."""
    line: Timeline = []
    t = 0.0
    for _ in range(2000):
        line += [(t, t + 0.2, False), (t + 0.2, t + 0.25, True)]
        t += 0.25
    counts = simulate([line], seed=3)
    assert caught_ratio([line], counts, 0.0, 1.0) == pytest.approx(1.0, abs=0.03)
    # a look every 10 ms while the long tasks run, about every 50 ms during the bursts
    assert sum(counts[0]) == pytest.approx(2000 * 5, rel=0.03)


def test_weights_are_whole_samples_and_never_below_one():
    for interval in [0.0003, 0.001, 0.003, 0.01, 0.07, 1.0]:
        schedule = SampleSchedule(interval, BACKOFF, REST)
        assert 1 <= schedule.backoff_weight <= schedule.rest_weight
        assert isinstance(schedule.backoff_weight, int)
        assert isinstance(schedule.rest_weight, int)
    with pytest.raises(ValueError, match="must be positive"):
        SampleSchedule(0.0, BACKOFF, REST)
