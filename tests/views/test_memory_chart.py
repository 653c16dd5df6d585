"""MemorySampler's charts: live while sampling, interactive from plot(), pandas without."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("bqplot")

import bqplot

from kernel_cluster.jupyter import memory_chart as memory_module
from kernel_cluster.jupyter.memory_chart import MemoryChart, MemorySampler

from ..engine.helpers import wait_for
from .fakes import Clock, StreamSource


class FakeClient:
    def __init__(self) -> None:
        self.diagnostics = StreamSource()


def test_live_chart_follows_the_samples_at_a_bounded_rate(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    client = FakeClient()
    ms = MemorySampler(live=True)
    with ms.sample("run 1", client=client, interval=0.01):
        client.diagnostics.mem["process"] = 2**20 * 300
        # the sampling thread takes a sample every 10 ms
        wait_for(lambda: len(ms.samples["run 1"]) >= 5, what="five memory samples")
    (figure,) = shown
    assert isinstance(figure, bqplot.Figure) and figure is ms.chart.figure
    (line,) = figure.marks
    assert list(line.labels) == ["run 1"]
    # the last sample always shows, whatever the rate bound skipped
    assert len(line.y) == len(ms.samples["run 1"]) and line.y[-1] == 300.0
    assert ms.chart.updates < len(ms.samples["run 1"]) + 1
    with ms.sample("run 2", client=client, interval=0.01):
        pass
    assert len(shown) == 1  # one chart per sampler, one line per label
    assert [list(m.labels) for m in figure.marks] == [["run 1"], ["run 2"]]


def test_chart_update_is_rate_bounded():
    clock = Clock()
    samples = {"a": [(0.0, 2**20)]}
    chart = MemoryChart(samples, align=True, clock=clock)
    samples["a"].append((1.0, 2**21))
    assert not chart.update(samples)  # too soon
    clock.t += 0.3
    assert chart.update(samples)
    (line,) = chart.figure.marks
    assert list(line.x) == [0.0, 1.0] and list(line.y) == [1.0, 2.0]


def test_plot_is_bqplot_in_a_notebook_and_pandas_elsewhere(monkeypatch, request):
    ms = MemorySampler(live=False)
    ms.samples = {"a": [(10.0, 2**20), (11.0, 2**21)], "b": [(20.0, 2**22)]}
    figure = ms.plot(backend="bqplot", align=True)
    assert isinstance(figure, bqplot.Figure)
    assert isinstance(figure.axes[0].scale, bqplot.LinearScale)
    assert {m.labels[0] for m in figure.marks} == {"a", "b"}
    assert isinstance(ms.plot(backend="bqplot").axes[0].scale, bqplot.DateScale)

    # pandas: through pandas' plotting backend, kwargs passed on
    calls = []
    backend = types.ModuleType("fake_plotting_backend")
    backend.plot = lambda data, kind, **kw: calls.append((list(data.columns), kind, kw)) or "drawn"
    monkeypatch.setitem(sys.modules, "fake_plotting_backend", backend)
    import pandas as pd

    previous = pd.get_option("plotting.backend")
    pd.set_option("plotting.backend", "fake_plotting_backend")
    request.addfinalizer(lambda: pd.set_option("plotting.backend", previous))
    assert ms.plot(backend="pandas", title="t") == "drawn"
    assert calls[-1][0] == ["a", "b"] and calls[-1][2]["title"] == "t"
    assert calls[-1][2]["ylabel"] == "Cluster memory (GiB)"  # as Dask labels it

    # automatic: pandas outside a notebook; bqplot in one; pandas there without bqplot
    assert ms.plot() == "drawn"
    monkeypatch.setattr(memory_module, "in_notebook", lambda: True)
    assert isinstance(ms.plot(), bqplot.Figure)
    monkeypatch.setitem(sys.modules, "bqplot", None)  # not installed
    assert ms.plot() == "drawn"
    with pytest.raises(ValueError, match="backend"):
        ms.plot(backend="svg")


def test_no_live_chart_outside_a_notebook():
    client = FakeClient()
    ms = MemorySampler()
    with ms.sample("quiet", client=client, interval=0.05):
        pass
    assert ms.chart is None and ms.samples["quiet"]


def test_the_y_axis_starts_at_zero_so_a_flat_series_has_distinct_ticks():
    """Issue 28: a cluster at rest (109.2 MiB, give or take a few KiB) got a y range so
    narrow that bqplot's ticks rounded to the same label (109.2, 109.2, 109, 109 MiB)."""
    flat = {"rest": [(float(t), 109 * 2**20 + 4096 * (t % 3)) for t in range(20)]}
    chart = MemoryChart(flat, align=True)
    assert chart.y.min == 0.0
