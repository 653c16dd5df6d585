"""ProgressBar: the text bar, the minimum, errors, and the notebook's widget hook."""

from __future__ import annotations

import io
import re
import threading
from operator import add

import pytest

from kernel_cluster import Callback, ProgressBar, get_sync
from kernel_cluster.local_diagnostics import progress_bar
from kernel_cluster.local_diagnostics.progress_bar import format_time
from tests.engine.helpers import FileEvent, wait_for

DSK = {"a": (add, 1, 2), "b": (add, 3, "a"), "c": (add, "a", "b")}
LINE = re.compile(r"\[([# ]{40})\] \| +(\d+)% Completed \| (\d+\.\d) s")


def timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ProgressBar"]


def last_line(text: str) -> str:
    return text.split("\r")[-1]


def test_text_bar_ends_with_one_full_line(client, capsys):
    with ProgressBar():
        assert client.get(DSK, "c") == 9
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one final line
    m = LINE.fullmatch(last_line(out).rstrip("\n"))
    assert m is not None, out
    assert m.group(1) == "#" * 40 and m.group(2) == "100"
    assert not timers()


def wait_then(event, value):
    assert event.wait(30), "the test never let this task go"
    return value


def test_redraws_while_running_then_completes(client, tmp_path):
    out = io.StringIO()
    event = FileEvent(tmp_path / "go")
    dsk = {"a": (add, 1, 2), "b": (wait_then, event, "a")}
    done = threading.Event()

    def run():
        with ProgressBar(dt=0.01, width=10, out=out):
            client.get(dsk, "b")
        done.set()

    t = threading.Thread(target=run)
    t.start()
    try:
        # half the tasks done: the bar shows it while the other waits
        wait_for(lambda: "[#####     ] |  50% Completed" in out.getvalue(), 10, "a 50% bar")
    finally:
        event.set()
        t.join(30)
    assert done.is_set()
    assert last_line(out.getvalue()).startswith("[##########] | 100% Completed | ")


def test_nothing_below_the_minimum():
    out = io.StringIO()
    with ProgressBar(minimum=60, out=out):
        get_sync(DSK, "c")
    assert out.getvalue() == ""
    assert not timers()


def fail(x):
    raise ValueError("no")


def test_after_an_error_the_bar_stops_short_and_its_thread_ends(client):
    out = io.StringIO()
    dsk = {"a": (add, 1, 2), "b": (fail, "a"), "c": (add, "b", 1)}
    with pytest.raises(ValueError), ProgressBar(out=out):
        client.get(dsk, "c")
    line = last_line(out.getvalue())
    assert line.endswith("\n") and "100%" not in line  # 1 of 3 tasks finished
    assert " 33% Completed" in line
    assert not timers()


def test_after_a_keyboard_interrupt_its_thread_ends(client):
    def interrupt(*args):
        raise KeyboardInterrupt

    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt), ProgressBar(out=out), Callback(posttask=interrupt):
        client.get(DSK, "c")
    assert not timers()
    assert out.getvalue().endswith("\n")


def test_register_shows_a_bar_for_each_computation(client):
    out = io.StringIO()
    bar = ProgressBar(out=out)
    bar.register()
    try:
        client.get(DSK, "c")
        get_sync(DSK, "c")
    finally:
        bar.unregister()
    assert out.getvalue().count("100% Completed") == 2
    client.get(DSK, "c")
    assert out.getvalue().count("100% Completed") == 2


def test_in_a_notebook_the_widget_shows_instead(client, monkeypatch):
    shown: list = []

    def display(c):
        shown.append(c)
        return lambda: shown.append("stopped")

    monkeypatch.setattr(progress_bar, "progress_bar_widget", display)
    out = io.StringIO()
    with ProgressBar(out=out):
        client.get(DSK, "c")
        get_sync(DSK, "c")  # no client: text
    assert shown == [client, "stopped"]
    assert out.getvalue().count("100% Completed") == 1


def test_outside_a_notebook_the_widget_is_not_shown(client):
    assert progress_bar.progress_bar_widget(client) is None


def test_format_time():
    assert format_time(1.23) == "1.2 s"
    assert format_time(125) == "2min 5.0 s"
    assert format_time(3725) == "1hr 2min 5.0 s"
    with pytest.raises(ValueError):
        ProgressBar(width=0)
