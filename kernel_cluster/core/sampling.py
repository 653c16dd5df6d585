"""When the statistical profiler looks at its task threads, and what a look is worth.

A look costs the sampling thread a wake-up and the GIL (about 0.1 ms), whatever it
finds. Tasks of a few microseconds are almost never caught inside their own code, so
looking at them every ``interval`` buys nothing and slows the engine down. The
schedule therefore looks less often while looks find nothing, and makes up for it by
counting each sparse look as several samples.

That is only fair if no instant of a task is favoured, whenever the task started:

- Sparse looks come after random gaps drawn from an exponential distribution. Such
  a wait has no memory: a task that starts during a sparse stretch waits, on
  average, one whole gap for its first look, which is what that look counts for.
  (On a fixed grid it would wait half a gap, and be counted double for that part.)
- Once a look finds task code, looks follow a grid of ``interval``, starting a random
  fraction of an interval later, so that the grid's phase owes nothing to the moment
  the task was found. Each later instant then gets, on average, one look per
  ``interval``, and a long task is counted as tightly as on a plain grid.

Counted this way a task's samples are, on average, its time over ``interval``,
however long it ran and whatever ran around it (``tests/core/test_sampling.py``
checks it on simulated timelines).
"""

from __future__ import annotations

import math
import random


class SampleSchedule:
    """The times and weights of the looks.

    One look per ``interval`` while looks find task code; about one per ``backoff``
    seconds, worth ``backoff / interval`` samples, while tasks run but are never caught
    in their own code; about one per ``rest`` seconds while no task runs at all.
    """

    __slots__ = ("_rng", "backoff_weight", "interval", "rest_weight", "weight")

    def __init__(
        self, interval: float, backoff: float, rest: float, rng: random.Random | None = None
    ):
        if not interval > 0:
            raise ValueError(f"the sampling interval must be positive, got {interval!r}")
        self.interval = interval
        # weights are whole samples, so that profiles stay integer counts
        self.backoff_weight = max(1, round(backoff / interval))
        self.rest_weight = max(self.backoff_weight, round(rest / interval))
        self.weight = self.rest_weight  # what the next look counts for
        self._rng = rng or random.Random()

    def first(self, now: float) -> float:
        """When to look first, for a sampler starting with no task running."""
        self.weight = self.rest_weight
        return now + self._rng.expovariate(1.0 / (self.weight * self.interval))

    def seen(self, hits: int, busy: bool, due: float, now: float) -> float:
        """After the look due at ``due`` and made at ``now``, which found ``hits`` task
        threads inside their task's code (``busy``: tasks run, or ran lately): when
        to look next. Looks that fell behind are skipped, not made up."""
        interval = self.interval
        if hits:
            if self.weight == 1:  # on the grid already: stay on it
                return due + (math.floor((now - due) / interval) + 1) * interval
            self.weight = 1
            return now + self._rng.random() * interval
        self.weight = self.backoff_weight if busy else self.rest_weight
        return now + self._rng.expovariate(1.0 / (self.weight * interval))

    def woken(self, now: float) -> float:
        """A task started on an idle worker: the grid starts at a random phase."""
        self.weight = 1
        return now + self._rng.random() * self.interval
