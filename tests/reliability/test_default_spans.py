"""Default spans stay bounded: a loop of ``submit(...).result()`` makes a default span
per iteration, and finished ones beyond ``keep_default_spans`` fold into one, with
their metrics, counts, durations and thread-seconds summed (nothing lost)."""

from __future__ import annotations

import pytest

from kernel_cluster.client.client import Client
from kernel_cluster.core.scheduler_tasks import TaskGroup, TaskPrefix
from kernel_cluster.core.spans import FOLDED_ID, FoldedSpan, SpanTree
from kernel_cluster.diagnostics.feeds.tables import MetricsFeed, MetricsReader, metric_key
from kernel_cluster.diagnostics.pages.report import _subtract

# -- the span tree on its own: events by hand ---------------------------------------------


def finish_default_span(tree: SpanTree, t: float, prefix: str = "inc", live: int = 0):
    """Observe a submission at ``t`` outside any span; its one task ran t..t+1 and is
    forgotten (``live=0``) or still held; metrics for it arrive as a heartbeat would."""
    span = tree.observe(None, time=t)
    g = TaskGroup(prefix, TaskPrefix(prefix), span.id)
    g.states["forgotten" if not live else "memory"] = 1
    g.n_live = live
    g.add_startstops([("compute", t, t + 1.0)])
    g.nbytes_total = 10
    span.groups.add(g)
    delta = {
        ("execute", span.id, prefix, "thread-cpu", "seconds"): 0.5,
        ("execute", span.id, prefix, "tasks", "count"): 1,
    }
    return span, g, delta


@pytest.fixture
def tree() -> SpanTree:
    t = SpanTree(now=lambda: 1000.0, keep_default_spans=2)
    t.keyed_metrics = {}
    t.nthreads_changed(0.0, 4)
    return t


def feed(tree: SpanTree, delta: dict) -> None:
    """What the scheduler does with a heartbeat's metrics."""
    delta = tree.fold_keys(delta)
    for k, v in delta.items():
        tree.keyed_metrics[k] = tree.keyed_metrics.get(k, 0) + v
    tree.add_metrics(delta)


def test_finished_default_spans_beyond_the_count_fold_into_one(tree):
    spans = []
    for i in range(6):
        span, _, delta = finish_default_span(tree, t=10.0 * i + 1)
        feed(tree, delta)
        spans.append(span)
    tree.observe(None, time=100.0)  # a 7th: the 6th is finished, so it is kept apart
    fold = tree.spans[FOLDED_ID]
    assert isinstance(fold, FoldedSpan)
    # the latest 2 finished and the open one kept; the 4 oldest folded
    assert [s.id for s in tree.root_spans] == [FOLDED_ID, "default-5", "default-6", "default-7"]
    assert set(tree.spans) == {FOLDED_ID, "default-5", "default-6", "default-7"}
    assert tree.spans_search_by_name[("default",)][0] is fold
    assert fold.folded == 4 and fold.name == ("default",) and fold.annotation is None
    assert fold.done and fold.enqueued == 1.0 and fold.start == 1.0 and fold.stop == 32.0
    assert fold.states["forgotten"] == 4 and fold.nbytes_total == 40
    assert fold.all_durations == {"compute": 4.0}
    m = fold.cumulative_worker_metrics
    assert m[("execute", "inc", "thread-cpu", "seconds")] == 2.0
    assert m[("execute", "inc", "tasks", "count")] == 4
    # thread-seconds: 4 spans x 1 s x 4 threads, the gaps between them not counted
    assert fold.active_cpu_seconds == sum(s.active_cpu_seconds for s in spans[:4]) == 16.0
    assert m[("execute", "N/A", "idle or other spans", "seconds")] == 16.0 - 2.0
    # the scheduler's metrics by span id moved to the fold's id: the totals are the same
    km = tree.keyed_metrics
    assert not [k for k in km if k[1] in {s.id for s in spans[:4]}]
    assert km[("execute", FOLDED_ID, "inc", "thread-cpu", "seconds")] == 2.0
    assert sum(v for k, v in km.items() if k[3] == "thread-cpu") == 3.0


def test_totals_over_all_spans_do_not_change_when_spans_fold():
    def run(keep: int) -> SpanTree:
        tree = SpanTree(now=lambda: 1000.0, keep_default_spans=keep)
        tree.keyed_metrics = {}
        tree.nthreads_changed(0.0, 2)
        for i in range(50):
            _, _, delta = finish_default_span(tree, 3.0 * i, prefix=("inc", "dec")[i % 2])
            feed(tree, delta)
        tree.observe(None, time=500.0)
        return tree

    folded, unfolded = run(3), run(1000)
    assert len(folded.spans) == 5 and len(unfolded.spans) == 51

    def totals(tree):
        out: dict = {}
        for s in tree.root_spans:
            for k, v in s.cumulative_worker_metrics.items():
                out[k] = out.get(k, 0) + v
        keys = {
            "states": sum(sum(s.states.values()) for s in tree.root_spans),
            "nbytes": sum(s.nbytes_total for s in tree.root_spans),
            "duration": sum(s.duration for s in tree.root_spans),
            "active": sum(s.active_cpu_seconds for s in tree.root_spans[:-1]),
        }
        return out, keys

    (m1, k1), (m2, k2) = totals(folded), totals(unfolded)
    assert m1.keys() == m2.keys()
    for k in m1:
        assert m1[k] == pytest.approx(m2[k]), k
    assert k1 == pytest.approx(k2)
    assert sum(folded.keyed_metrics.values()) == pytest.approx(sum(unfolded.keyed_metrics.values()))
    assert tree_merge_total(folded) == pytest.approx(tree_merge_total(unfolded))


def tree_merge_total(tree: SpanTree) -> float:
    merged = tree.merge_by_tags("default")
    return sum(v for k, v in merged.cumulative_worker_metrics.items() if k[-1] == "seconds")


def test_metrics_that_arrive_after_their_span_folded_go_to_the_fold(tree):
    first, _, late = finish_default_span(tree, 0.0)  # its heartbeat has not come yet
    for i in range(1, 5):
        feed(tree, finish_default_span(tree, 10.0 * i)[2])
    tree.observe(None, time=100.0)
    assert first.id not in tree.spans
    feed(tree, late)
    fold = tree.spans[FOLDED_ID]
    assert fold._metrics[("execute", "inc", "tasks", "count")] == 3  # 2 folded + the late one
    assert ("execute", first.id, "inc", "tasks", "count") not in tree.keyed_metrics
    assert tree.keyed_metrics[("execute", FOLDED_ID, "inc", "tasks", "count")] == 3


def test_a_folded_span_with_live_tasks_still_shows_them_changing(tree):
    _, held, _ = finish_default_span(tree, 0.0, live=1)  # its future is still held
    for i in range(1, 5):
        feed(tree, finish_default_span(tree, 10.0 * i)[2])
    tree.observe(None, time=100.0)
    fold = tree.spans[FOLDED_ID]
    assert held in fold.groups and fold.done
    assert fold.states["memory"] == 1 and fold.states["forgotten"] == 2
    held.states["memory"], held.states["processing"] = 0, 1  # its worker died: recomputed
    assert not fold.done
    held.states["processing"], held.states["forgotten"], held.n_live = 0, 1, 0
    finish_default_span(tree, 200.0)  # more folding: the dead group joins the tally
    tree.observe(None, time=300.0)
    assert held not in fold.groups
    assert fold.states["forgotten"] == fold.folded


def test_keeping_no_finished_default_span_and_a_bounded_interval_list():
    tree = SpanTree(now=lambda: 1000.0, keep_default_spans=0)
    tree.nthreads_changed(0.0, 3)
    for i in range(200):
        finish_default_span(tree, 2.0 * i)
        if i % 7 == 0:
            tree.nthreads_changed(2.0 * i + 0.5, 3 + i % 2)
    tree.observe(None, time=1000.0)
    fold = tree.spans[FOLDED_ID]
    assert len(tree.spans) == 2 and fold.folded == 200
    assert len(fold.nthreads_intervals) <= FoldedSpan.MAX_INTERVALS
    # the thread-seconds are exact although the intervals merged
    check = SpanTree(now=lambda: 1000.0, keep_default_spans=10_000)
    check.nthreads_changed(0.0, 3)
    for i in range(200):
        finish_default_span(check, 2.0 * i)
        if i % 7 == 0:
            check.nthreads_changed(2.0 * i + 0.5, 3 + i % 2)
    check.observe(None, time=1000.0)
    expected = sum(s.active_cpu_seconds for s in check.root_spans[:-1])
    assert fold.active_cpu_seconds == pytest.approx(expected)


def test_metrics_feed_sends_a_folded_spans_rows_as_zero():
    before = {
        ("execute", "default-1", "inc", "thread-cpu", "seconds"): 1.0,
        ("execute", "default-2", "inc", "thread-cpu", "seconds"): 2.0,
        ("execute", "user-span", "inc", "thread-cpu", "seconds"): 4.0,
    }
    after = {
        ("execute", FOLDED_ID, "inc", "thread-cpu", "seconds"): 1.0,
        ("execute", "default-2", "inc", "thread-cpu", "seconds"): 2.0,
        ("execute", "user-span", "inc", "thread-cpu", "seconds"): 4.0,
    }
    f, reader = MetricsFeed(), MetricsReader()
    reader.apply(*f.update(before))
    reader.apply(*f.update(after))
    seen = reader.as_dict()
    assert sum(seen.values()) == 7.0  # not 8: default-1's second is counted once
    assert seen[metric_key(("execute", "default-1", "inc", "thread-cpu", "seconds"))] == 0.0
    assert f.update(after) is None


def test_a_reports_metrics_subtract_what_folded_during_the_block():
    before = {("execute", "default-1", "inc", "tasks", "count"): 5}
    after = {
        ("execute", FOLDED_ID, "inc", "tasks", "count"): 7,
        ("execute", "default-9", "inc", "tasks", "count"): 1,
    }
    assert _subtract(after, before) == {
        ("execute", FOLDED_ID, "inc", "tasks", "count"): 2,
        ("execute", "default-9", "inc", "tasks", "count"): 1,
    }


# -- on a running cluster -------------------------------------------------------------------


def inc(x: int) -> int:
    return x + 1


def test_thousands_of_sequential_submits_keep_the_span_count_bounded(cluster):
    n, keep = 2000, 20
    tree = cluster.scheduler.spans
    spans_before = cluster.loop_thread.run(lambda: len(tree.spans))
    cluster.loop_thread.run(lambda: setattr(tree, "keep_default_spans", keep))
    try:
        with Client(cluster) as client:
            tasks0 = cluster_tasks(client)
            for i in range(n):
                assert client.submit(inc, i, pure=False).result(timeout=10) == i + 1
            client.fine_metrics()  # refresh: every worker's heartbeat is in
            n_spans = cluster.loop_thread.run(lambda: len(tree.spans))
            assert n_spans <= spans_before + keep + 2, n_spans
            # nothing lost: the spans' task counts and seconds add up to the cluster's
            by_span = client.spans()
            span_tasks = sum(
                v
                for s in by_span.roots
                for k, v in s.metrics.items()
                if k[1:] == ("inc", "tasks", "count")
            )
            assert cluster_tasks(client) - tasks0 == n
            assert span_tasks == cluster_tasks(client)
            frame = client.fine_metrics(unit="count")
            assert frame[frame.activity == "tasks"].value.sum() == cluster_tasks(client)
            # and every other metric of the tasks too (idle is the spans' own reckoning)
            cumulative = cluster.loop_thread.run(
                lambda: dict(cluster.scheduler.cumulative_worker_metrics)
            )
            summed: dict = {}
            for s in by_span.roots:
                for k, v in s.metrics.items():
                    if k[1] == "inc":
                        summed[k] = summed.get(k, 0) + v
            assert summed.keys() == {k for k in cumulative if len(k) == 4 and k[1] == "inc"}
            for k, v in summed.items():
                assert v == pytest.approx(cumulative[k], rel=1e-9), k
            by_function = frame.groupby(["function", "activity"]).value.sum()
            assert by_function[("inc", "tasks")] == cluster_tasks(client)
            metrics_keys = cluster.loop_thread.run(lambda: len(cluster.scheduler.worker_metrics))
            assert metrics_keys < 20 * (keep + 10), metrics_keys
            fold = by_span[FOLDED_ID]
            assert fold.done and fold.states["forgotten"] >= n - keep - 2
    finally:
        cluster.loop_thread.run(lambda: setattr(tree, "keep_default_spans", 100))


def cluster_tasks(client: Client) -> float:
    m = client.cluster.scheduler.cumulative_worker_metrics
    return client.cluster.loop_thread.run(lambda: m.get(("execute", "inc", "tasks", "count"), 0))
