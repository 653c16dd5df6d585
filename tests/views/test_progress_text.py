"""Progress as text bars in a terminal."""

from __future__ import annotations

import io

import pytest

from kernel_cluster.diagnostics.queries.progress_text import (
    TextProgress,
    bar,
    format_bars,
    summarize,
)
from kernel_cluster.jupyter.notebook import progress

from .fakes import Clock, FakeSource


def test_bars_split_done_erred_running_waiting():
    t = summarize({"memory": 5, "erred": 1, "processing": 2, "waiting": 2, "released": 0})
    assert t == {"done": 5, "erred": 1, "running": 2, "waiting": 2, "total": 10}
    assert bar(t, 20) == "##########xx>>>>...."
    lines = format_bars({"inc": {"memory": 3, "waiting": 1}, "a-long-prefix": {"erred": 2}}, 60)
    assert lines[0].startswith("inc            [") and lines[0].endswith("3 / 4")
    assert lines[1].endswith("2 / 2  2 erred")
    assert lines[2].startswith("total") and "5 / 6" in lines[2]
    assert {len(line.split("]")[0]) for line in lines} == {len(lines[0].split("]")[0])}  # aligned
    assert all(len(line) <= 60 for line in lines)
    assert format_bars({}) == ["No tasks"]


class Stepper:
    """Advances the fake cluster one step each time the bars wait."""

    def __init__(self, source: FakeSource, steps: list[dict]) -> None:
        self.source, self.steps = source, steps

    def __call__(self, _seconds: float) -> None:
        if self.steps:
            self.source.prefixes = self.steps.pop(0)


def test_redraws_in_place_on_a_terminal_until_done():
    source = FakeSource()
    source.prefixes = {"old": {"memory": 9}, "inc": {"waiting": 4}}
    out = io.StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    steps = [
        {"old": {"memory": 9}, "inc": {"memory": 2, "processing": 2}},
        {"old": {"memory": 9}, "inc": {"memory": 4}},
    ]
    text = TextProgress(source, file=out, width=50, wait=Stepper(source, steps)).run()
    assert text.splitlines() == format_bars({"inc": {"memory": 4}}, 50)  # "old" was done already
    drawn = out.getvalue()
    assert drawn.count("\x1b[1F") == 2  # back up one line before each redraw
    assert "(2 running)" in drawn


def test_writes_only_the_final_state_into_a_file():
    source = FakeSource()
    source.prefixes = {"inc": {"waiting": 2}}
    out = io.StringIO()
    steps = [{"inc": {"processing": 2}}, {"inc": {"memory": 2}}]
    TextProgress(source, file=out, width=40, wait=Stepper(source, steps)).run()
    assert "\x1b" not in out.getvalue()
    assert out.getvalue().splitlines() == format_bars({"inc": {"memory": 2}}, 40)


def test_gives_up_after_the_timeout():
    source, clock = FakeSource(), Clock()
    source.prefixes = {"inc": {"waiting": 2}}

    def wait(seconds: float) -> None:
        clock.t += seconds

    out = io.StringIO()
    text = TextProgress(source, file=out, timeout=1.0, interval=0.25, clock=clock, wait=wait).run()
    assert "0 / 2" in text and clock.t == pytest.approx(101.0)


def test_progress_in_a_terminal_is_text(capsys):
    source = FakeSource()
    source.prefixes = {"inc": {"memory": 3}}
    assert "3 / 3" in progress(source, width=40)
    assert "3 / 3" in capsys.readouterr().out


def test_progress_widget_shows_text_too(capsys):
    pytest.importorskip("anywidget")
    from kernel_cluster.jupyter.widgets import Progress

    source = FakeSource()
    source.prefixes = {"inc": {"memory": 1, "erred": 1}}
    w = Progress(source, autostart=False)
    assert "2 / 2  1 erred" in w.show_text(width=40)
    assert "1 erred" in capsys.readouterr().out


def test_tasks_with_no_worker_count_as_waiting():
    """Issue 32.2's state no-worker: such tasks wait, for a worker that may join."""
    from kernel_cluster.diagnostics.queries.progress_text import summarize

    assert summarize({"no-worker": 2, "queued": 1})["waiting"] == 3


def test_released_tasks_count_as_done():
    """A finished pipeline whose intermediate results were released is 61/61 done
    (the trial's span showed 1/61)."""
    t = summarize({"memory": 1, "released": 60, "waiting": 0})
    assert (t["done"], t["waiting"], t["total"]) == (61, 0, 61)
