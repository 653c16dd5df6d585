"""MemorySampler: cluster memory over time, around the blocks you choose.

    ms = MemorySampler()
    with ms.sample("run 1"):
        client.gather(client.map(load, files))
    ms.to_pandas()

Samples are taken by a background thread every ``interval`` seconds from the
diagnostics source (the workers' heartbeats): the first one at once, the last
one when the block ends, so even an empty block has a sample.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from .source import default_source

MEASURES = ("process", "managed", "unmanaged", "spilled")


class MemorySampler:
    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, int]]] = {}

    def sample(
        self,
        label: str | None = None,
        *,
        client: Any = None,
        measure: str = "process",
        interval: float = 0.5,
    ) -> _Sampling:
        """A context manager (``with`` or ``async with``) recording ``measure`` in bytes.

        ``measure``: ``process`` (each worker process's memory, counted once),
        ``managed`` (results held in memory), ``unmanaged`` (process minus managed),
        ``spilled`` (results moved to disk).
        """
        if measure not in MEASURES:
            raise ValueError(f"measure={measure!r}: use one of {', '.join(MEASURES)}.")
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}.")
        source = default_source() if client is None else client.diagnostics
        label = label or f"sample-{uuid.uuid4().hex[:8]}"
        series = self.samples.setdefault(label, [])
        return _Sampling(source, measure, interval, series)

    def to_pandas(self, *, align: bool = False) -> Any:
        """One column per label. ``align=False``: a DatetimeIndex of absolute times.
        ``align=True``: a TimedeltaIndex from each series' own first sample, so runs
        can be compared side by side (no values after a series ends)."""
        import pandas as pd

        columns = {}
        for label, series in self.samples.items():
            if not series:
                continue
            times = [t for t, _ in series]
            values = [v for _, v in series]
            if align:
                index = pd.to_timedelta([t - times[0] for t in times], unit="s")
            else:
                index = pd.to_datetime(times, unit="s")
            columns[label] = pd.Series(values, index=index)
        frame = pd.DataFrame(columns)
        return frame.sort_index()

    def plot(self, *, align: bool = False, **kwargs: Any) -> Any:
        """The samples as a line chart (pandas plotting); ``kwargs`` go to ``DataFrame.plot``."""
        frame = self.to_pandas(align=align)
        if align:
            frame.index = frame.index.total_seconds()
        return frame.plot(**{"ylabel": "bytes", **kwargs})


class _Sampling:
    def __init__(self, source: Any, measure: str, interval: float, series: list):
        self.source = source
        self.measure = measure
        self.interval = interval
        self.series = series
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        self.series.append((time.time(), int(self.source.memory()[self.measure])))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._take()

    def __enter__(self) -> _Sampling:
        self._take()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()

    async def __aenter__(self) -> _Sampling:
        import asyncio

        await asyncio.to_thread(self._take)
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        import asyncio

        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        await asyncio.to_thread(self._take)
