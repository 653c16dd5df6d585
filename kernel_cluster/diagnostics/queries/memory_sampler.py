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

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..attach import source_of
from ..periodic import PeriodicThread
from ..source import Diagnosable

# what Dask's MemorySampler measures (distributed.scheduler.MemoryState), same meanings
MEASURES = (
    "process",
    "managed",
    "managed_total",
    "unmanaged",
    "unmanaged_old",
    "unmanaged_recent",
    "optimistic",
    "spilled",
)


class PlainMemorySampler:
    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, int]]] = {}

    def sample(
        self,
        label: str | None = None,
        *,
        client: Diagnosable | None = None,
        measure: str = "process",
        interval: float = 0.5,
    ) -> Periodic:
        """A context manager (``with`` or ``async with``) recording ``measure`` in bytes.

        ``measure``, as Dask's: ``process`` (each worker process's memory, counted
        once), ``managed`` (results held in memory), ``managed_total`` (managed plus
        spilled), ``unmanaged`` (process minus managed), ``unmanaged_old`` (the least
        unmanaged memory of the last 30 s of heartbeats), ``unmanaged_recent``
        (unmanaged minus unmanaged_old), ``optimistic`` (managed plus unmanaged_old),
        ``spilled`` (results moved to disk: their size in memory, as the engine
        measures it, where Dask counts the bytes on disk).
        """
        if measure not in MEASURES:
            raise ValueError(f"measure={measure!r}: use one of {', '.join(MEASURES)}.")
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not 0 < interval < math.inf
        ):
            raise ValueError(
                f"interval must be a positive number of seconds (e.g. 0.5), got {interval!r}."
            )
        source = source_of(client)
        label = label or f"sample-{uuid.uuid4().hex[:8]}"
        series = self.samples.setdefault(label, [])

        def take() -> None:
            memory = source.memory()
            if memory is None:
                raise ValueError(
                    f"{type(source).__name__} measures no memory: MemorySampler needs a "
                    "source that does, such as a kernel_cluster Client's."
                )
            point = (time.time(), memory.measure(measure))
            series.append(point)
            self._sampled(label, point)

        return Periodic(take, interval, "memory-sampler", lambda: self._finished(label))

    def _sampled(self, label: str, point: tuple[float, int]) -> None:
        """Called after each sample (from the sampling thread); for live charts."""

    def _finished(self, label: str) -> None:
        """Called when a ``sample`` block ends, after its last sample."""

    def to_pandas(self, *, align: bool = False) -> Any:
        """One column per label. ``align=False``: a DatetimeIndex of absolute times.
        ``align=True``: a TimedeltaIndex from each series' own first sample, so runs
        can be compared side by side. Where series interleave, each one's value is
        carried forward between its samples (no NaN gaps), but not past its last."""
        import pandas as pd

        columns = {}
        for label, series in self.samples.items():
            if not series:
                continue
            times = [t for t, _ in series]
            values = [v for _, v in series]
            index: pd.Index
            if align:
                index = pd.to_timedelta([t - times[0] for t in times], unit="s")
            else:
                index = pd.to_datetime(times, unit="s")
            columns[label] = pd.Series(values, index=index)
        frame = pd.DataFrame(columns).sort_index()
        if len(columns) > 1:  # a gap is a time another series was sampled at
            frame = frame.ffill().where(frame.bfill().notna())
        return frame

    def plot(self, *, align: bool = False, **kwargs: Any) -> Any:
        """The samples as a line chart in GiB, resampled to one point a second (to
        the millisecond if all of it fits in one second), as Dask's; ``kwargs``
        (``kind=``, ``title=``...) go to ``DataFrame.plot``.
        ``kernel_cluster.MemorySampler`` draws an interactive bqplot chart in a notebook."""
        import pandas as pd

        try:
            if pd.get_option("plotting.backend") == "matplotlib":  # pandas' default
                import matplotlib  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "MemorySampler.plot() draws with matplotlib, which is not installed: "
                "`pip install matplotlib`, or in a notebook use plot(backend='bqplot') "
                "(needs bqplot); to_pandas() gives the samples as a table without either."
            ) from exc
        return self.resampled(align=align).plot(
            **{"xlabel": "time", "ylabel": "Cluster memory (GiB)", **kwargs}
        )

    def resampled(self, *, align: bool = False) -> Any:
        """What ``plot`` draws: ``to_pandas(align=align)`` at one row a second (the
        nearest sample), in GiB."""
        frame = self.to_pandas(align=align)
        if frame.empty:
            return frame
        out = frame.resample("1s").nearest()
        if len(out) == 1:  # all within a second: one point draws no line
            out = frame.resample("1ms").nearest()
        return out / 2**30


class Periodic:
    """Calls ``take()`` at once, every ``interval`` seconds from a thread, and once
    more at the end: a context manager, ``with`` or ``async with``."""

    def __init__(
        self,
        take: Callable[[], None],
        interval: float,
        name: str = "sampler",
        finish: Callable[[], None] | None = None,
    ):
        """``finish``: called once the last sample is taken."""
        self.take = take
        self.interval = interval
        self.name = name
        self.finish = finish
        self._thread: PeriodicThread | None = None

    def _start_thread(self) -> None:
        self._thread = PeriodicThread(self.take, self.interval, self.name)
        self._thread.start()

    def start(self) -> Periodic:
        self.take()
        self._start_thread()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
        self.take()
        if self.finish is not None:
            self.finish()

    def __enter__(self) -> Periodic:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> Periodic:
        import asyncio

        await asyncio.to_thread(self.take)
        self._start_thread()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        import asyncio

        if self._thread is not None:
            self._thread.request_stop()
            await asyncio.to_thread(self._thread.join)
        await asyncio.to_thread(self.take)
        if self.finish is not None:
            self.finish()
