"""The span tree on its own: no cluster, times given by hand."""

from __future__ import annotations

import pytest

from kernel_cluster.core.scheduler_tasks import TaskGroup, TaskPrefix
from kernel_cluster.core.spans import Span, SpanTree


def ann(*pairs: tuple[str, str]) -> dict:
    return {"name": tuple(n for n, _ in pairs), "ids": tuple(i for _, i in pairs)}


def group(span: Span, name: str, **states) -> TaskGroup:
    g = TaskGroup(name, TaskPrefix(name), span.id)
    for state, n in states.items():
        g.states[state] = n
    span.groups.add(g)
    return g


@pytest.fixture
def tree() -> SpanTree:
    now = [100.0]
    t = SpanTree(now=lambda: now[0])
    t.now_box = now  # type: ignore[attr-defined]
    t.nthreads_changed(0.0, 4)
    return t


def test_nested_annotation_creates_each_level_once(tree):
    a = ("Alice's workflow", "a1")
    load = tree.observe(ann(a, ("data load", "l1")), time=1.0)
    prep = tree.observe(ann(a, ("ML preprocessing", "p1")), time=2.0)
    train = tree.observe(ann(a, ("Model training", "t1")), time=3.0)
    assert sorted(s.name for s in tree.spans.values()) == [
        ("Alice's workflow",),
        ("Alice's workflow", "ML preprocessing"),
        ("Alice's workflow", "Model training"),
        ("Alice's workflow", "data load"),
    ]
    root = tree.spans["a1"]
    assert tree.root_spans == [root]
    assert root.children == [load, prep, train]
    assert load.parent is root and load.enqueued == 1.0 and root.enqueued == 1.0
    assert load.annotation == ann(a, ("data load", "l1"))
    assert list(root.traverse_spans()) == [root, load, prep, train]


def test_same_tags_twice_are_two_spans(tree):
    first = tree.observe(ann(("x", "1")), time=0.0)
    second = tree.observe(ann(("x", "2")), time=0.0)
    assert first is not second
    assert tree.spans_search_by_name[("x",)] == [first, second]


def test_default_span_stays_open_until_its_tasks_finish(tree):
    d1 = tree.observe(None, time=0.0)
    g = group(d1, "inc", processing=2)
    assert tree.observe(None, time=1.0) is d1
    g.states["processing"] = 0
    g.states["memory"] = 2
    d2 = tree.observe(None, time=2.0)
    assert d2 is not d1 and d2.name == ("default",)
    # work recomputed on the old span makes it not done again
    g.states["waiting"] = 1
    assert not d1.done


def test_subtree_properties_add_children_to_parent(tree):
    root = tree.observe(ann(("w", "r")), time=0.0)
    child = tree.observe(ann(("w", "r"), ("load", "c")), time=1.0)
    g1 = group(root, "a", memory=2)
    g2 = group(child, "b", memory=3, processing=1)
    g1.nbytes_total, g2.nbytes_total = 10, 5
    g1.all_durations["compute"] = 1.5
    g2.all_durations["compute"] = 0.5
    g2.all_durations["transfer"] = 0.25
    g1.start, g1.stop, g2.start, g2.stop = 2.0, 3.0, 1.5, 4.0
    assert root.states["memory"] == 5 and root.states["processing"] == 1
    assert root.nbytes_total == 15
    assert root.all_durations == {"compute": 2.0, "transfer": 0.25}
    assert root.duration == 2.25
    assert root.start == 1.5
    assert not root.done and root.stop == 100.0  # not done: stop is now
    g2.states["processing"] = 0
    assert root.done and root.stop == 4.0
    assert set(root.traverse_groups()) == {g1, g2}


def test_metrics_go_to_their_span_and_add_up_the_tree(tree):
    root = tree.observe(ann(("w", "r")), time=0.0)
    tree.observe(ann(("w", "r"), ("load", "c")), time=0.0)
    tree.add_metrics(
        {
            ("execute", "r", "f", "thread-cpu", "seconds"): 1.0,
            ("execute", "c", "g", "thread-cpu", "seconds"): 2.0,
            ("execute", "c", "g", "tasks", "count"): 3,
            ("execute", None, None, "idle", "seconds"): 5.0,  # belongs to no span
            ("gather-dep", "network", "bytes"): 100,
        }
    )
    child = tree.spans["c"]
    group(root, "f", memory=1).stop = 1.0  # done at t=1: 4 threads x 1 s
    group(child, "g", memory=1).stop = 1.0
    assert child.cumulative_worker_metrics[("execute", "g", "tasks", "count")] == 3
    parent = root.cumulative_worker_metrics
    assert parent[("execute", "f", "thread-cpu", "seconds")] == 1.0
    assert parent[("execute", "g", "thread-cpu", "seconds")] == 2.0
    # the rest of the 4 thread-seconds it was active is the span's idle share
    assert root.active_cpu_seconds == 4.0
    seconds = sum(v for k, v in parent.items() if k[-1] == "seconds")
    assert seconds == pytest.approx(root.active_cpu_seconds)


def test_nthreads_intervals_follow_workers_joining_and_leaving(tree):
    tree.nthreads_changed(2.0, 8)
    tree.nthreads_changed(3.0, 2)
    span = tree.observe(ann(("w", "r")), time=1.0)
    group(span, "f", memory=1).stop = 4.0
    assert span.nthreads_intervals == [(1.0, 2.0, 4), (2.0, 3.0, 8), (3.0, 4.0, 2)]
    assert span.active_cpu_seconds == 4 + 8 + 2


def test_find_and_merge_by_tags(tree):
    for user in ("Alice", "Bob"):
        tree.observe(ann((f"{user}'s workflow", user), ("data load", f"{user}-l")), 0.0)
        tree.observe(ann((f"{user}'s workflow", user), ("ML preprocessing", f"{user}-p")), 0.0)
    assert [s.id for s in tree.find_by_tags("Alice's workflow")] == ["Alice"]
    assert [s.id for s in tree.find_by_tags("data load")] == ["Alice-l", "Bob-l"]
    # a matching parent covers its children: they are not listed again
    assert [s.id for s in tree.find_by_tags("Alice's workflow", "data load")] == [
        "Alice",
        "Bob-l",
    ]
    merged = tree.merge_by_tags("data load")
    assert [s.id for s in merged.children] == ["Alice-l", "Bob-l"]
    assert {s.id for s in tree.merge_all().traverse_spans()} >= set(tree.spans)
    with pytest.raises(ValueError, match="nothing matched"):
        tree.merge_by_tags("nope")


def test_merge_counts_overlapping_time_once_and_skips_gaps(tree):
    a = tree.observe(ann(("a", "a")), time=0.0)
    b = tree.observe(ann(("b", "b")), time=1.0)
    c = tree.observe(ann(("c", "c")), time=10.0)
    group(a, "x", memory=1).stop = 2.0  # 0..2
    group(b, "y", memory=1).stop = 3.0  # 1..3, overlaps a
    group(c, "z", memory=1).stop = 11.0  # 10..11, after a gap
    merged = Span.merge(a, b, c)
    assert merged.active_cpu_seconds == 4 * (3.0 + 1.0)
    assert merged.stop == 11.0


# -- the whole tree's numbers at once (issue 32, scale of spans) --------------------------


def _random_tree(tree: SpanTree, seed: int, n: int = 60) -> None:
    import random

    from kernel_cluster.core.scheduler_tasks import ALL_STATES

    rng = random.Random(seed)
    paths: list[tuple[tuple[str, str], ...]] = [()]
    for i in range(n):
        parent = rng.choice(paths) if rng.random() < 0.8 else paths[-1]
        path = (*parent, (f"t{rng.randrange(8)}", f"id{i}"))
        paths.append(path)
        span = tree.observe(ann(*path), time=float(i))
        for j in range(rng.randrange(3)):
            g = group(span, f"g{i}-{j}")
            for state in ALL_STATES:
                g.states[state] = rng.choice([0, 0, 1, 3])
            if rng.random() < 0.8:
                g.add_startstops([("compute", 1.0 + i, 2.0 + i + rng.random())])
            g.nbytes_total = rng.randrange(1000)
        if rng.random() < 0.7:
            span.add_metrics(("execute", "inc", "thread-cpu", "seconds"), rng.random())
            span.add_metrics(("execute", "inc", "bytes-ish", "bytes"), rng.randrange(9))
    # default spans, finished one after another: all but the last fold into one, whose
    # own numbers are sums of groups let go (live ones kept) rather than its groups'
    tree.keep_default_spans = 1
    for i in range(4):
        default = tree.observe(None, time=0.5 + i)
        g = group(default, f"d{i}", forgotten=2 if i % 2 else 0, memory=0 if i % 2 else 1)
        g.add_startstops([("compute", 0.5 + i, 1.0 + i)])
        g.nbytes_total = 10 * i
        if i % 2 == 0:
            g.n_live = 1  # a result still held: the group stays as it is in the fold
        default.add_metrics(("execute", "inc", "thread-cpu", "seconds"), 0.25)
    tree.observe(None, time=5.0)
    assert tree.folded is not None and tree.folded.folded >= 2


@pytest.mark.parametrize("seed", range(6))
def test_subtree_totals_are_what_each_span_says_of_itself(tree, seed):
    from kernel_cluster.core.span_totals import subtree_totals

    _random_tree(tree, seed)
    tree.nthreads_changed(20.0, 2)
    totals = subtree_totals(tree.spans.values(), tree.now())
    assert set(totals) == set(tree.spans)
    for span_id, span in tree.spans.items():
        t = totals[span_id]
        assert (t.start, t.stop, t.done) == (span.start, span.stop, span.done), span
        assert t.all_durations == pytest.approx(dict(span.all_durations))
        assert (t.nbytes_total, t.states) == (span.nbytes_total, span.states)
        assert t.active_cpu_seconds == pytest.approx(span.active_cpu_seconds)
        assert t.metrics == pytest.approx(span.cumulative_worker_metrics)
    # one subtree alone (a single span's snapshot) gives the same as the whole tree
    some = next(iter(tree.spans.values()))
    alone = subtree_totals(some.traverse_spans(), tree.now())[some.id]
    assert alone.metrics == pytest.approx(totals[some.id].metrics)


def test_a_chain_of_spans_deeper_than_the_recursion_limit(tree):
    """3,000 nested spans (the issue's): made, found by tag, summed, in steps that do
    not grow with the depth (a chain once recursed, and summed each subtree anew)."""
    import sys

    from kernel_cluster.core.span_totals import subtree_totals

    depth = sys.getrecursionlimit() + 2000
    path: list[tuple[str, str]] = []
    for i in range(depth):
        path.append((f"level-{i}", f"s{i}"))
        tree.observe(ann(*path), time=float(i))
    deepest = tree.spans[f"s{depth - 1}"]
    group(deepest, "leaf", memory=1).add_startstops([("compute", 1.0, 3.0)])
    assert deepest.annotation["ids"][-1] == f"s{depth - 1}"
    assert len(deepest.annotation["ids"]) == depth
    assert [s.id for s in tree.find_by_tags(f"level-{depth - 1}")] == [f"s{depth - 1}"]
    assert [s.id for s in tree.find_by_tags("level-0", "level-5")] == ["s0"]
    totals = subtree_totals(tree.spans.values(), tree.now())
    assert totals["s0"].states["memory"] == 1 and totals["s0"].all_durations == {"compute": 2.0}
    # a submission into the deepest span finds it with one lookup, not the whole path
    looked: list[str] = []
    spans = tree.spans

    class Counting(dict):
        def get(self, key, default=None):
            looked.append(key)
            return super().get(key, default)

    tree.spans = Counting(spans)
    assert tree.observe(ann(*path), time=0.0) is deepest
    assert looked == [f"s{depth - 1}"]
    # nor does it mark the whole path open again (a span's parents are open with it)
    opened: list[str] = []

    class CountingOpen(dict):
        def __setitem__(self, span, value):
            opened.append(span.id)
            super().__setitem__(span, value)

    tree._open = CountingOpen(tree._open)
    assert tree.observe(ann(*path), time=0.0) is deepest
    assert len(opened) <= 1
    assert all(s in tree._open for s in tree.spans.values())


def test_a_span_never_starts_before_it_was_enqueued(tree):
    """A worker process's start time, moved by an estimated clock offset, can land
    microseconds before the scheduler enqueued the span; the span's start is not."""
    span = tree.observe(ann(("load", "l1")), time=10.0)
    g = group(span, "inc", memory=1)
    g.start, g.stop = 9.9999, 10.5
    assert span.start == 10.0 <= span.stop
    g.start = 10.2
    assert span.start == 10.2


# -- the finished-span log (what the run history reads) ------------------------------------


def finish(g: TaskGroup) -> None:
    for state in ("waiting", "queued", "processing"):
        g.states["memory"] += g.states[state]
        g.states[state] = 0


def test_a_span_is_logged_once_done_children_first(tree):
    outer = tree.observe(ann(("etl", "o")), time=0.0)
    inner = tree.observe(ann(("etl", "o"), ("load", "i")), time=0.0)
    g_in = group(inner, "load", processing=3)
    g_out = group(outer, "total", waiting=1)
    nothing = tree.finished_since(0)
    assert nothing.spans == [] and nothing.cursor == 0 and nothing.missed == 0
    finish(g_in)
    first = tree.finished_since(0)
    assert first.spans == [inner] and first.cursor == 1
    finish(g_out)
    second = tree.finished_since(first.cursor)
    assert second.spans == [outer] and second.cursor == 2
    assert tree.finished_since(2).spans == []
    assert tree.finished_since(0).spans == [inner, outer]  # 0: all still kept


def test_both_done_at_once_logs_the_child_first(tree):
    outer = tree.observe(ann(("a", "o")), time=0.0)
    inner = tree.observe(ann(("a", "o"), ("b", "i")), time=0.0)
    gs = [group(inner, "x", processing=1), group(outer, "y", processing=1)]
    for g in gs:
        finish(g)
    assert tree.finished_since(0).spans == [inner, outer]


def test_a_span_given_tasks_again_is_logged_again(tree):
    outer = tree.observe(ann(("etl", "o")), time=0.0)
    load = tree.observe(ann(("etl", "o"), ("load", "l")), time=0.0)
    finish(group(load, "load", processing=1))
    assert tree.finished_since(0).spans == [load, outer]  # done between its children
    compute = tree.observe(ann(("etl", "o"), ("compute", "c")), time=1.0)
    g = group(compute, "compute", processing=1)
    assert tree.finished_since(2).spans == []
    finish(g)
    assert tree.finished_since(2).spans == [compute, outer]


def test_spans_without_tasks_are_not_logged(tree):
    tree.observe(ann(("empty", "e")), time=0.0)
    assert tree.finished_since(0).spans == []


def test_a_reader_that_comes_late_is_told_what_it_missed(tree, monkeypatch):
    from kernel_cluster.core import spans as spans_module

    small = SpanTree(now=lambda: 0.0)
    small._finished = spans_module.FinishedLog(3)
    made = []
    for i in range(5):
        s = small.observe(ann((f"s{i}", f"id{i}")), time=0.0)
        finish(group(s, "x", processing=1))
        small.collect_finished()
        made.append(s)
    late = small.finished_since(0)
    assert late.spans == made[2:] and late.missed == 2 and late.cursor == 5
    assert small.finished_since(1).missed == 1
    assert small.finished_since(99).spans == made[2:]  # a cursor from elsewhere: from 0


def test_a_default_span_that_folds_before_any_read_is_logged_first(tree):
    tree.keep_default_spans = 1
    made = []
    for i in range(4):
        d = tree.observe(None, time=float(i))
        finish(group(d, f"f{i}", processing=1))
        made.append(d)
    assert tree.folded is not None and tree.folded.folded == 2  # two folded already
    # with no reader, folded spans are not kept open: a loop of submit().result() in a
    # session that never reads the log holds a bounded number of spans
    assert all(s not in tree._open for s in made[:2])
    logged = tree.finished_since(0).spans
    assert logged == made  # none lost to the fold, in the order they finished
    assert all(s.id != tree.folded.id for s in logged)


def by_properties(span: Span) -> tuple:
    return (
        span.done,
        span.start,
        span.stop,
        span.all_durations,
        span.nbytes_total,
        span.states,
        span.active_cpu_seconds,
        span.cumulative_worker_metrics,
    )


@pytest.mark.parametrize("finished", [False, True])
def test_a_summary_in_one_pass_reads_as_the_properties(tree, finished):
    """What the run history stores of a span (summarize) is what its properties say,
    unfinished (stop: now) or finished, over a subtree of several groups and prefixes."""
    from kernel_cluster.core.span_summary import summarize

    root = tree.observe(ann(("w", "r")), time=0.5)
    child = tree.observe(ann(("w", "r"), ("load", "c")), time=1.0)
    tree.nthreads_changed(2.0, 6)
    g1 = group(root, "a", memory=2)
    g2 = group(child, "b", memory=3, erred=1, processing=0 if finished else 1)
    g3 = group(child, "a", memory=4)
    for g, (start, stop, nbytes) in zip(
        (g1, g2, g3), ((2.0, 3.0, 10), (1.5, 4.0, 5), (0.0, 0.0, 7)), strict=True
    ):
        g.start, g.stop, g.nbytes_total = start, stop, nbytes
        g.all_durations["compute"] = stop - start
    g2.all_durations["transfer"] = 0.25
    root.add_metrics(("execute", "a", "thread-cpu", "seconds"), 1.0)
    child.add_metrics(("execute", "a", "thread-cpu", "seconds"), 0.5)
    child.add_metrics(("execute", "b", "output", "bytes"), 99)
    for span in (root, child):
        s = summarize(span)
        assert tuple(s[:8]) == by_properties(span)
    s = summarize(root)
    assert s.tasks_by_prefix == {"a": {"memory": 6}, "b": {"memory": 3, "erred": 1}} | (
        {} if finished else {"b": {"memory": 3, "erred": 1, "processing": 1}}
    )
    assert s.nbytes_by_prefix == {"a": 17, "b": 5}
    empty = tree.observe(ann(("e", "e1")), time=3.0)
    assert tuple(summarize(empty)[:8]) == by_properties(empty)


def test_a_capture_is_a_copy_summed_later(tree):
    """The run history copies a finished span's numbers on the engine's loop and sums
    them on its own thread: what happens to the span after the copy (its tasks
    forgotten, a late heartbeat's metrics, a new group) does not change the sum."""
    from kernel_cluster.core.span_summary import capture, summarize, summarize_capture

    span = tree.observe(ann(("w", "r")), time=0.5)
    g = group(span, "a", memory=2)
    g.start, g.stop, g.nbytes_total = 1.0, 2.0, 10
    g.all_durations["compute"] = 1.0
    span.add_metrics(("execute", "a", "thread-cpu", "seconds"), 1.0)
    before = summarize(span)
    copied = capture(span)
    g.states["memory"], g.states["forgotten"] = 0, 2
    g.all_durations["transfer"] = 0.5
    g.nbytes_total = 99
    span.add_metrics(("execute", "a", "thread-cpu", "seconds"), 5.0)
    span.add_metrics(("execute", "b", "output", "bytes"), 7)
    group(span, "b", processing=1)
    tree.nthreads_changed(1.5, 8)
    assert summarize_capture(copied) == before
    assert summarize(span) != before
