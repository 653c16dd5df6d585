"""``MemorySampler`` for notebooks: a live chart while sampling, an interactive one
from ``plot()``.

    from kernel_cluster import MemorySampler
    ms = MemorySampler()
    with ms.sample("run 1"):      # in a notebook: a chart appears and grows
        client.gather(client.map(load, files))
    ms.plot(align=True)           # a bqplot figure: drag to pan, wheel to zoom

The chart is a bqplot figure (``pip install kernel-cluster[widgets]``), one line per
label. Outside a notebook, or without bqplot, ``plot()`` is the pandas chart of
``kernel_cluster.diagnostics.queries.memory_sampler.PlainMemorySampler`` and sampling shows
nothing. The sampling thread updates the live chart at most four times a second;
the last sample of a block always shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..diagnostics.queries.memory_sampler import PlainMemorySampler
from .notebook import in_notebook

COLORS = ["#3b7dd8", "#e15f99", "#2e9e4f", "#f28e2b", "#8e6cc4", "#2bb3c0", "#a0785a", "#c2b830"]
MIN_INTERVAL = 0.25


def has_bqplot() -> bool:
    try:
        import bqplot  # noqa: F401
    except ImportError:
        return False
    return True


class MemoryChart:
    """A bqplot figure of ``label -> [(time, bytes)]`` series; ``update`` redraws it
    (at most every ``min_interval`` seconds unless forced)."""

    def __init__(
        self,
        samples: Mapping[str, list[tuple[float, int]]],
        align: bool = False,
        title: str = "Cluster memory",
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ):
        import bqplot as bq

        self.align = align
        self.min_interval = min_interval
        self.clock = clock
        self.last = -float("inf")
        self.updates = 0
        self._lock = threading.Lock()
        self.x = bq.LinearScale() if align else bq.DateScale()
        # from 0: a flat series (a cluster at rest) would otherwise get a range so
        # narrow that its ticks round to the same label (109.2, 109.2, 109 MiB)
        self.y = bq.LinearScale(min=0.0)
        x_axis = bq.Axis(
            scale=self.x,
            label="seconds from start" if align else "time",
            tick_format=".3~g" if align else "%H:%M:%S",
        )
        y_axis = bq.Axis(scale=self.y, side="left", label="memory (MiB)", tick_format=".4~g")
        self.lines: dict[str, Any] = {}
        self.figure = bq.Figure(
            marks=[],
            axes=[x_axis, y_axis],
            title=title,
            legend_location="bottom-right",
            interaction=bq.interacts.PanZoom(scales={"x": [self.x], "y": [self.y]}),
            layout={"width": "100%", "height": "320px"},
            fig_margin={"top": 40, "bottom": 40, "left": 72, "right": 20},
        )
        self.update(samples, force=True)

    def _columns(self, series: list[tuple[float, int]]) -> tuple[Any, Any]:
        import numpy as np

        times = np.array([t for t, _ in series], dtype=float)
        mib = np.array([v for _, v in series], dtype=float) / 2**20
        if self.align:
            return times - (times[0] if len(times) else 0.0), mib
        return (times * 1e3).astype("datetime64[ms]"), mib

    def update(self, samples: Mapping[str, list[tuple[float, int]]], force: bool = False) -> bool:
        """Redraw from ``samples``; False when skipped by the rate bound."""
        import bqplot as bq

        with self._lock:
            now = self.clock()
            if not force and now - self.last < self.min_interval:
                return False
            self.last = now
            added = False
            for label, series in list(samples.items()):
                if not series:
                    continue
                x, y = self._columns(list(series))
                line = self.lines.get(label)
                if line is None:
                    color = COLORS[len(self.lines) % len(COLORS)]
                    line = bq.Lines(
                        x=x,
                        y=y,
                        scales={"x": self.x, "y": self.y},
                        labels=[label],
                        colors=[color],
                        display_legend=True,
                        stroke_width=2,
                    )
                    self.lines[label] = line
                    added = True
                else:
                    with line.hold_sync():
                        line.x, line.y = x, y
            if added:
                self.figure.marks = list(self.lines.values())
            self.updates += 1
            return True


class MemorySampler(PlainMemorySampler):
    """``diagnostics.memory_sampler.MemorySampler`` with notebook charts.

    ``live``: show a chart that grows while sampling (None: in a notebook, when
    bqplot is installed)."""

    def __init__(self, live: bool | None = None) -> None:
        super().__init__()
        self.live = live
        self.chart: MemoryChart | None = None

    def _wants_live(self) -> bool:
        if self.live is None:
            return in_notebook() and has_bqplot()
        return self.live

    def sample(self, label: str | None = None, **kwargs: Any) -> Any:
        sampling = super().sample(label, **kwargs)
        if self._wants_live() and self.chart is None:
            self.chart = MemoryChart(self.samples, title="Cluster memory (sampling)")
            from IPython.display import display

            display(self.chart.figure)
        return sampling

    def _sampled(self, label: str, point: tuple[float, int]) -> None:
        if self.chart is not None:
            self.chart.update(self.samples)

    def _finished(self, label: str) -> None:
        if self.chart is not None:
            self.chart.update(self.samples, force=True)

    def plot(self, *, align: bool = False, backend: str | None = None, **kwargs: Any) -> Any:
        """The samples as a chart. ``backend``: ``"bqplot"`` (an interactive figure:
        drag to pan, wheel to zoom), ``"pandas"`` (``kwargs`` go to
        ``DataFrame.plot``), or None: bqplot in a notebook when installed, else pandas.
        ``align=True``: each series from its own first sample, to compare runs."""
        if backend is None:
            backend = "bqplot" if in_notebook() and has_bqplot() else "pandas"
        if backend == "bqplot":
            if not has_bqplot():
                raise ImportError(
                    "plot(backend='bqplot') needs bqplot: `pip install kernel-cluster[widgets]`"
                    " (or bqplot); plot(backend='pandas') draws with matplotlib instead."
                )
            return MemoryChart(self.samples, align=align, **kwargs).figure
        if backend != "pandas":
            raise ValueError(f"backend={backend!r}: use 'bqplot', 'pandas' or None.")
        return super().plot(align=align, **kwargs)
