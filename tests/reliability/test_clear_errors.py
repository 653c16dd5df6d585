"""Mistakes get an error that names the problem and the fix, and the engine goes on
working afterwards: no ``Event loop is closed``, no connection closed under the user,
no silent disable, no empty table where a typo was made."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from kernel_cluster import SchedulerPlugin, performance_report
from kernel_cluster.client.client import Client
from kernel_cluster.engine.comm import SerializationError


def inc(x: int) -> int:
    return x + 1


def still_works(client: Client) -> None:
    assert client.submit(inc, 41, pure=False).result(timeout=10) == 42


def test_result_after_the_client_closed(cluster):
    c = Client(cluster)
    f = c.submit(inc, 1)
    assert f.result(timeout=10) == 2
    c.close()
    with pytest.raises(RuntimeError, match=r"is closed.*before client\.close\(\)"):
        f.result()
    with pytest.raises(RuntimeError, match="is closed"):
        c.gather([f])
    del f
    with Client(cluster) as c2:
        still_works(c2)


def test_a_pending_future_of_a_closed_client_says_why_it_was_cancelled(cluster, new_event):
    from kernel_cluster import CancelledError

    c = Client(cluster)
    event = new_event()
    f = c.submit(event.wait, 10)
    c.close()
    event.set()
    with pytest.raises(CancelledError, match=r"was cancelled: Client-\w+ was closed before"):
        f.result(timeout=10)
    with Client(cluster) as c2:
        still_works(c2)


class Counting(SchedulerPlugin):
    def __init__(self) -> None:
        self.started = 0

    def start(self, scheduler) -> None:
        self.started += 1


def test_register_plugin_needs_a_plugin_instance(client):
    with pytest.raises(TypeError, match=r"class Counting.*register_plugin\(Counting\(\)\)"):
        client.register_plugin(Counting)
    with pytest.raises(TypeError, match=r"none of a plugin's methods.*subclass"):
        client.register_plugin(object())
    with pytest.raises(TypeError, match="name must be a str"):
        client.register_plugin(Counting(), name=3)
    plugins = client.cluster.loop_thread.run(lambda: dict(client.cluster.scheduler.plugins.plugins))
    assert not any(isinstance(p, type) or type(p) is object for p in plugins.values())
    plugin = Counting()
    name = client.register_plugin(plugin)
    assert plugin.started == 1
    client.unregister_plugin(name)
    still_works(client)


class DuckPlugin:
    """Not a subclass, and without ``transition``/``transitions``: still a plugin."""

    def __init__(self) -> None:
        self.graphs = 0

    def update_graph(self, scheduler, *, client, keys, **kwargs) -> None:
        self.graphs += 1


def test_a_duck_typed_plugin_is_called_not_switched_off(client):
    plugin = DuckPlugin()
    name = client.register_plugin(plugin)
    try:
        still_works(client)
        assert plugin.graphs == 1
        assert name in client.cluster.loop_thread.run(
            lambda: list(client.cluster.scheduler.plugins.plugins)
        )
    finally:
        client.unregister_plugin(name)


def make_lock():
    return threading.Lock()


def test_run_returning_something_unpicklable(client, processes):
    if not processes:  # nothing to pickle: the object itself comes back
        assert all(type(v) is type(threading.Lock()) for v in client.run(make_lock).values())
        return
    with pytest.raises(SerializationError, match=r"result of client\.run\(make_lock\)"):
        client.run(make_lock)
    assert set(client.run(inc, 1).values()) == {2}
    still_works(client)


def test_bad_timeouts_and_cancel_arguments(client):
    f = client.submit(inc, 1)
    with pytest.raises(TypeError, match=r"timeout='x'.*number of seconds"):
        f.result(timeout="x")
    with pytest.raises(ValueError, match="timeout=-1"):
        f.result(timeout=-1)
    with pytest.raises(TypeError, match=r"cancel\(\) takes a Future.*got int 5"):
        client.cancel(5)
    with pytest.raises(TypeError, match="got str 'inc-1'"):
        client.cancel(["inc-1"])
    assert f.result(timeout=10) == 2
    still_works(client)


def test_nan_keys_are_refused_at_submit_and_get(client):
    with pytest.raises(ValueError, match="NaN"):
        client.submit(inc, 1, key=math.nan)
    with pytest.raises(ValueError, match="NaN"):
        client.submit(inc, 1, key=("x", math.nan))
    with pytest.raises(ValueError, match="NaN"):
        client.map(inc, [1, 2], key=["a", float("nan")])
    with pytest.raises(ValueError, match="NaN"):
        client.get({math.nan: (inc, 1)}, math.nan)
    assert client.submit(inc, 1, key=1.5).result(timeout=10) == 2
    still_works(client)


def negative_seconds() -> None:
    from kernel_cluster import context_meter

    context_meter.digest_metric("wait", -0.5, "seconds")


def negative_bytes() -> None:
    from kernel_cluster import context_meter

    context_meter.digest_metric("read", -10, "bytes")


def negative_other() -> int:
    from kernel_cluster import context_meter

    context_meter.digest_metric("balance", -3, "euros")  # some units may go negative
    return 1


def test_negative_seconds_or_bytes_are_refused(client):
    for fn, unit in ((negative_seconds, "seconds"), (negative_bytes, "bytes")):
        with pytest.raises(ValueError, match=f"got -.* {unit}; a duration or a size cannot"):
            client.submit(fn).result(timeout=10)
    assert client.submit(negative_other).result(timeout=10) == 1
    still_works(client)


def test_fine_metrics_with_an_unknown_unit(client):
    still_works(client)
    with pytest.raises(ValueError, match=r"unit='no such unit'.*'seconds'"):
        client.fine_metrics(unit="no such unit")
    with pytest.raises(ValueError, match="unit='secs'"):
        client.fine_metrics(unit="secs", span="default")
    assert len(client.fine_metrics(unit="seconds")) > 0
    assert len(client.fine_metrics(unit="bytes")) >= 0


def test_task_stream_with_a_negative_count(client):
    still_works(client)
    for bad in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="count="):
            client.task_stream(count=bad)
    assert len(client.task_stream(count=1)) == 1


def test_performance_report_to_an_unwritable_path_fails_before_the_work(client, tmp_path: Path):
    ran = []
    target = tmp_path / "no such dir" / "report.html"
    with (
        pytest.raises(FileNotFoundError, match="does not exist"),
        performance_report(filename=target, client=client),
    ):
        ran.append(client.submit(inc, 1).result(timeout=10))
    assert not ran, "the block ran although its report could not be written"
    with (
        pytest.raises(IsADirectoryError, match="is a directory"),
        performance_report(filename=tmp_path, client=client),
    ):
        ran.append(1)
    assert not ran
    good = tmp_path / "report.html"
    with performance_report(filename=good, client=client):
        still_works(client)
    assert good.stat().st_size > 0


def test_memory_sampler_plot_without_matplotlib(client, monkeypatch):
    import sys

    from kernel_cluster import MemorySampler

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    ms = MemorySampler()
    with ms.sample("run", client=client, interval=0.01):
        still_works(client)
    with pytest.raises(ImportError, match=r"pip install matplotlib.*backend='bqplot'"):
        ms.plot()  # not in a notebook: the pandas chart
    with pytest.raises(ImportError, match=r"pip install matplotlib.*backend='bqplot'"):
        ms.plot(backend="pandas")
    assert len(ms.to_pandas()) > 0
    monkeypatch.setitem(sys.modules, "bqplot", None)
    with pytest.raises(ImportError, match=r"needs bqplot: `pip install kernel-cluster\[widgets\]`"):
        ms.plot(backend="bqplot")


def test_the_widgets_without_anywidget_name_the_extra(client, monkeypatch):
    """A plain ``pip install kernel-cluster`` has no widget libraries: the widgets'
    import says which extra brings them and what works without, instead of
    ``No module named 'anywidget'``."""
    import sys

    monkeypatch.setitem(sys.modules, "anywidget", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "kernel_cluster.jupyter.widgets", raising=False)
    extra = r"pip install 'kernel-cluster\[widgets\]'"
    with pytest.raises(ImportError, match=extra) as caught:
        from kernel_cluster.jupyter.widgets import FineMetrics  # noqa: F401
    assert caught.value.name == "anywidget"
    assert "fine_metrics" in str(caught.value)
    with pytest.raises(ImportError, match=extra):
        client.dashboard()
    assert len(client.fine_metrics()) >= 0  # the table needs no widgets


def test_a_dict_graph_value_that_cannot_travel_is_named():
    """A task that is a plain value, not a call (``{"x": lock}``, or a future put in a
    dict graph given to ``client.get`` with worker processes), made the error report
    itself fail: ``AttributeError: ... has no attribute 'func'`` hid the cause."""
    from kernel_cluster.client.graph_packing import dumps_task
    from kernel_cluster.core.spec import TaskSpec

    with pytest.raises(SerializationError, match=r"the value of task 'x'.*lock"):
        dumps_task("x", TaskSpec(threading.Lock(), frozenset()))
