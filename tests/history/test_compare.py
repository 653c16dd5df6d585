"""Comparing two runs: the table, its order and normalisations, the verdict, and how
references resolve, on plain data (a fake source for live spans, a real history file)."""

from __future__ import annotations

import math

import pytest

from kernel_cluster.diagnostics.history import settings as history_settings
from kernel_cluster.diagnostics.history.compare import COLUMNS, compare, comparison
from kernel_cluster.diagnostics.history.recorder import Recorder
from kernel_cluster.diagnostics.history.stored import HistoryOff, load
from tests.history.helpers import finished
from tests.views.fakes import FakeSource

A = {("parse", "thread-cpu"): 10.0, ("parse", "thread-noncpu"): 1.0, ("load", "thread-cpu"): 5.0}
B = {("parse", "thread-cpu"): 10.2, ("parse", "thread-noncpu"): 15.1, ("load", "thread-cpu"): 5.1}


@pytest.fixture
def history(tmp_path, monkeypatch):
    """A history file holding what ``keep(*records)`` stored."""
    monkeypatch.setattr(history_settings, "_override", {"path": tmp_path / "h.sqlite"})
    source = FakeSource()
    rec = Recorder(source, kind="embedded", cluster="c")

    def keep(*records):
        source.finished.extend(records)
        assert rec.flush()

    yield keep
    rec.close()


def run(span_id, name=("etl",), seconds=A, wall=25.0, tasks=None, stop=None):
    stop = 1000.0 + wall if stop is None else stop
    return finished(
        span_id,
        name,
        seconds=seconds,
        start=stop - wall,
        stop=stop,
        tasks=tasks or {"parse": 100, "load": 10},
    )


def test_the_slower_function_and_activity_rank_first_with_a_one_line_verdict(history):
    history(run("a", seconds=A, wall=25.0, stop=100.0), run("b", seconds=B, wall=40.5, stop=200.0))
    table = compare("a", "b", None)
    assert list(table.columns) == COLUMNS
    first = table.iloc[0]
    assert (first.function, first.activity, first.unit) == ("parse", "thread-noncpu", "seconds")
    assert first.a == 1.0 and first.b == 15.1
    assert first.delta == pytest.approx(14.1) and first.ratio == pytest.approx(15.1)
    assert first.a_tasks == first.b_tasks == 100 and first.a_bytes == first.b_bytes == 800
    assert first.a_per_task == pytest.approx(0.01) and first.b_per_wall == pytest.approx(
        15.1 / 40.5
    )
    assert list(abs(table.delta)) == sorted(abs(table.delta), reverse=True)
    assert table.attrs["verdict"] == (
        "wall +62%: `parse` thread-noncpu +14.1 s; everything else within 5%"
    )
    assert table.attrs["a"]["id"] == "a" and table.attrs["b"]["wall"] == 40.5


def test_a_run_with_twice_the_data_is_judged_per_task(history):
    double = {k: 2 * v for k, v in A.items()}
    history(
        run("a", seconds=A, wall=25.0, stop=100.0),
        run("b", seconds=double, wall=50.0, tasks={"parse": 200, "load": 20}, stop=200.0),
    )
    table = compare("a", "b", None)
    assert table.attrs["verdict"] == (
        "wall +100% for 220 tasks instead of 110; per task: every function and activity within 5%"
    )
    assert (table.delta_per_task.abs() < 1e-12).all() and (table.delta > 0).all()


def test_units_order_and_the_numbers_of_a_function_only_one_side_ran(history):
    history(
        run("a", seconds={("parse", "thread-cpu"): 1.0}, tasks={"parse": 1}, stop=100.0),
        run("b", seconds={("new", "thread-cpu"): 2.0}, tasks={"new": 4}, stop=200.0),
    )
    table = compare("a", "b", None, unit=None)
    assert list(dict.fromkeys(table.unit)) == ["seconds", "bytes", "count"]
    new = table[(table.function == "new") & (table.activity == "thread-cpu")].iloc[0]
    assert new.a == 0 and new.b == 2.0 and math.isinf(new.ratio) and math.isnan(new.a_per_task)
    tasks = table[(table.unit == "count") & (table.function == "new")].iloc[0]
    assert (tasks.a, tasks.b) == (0, 4)
    with pytest.raises(ValueError, match="unit='minutes'"):
        compare("a", "b", None, unit="minutes")


def test_name_at_minus_k_counts_back_and_skips_the_other_side(history):
    history(*(run(f"e{i}", stop=100.0 + i) for i in range(3)))
    c = comparison("etl@-1", "e2", None)
    assert (c.a.id, c.b.id) == ("e1", "e2")  # the latest other than b
    c = comparison("etl@-2", "etl@-1", None)  # both counted back: no skipping
    assert (c.a.id, c.b.id) == ("e1", "e2")
    c = comparison("etl", "etl@-1", None)  # a plain name: the latest
    assert (c.a.id, c.b.id) == ("e2", "e1")
    assert load("etl@-3").id == "e0"
    with pytest.raises(ValueError, match="etl@-1"):
        comparison("etl@2", "e2", None)
    with pytest.raises(KeyError, match="latest names stored: 'etl'"):
        comparison("nothing@-1", "e2", None)


def test_live_spans_come_first_and_are_read_through_the_source(history):
    history(run("stored-1", stop=100.0))
    source = FakeSource()
    live = run("live-1", seconds=B, wall=40.5, stop=300.0).span
    source.span_list.append(live)
    c = comparison("etl@-1", "etl", source)
    assert (c.a.where, c.a.id) == ("history", "stored-1")
    assert (c.b.where, c.b.id) == ("live", "live-1")
    assert c.table().iloc[0].function == "parse"
    # once the live span is stored too, etl@-1 still means the one before it
    history(run("live-1", seconds=B, wall=40.5, stop=300.0))
    assert comparison("etl@-1", "etl", source).a.id == "stored-1"
    with pytest.raises(KeyError, match="No live span has that name either"):
        comparison("etl", "nope", source)


def test_with_the_history_off_live_spans_still_compare(monkeypatch):
    monkeypatch.setattr(history_settings, "_override", {"path": None})
    source = FakeSource()
    source.span_list += [run("x", wall=25.0).span, run("y", name=("other",), wall=30.0).span]
    assert comparison("x", "other", source).b.id == "y"
    with pytest.raises(HistoryOff, match="history is off"):
        comparison("etl@-1", "x", source)
    with pytest.raises(KeyError, match="history is off"):
        comparison("missing", "x", source)


def test_a_stored_run_reads_like_a_live_client(history, tmp_path):
    child = finished("c", ("etl", "load"), parent="r", root="r", seconds=A)
    history(child, run("r", seconds=A))
    stored = load("r")
    frame = stored.fine_metrics()
    assert set(frame.columns) == {"context", "span", "function", "activity", "unit", "value"}
    assert frame.value.sum() == pytest.approx(sum(A.values()))
    tree = stored.spans()
    assert {s.id for s in tree} == {"r", "c"} and tree["r"].children == ("c",)
    assert tree["c"].parent == "r" and tree.to_pandas().tasks.tolist()
    assert load("c").spans()["c"].children == ()
    assert stored.context["kind"] == "embedded" and stored.tasks == 110


def test_verdict_names_at_most_three_changes(history):
    a = {(f"f{i}", "thread-cpu"): 1.0 for i in range(6)}
    b = {(f"f{i}", "thread-cpu"): 1.0 + (i + 1) for i in range(6)}
    history(run("a", seconds=a, stop=100.0), run("b", seconds=b, stop=200.0))
    verdict = comparison("a", "b", None).verdict
    assert verdict == (
        "wall +0%: `f5` thread-cpu +6.0 s, `f4` thread-cpu +5.0 s, `f3` thread-cpu +4.0 s; "
        "2 more changes over 5%"
    )  # f0's +1 s is under 5% of the larger run's 27 s


def test_idle_time_comes_after_the_functions_of_its_unit(history):
    a = {("f", "thread-cpu"): 1.0, (None, "idle"): 10.0}
    b = {("f", "thread-cpu"): 2.0, (None, "idle"): 1.0}
    history(run("a", seconds=a, stop=100.0), run("b", seconds=b, stop=200.0))
    table = compare("a", "b", None, unit=None)
    seconds = table[table.unit == "seconds"]
    assert seconds.function.tolist()[0] == "f" and seconds.function.isna().tolist()[-1]
