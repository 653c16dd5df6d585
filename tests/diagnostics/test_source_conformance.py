"""Every DiagnosticsSource answers every read the same way: types, units, invariants.

One known workload runs on each source: spans (TAG,) > (TAG, "load"); ten ``inc``
tasks in the inner span, then one ``total`` of them in the outer span, which needs
results from the other worker. Then every read of the protocol is checked against
it. The sources: EngineSource over embedded workers and over worker processes,
the test fake (filled by ``fakes.run_workload`` as the workload would fill an
engine), and DaskSource over a Dask ``LocalCluster`` with worker processes (when
distributed is installed). A source over another engine joins by adding an entry
to ``SOURCES``; what its engine cannot give is named in ``Observed.lacks`` (see
``DASK_LACKS``) and each check it skips says so.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import cloudpickle
import msgpack
import pytest

from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.core.idle_reasons import is_idle
from kernel_cluster.core.profile_tree import from_flat
from kernel_cluster.core.scheduler_tasks import ALL_STATES
from kernel_cluster.core.span_folding import IDLE as SPAN_IDLE
from kernel_cluster.diagnostics.attach import attach, set_default_source, source_of
from kernel_cluster.diagnostics.snapshots import (
    ClusterInfo,
    FinishedSpan,
    FinishedSpans,
    MemorySnapshot,
    Metrics,
    ProfileMetadata,
    SpanInfo,
    StartStop,
    TaskStreamRecord,
    TransferLogEntry,
    TransferLogs,
    WorkerInfo,
)
from kernel_cluster.diagnostics.source import DiagnosticsSource
from kernel_cluster.diagnostics.sources.engine_source import EngineSource
from tests.engine.helpers import assert_nothing_left, running_now
from tests.views.fakes import StreamSource, run_workload

# scheduler times against a worker's: workers correct their clocks by an estimated
# offset, good to well under this
SLACK = 0.5


def inc(x: int) -> int:
    time.sleep(0.02)  # long enough for both workers to get some
    return x + 1


def total(xs: list[int]) -> int:
    return sum(xs)


@dataclass
class Observed:
    """A source, and what was read from it around the workload."""

    source: DiagnosticsSource
    kind: str | None  # what ``source.kind`` must say (None: the source's own kind)
    tag: str
    outer: str  # span ids
    inner: str
    now0: float  # before the workload
    now1: float  # after it
    index0: int
    index1: int
    metrics0: Metrics
    metrics1: Metrics
    # what this source's engine does not measure, by name (see DASK_LACKS)
    lacks: frozenset[str] = field(default_factory=frozenset)


# What Dask's data forces DaskSource to leave out (kernel_cluster/diagnostics/dask_source.py
# says why), each named where a check skips it:
# - "gather-dep bytes": Dask's workers time fetching dependencies but count no bytes in
#   their fine metrics (the transfer logs have the bytes, and are checked below).
# Other differences the checks meet only because of how ``_dask`` runs the workload:
# - tasks are counted, and the task stream kept, from the moment DaskSource attaches
#   (its scheduler plugin): ``attach`` comes before the workload;
# - Dask's progress counts only the tasks its scheduler still holds: the workload's
#   futures are held until the checks are done;
# - Dask's metrics arrive with heartbeats: ``fine_metrics()`` (refresh) waits for them;
# - both have the state "no-worker", at 0 here.
DASK_LACKS = frozenset({"gather-dep bytes"})


def _engine(processes: bool) -> Callable[[], Iterator[Observed]]:
    def run() -> Iterator[Observed]:
        before = running_now()
        module = sys.modules[__name__]
        if processes:  # the workers need not import tests
            cloudpickle.register_pickle_by_value(module)
        cluster = KernelCluster(n_workers=2, threads_per_worker=2, processes=processes)
        try:
            with Client(cluster, set_as_default=False) as client:
                source = client.diagnostics
                tag = f"conformance-{uuid.uuid4().hex[:8]}"
                now0, index0 = source.now(), source.task_stream_index()
                metrics0 = source.fine_metrics()
                with span(tag) as outer:
                    with span("load") as inner:
                        futures = client.map(inc, range(10))
                    result = client.submit(total, futures)
                    assert result.result() == 55
                metrics1 = source.fine_metrics()  # asks the workers first: all in
                yield Observed(
                    source,
                    "processes" if processes else "embedded",
                    tag,
                    outer,
                    inner,
                    now0,
                    source.now(),
                    index0,
                    source.task_stream_index(),
                    metrics0,
                    metrics1,
                )
                del futures, result
        finally:
            cluster.close()
            if processes:
                cloudpickle.unregister_pickle_by_value(module)
        assert_nothing_left(before)

    return run


def _fake() -> Iterator[Observed]:
    source = StreamSource()
    tag = "conformance"
    now0, index0, metrics0 = source.now(), source.task_stream_index(), source.fine_metrics()
    outer, inner = run_workload(source, tag)
    yield Observed(
        source,
        None,
        tag,
        outer,
        inner,
        now0,
        source.now(),
        index0,
        source.task_stream_index(),
        metrics0,
        source.fine_metrics(),
    )


def _dask() -> Iterator[Observed]:
    """The workload on a Dask LocalCluster with two worker processes, through
    ``kernel_cluster.attach`` and ``kernel_cluster.span`` (which opens Dask spans)."""
    pytest.importorskip("distributed")
    from distributed import Client as DaskClient
    from distributed import LocalCluster

    from kernel_cluster.diagnostics import attach as source_module

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the workers need not import tests
    previous = source_module._default_source
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
    )
    try:
        with DaskClient(cluster) as client:
            source = attach(client)
            tag = f"conformance-{uuid.uuid4().hex[:8]}"
            now0, index0 = source.now(), source.task_stream_index()
            metrics0 = source.fine_metrics()
            with span(tag) as outer:
                with span("load") as inner:
                    futures = client.map(inc, range(10))
                result = client.submit(total, futures)
                assert result.result() == 55
            metrics1 = source.fine_metrics()  # waits for the workers' heartbeats
            yield Observed(
                source,
                "processes",
                tag,
                outer,
                inner,
                now0,
                source.now(),
                index0,
                source.task_stream_index(),
                metrics0,
                metrics1,
                lacks=DASK_LACKS,
            )
            del futures, result
    finally:
        set_default_source(previous)
        cluster.close()
        cloudpickle.unregister_pickle_by_value(module)


# name -> a generator: set up, run the workload, yield what was observed, tear down
SOURCES: dict[str, Callable[[], Iterator[Observed]]] = {
    "embedded": _engine(processes=False),
    "processes": _engine(processes=True),
    "fake": _fake,
    "dask": _dask,
}


def _conforms(fake: StreamSource, engine: EngineSource) -> list[DiagnosticsSource]:
    """Never called: a type checker proves here that both are sources."""
    return [fake, engine]


@pytest.fixture(scope="module", params=list(SOURCES))
def seen(request: pytest.FixtureRequest) -> Iterator[Observed]:
    yield from SOURCES[request.param]()


# -- the checks --------------------------------------------------------------------------


def check_snapshot(obj: object) -> None:
    """Frozen, slotted, and plain enough for msgpack."""
    assert dataclasses.is_dataclass(obj) and not isinstance(obj, type)
    assert not hasattr(obj, "__dict__"), "not slotted"
    field = dataclasses.fields(obj)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, None)
    msgpack.packb(dataclasses.asdict(obj), strict_types=False)


def test_is_a_source_with_its_kind(seen: Observed) -> None:
    src = seen.source
    assert isinstance(src, DiagnosticsSource)
    assert source_of(src) is src
    assert src.kind in ("embedded", "processes")
    if seen.kind is not None:
        assert src.kind == seen.kind


def test_clock_moves_forward(seen: Observed) -> None:
    now = seen.source.now()
    assert isinstance(now, float) and math.isfinite(now)
    assert seen.now0 <= seen.now1 <= now


def test_info_lists_the_workers_and_their_threads(seen: Observed) -> None:
    info = seen.source.info()
    assert isinstance(info, ClusterInfo)
    check_snapshot(info)
    assert len(info.workers) == 2
    for address, w in info.workers.items():
        assert isinstance(w, WorkerInfo) and w.address == address
        check_snapshot(w)
        assert w.nthreads >= 1 and w.memory_bytes >= 0 and w.nbytes >= 0
    assert info.total_nthreads == sum(w.nthreads for w in info.workers.values())


def test_progress_counts_every_state_of_every_prefix(seen: Observed) -> None:
    progress = seen.source.progress()
    for prefix, n in (("inc", 10), ("total", 1)):
        states = progress[prefix]
        assert set(ALL_STATES) <= set(states)
        assert all(isinstance(v, int) and v >= 0 for v in states.values())
        assert sum(states.values()) == n and states["erred"] == 0


def test_fine_metrics_are_keyed_numbers_and_counts_only_grow(seen: Observed) -> None:
    before, after = seen.metrics0, seen.metrics1
    contexts = {"execute", "gather-dep", "get-data", "memory-monitor"}
    for key, value in after.items():
        assert isinstance(key, tuple) and key[0] in contexts, key
        assert len(key) == (5 if key[0] == "execute" else 3), key
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
        assert value >= 0 or key[-1] not in ("bytes", "count"), (key, value)
    for key, value in before.items():  # running totals: a count never goes down
        if key[-1] == "count":
            assert after[key] >= value, key

    def count(span_id: str, prefix: str) -> float:
        return after.get(("execute", span_id, prefix, "tasks", "count"), 0.0) - before.get(
            ("execute", span_id, prefix, "tasks", "count"), 0.0
        )

    assert count(seen.inner, "inc") == 10 and count(seen.outer, "total") == 1
    seconds = {k: v for k, v in after.items() if k[0] == "execute" and k[-1] == "seconds"}
    assert sum(v for k, v in seconds.items() if k[1] == seen.inner and k[2] == "inc") > 0
    # the total fetched the other worker's results: bytes over the network
    if "gather-dep bytes" in seen.lacks:  # only the time: the transfer logs have the bytes
        assert after.get(("gather-dep", "network", "seconds"), 0) > before.get(
            ("gather-dep", "network", "seconds"), 0
        )
    else:
        assert after.get(("gather-dep", "network", "bytes"), 0) > before.get(
            ("gather-dep", "network", "bytes"), 0
        )
    assert seen.source.fine_metrics(refresh=False).keys() >= after.keys()


def test_finished_spans_since_a_cursor(seen: Observed) -> None:
    """The run history's read: both spans finished, each with its tasks per prefix
    and state, result bytes and metrics complete; a read from the returned cursor
    brings nothing new."""
    src = seen.source
    first = src.finished_spans(0)
    assert isinstance(first, FinishedSpans)
    check_snapshot(first)
    latest: dict[str, FinishedSpan] = {}
    for record in first.spans:
        assert isinstance(record, FinishedSpan) and record.span.done
        latest[record.span.id] = record  # a span logged twice: the latest is final
    inner, outer = latest[seen.inner], latest[seen.outer]
    assert [r.span.id for r in first.spans].index(seen.inner) < max(
        i for i, r in enumerate(first.spans) if r.span.id == seen.outer
    )  # children first
    assert inner.tasks == {"inc": {"memory": 10}}
    assert outer.tasks == {"inc": {"memory": 10}, "total": {"memory": 1}}
    assert outer.nbytes["inc"] == inner.nbytes["inc"] > 0 and outer.nbytes["total"] > 0
    assert outer.workers == 2 and outer.threads == 4
    assert inner.root == outer.root == seen.outer
    assert outer.span.metrics[("execute", "total", "tasks", "count")] == 1
    assert inner.span.metrics[("execute", "inc", "tasks", "count")] == 10
    assert inner.span.metrics[("execute", "inc", "thread-cpu", "seconds")] > 0
    again = src.finished_spans(first.cursor)
    assert again.spans == () and again.cursor == first.cursor and again.missed == 0


def test_spans_nest_and_add_up(seen: Observed) -> None:
    spans = seen.source.spans()
    by_id = {s.id: s for s in spans}
    assert len(by_id) == len(spans)
    for s in spans:
        assert isinstance(s, SpanInfo)
        assert s.parent is None or s.parent in by_id
        for child in s.children:
            assert by_id[child].parent == s.id
        assert s.start <= s.stop + SLACK and s.enqueued <= s.stop
        assert s.duration >= 0 and s.nbytes_total >= 0 and s.active_cpu_seconds >= 0
    outer, inner = by_id[seen.outer], by_id[seen.inner]
    check_snapshot(inner)
    assert outer.name == (seen.tag,) and inner.name == (seen.tag, "load")
    assert inner.parent == outer.id and inner.id in outer.children
    assert inner.done and outer.done
    assert sum(inner.states.values()) == 10 and sum(outer.states.values()) == 11
    assert set(ALL_STATES) <= set(inner.states)
    assert seen.now0 - SLACK <= inner.enqueued <= inner.start <= inner.stop
    assert outer.stop <= seen.source.now() + SLACK
    assert outer.nbytes_total >= inner.nbytes_total > 0
    for key, value in inner.metrics.items():  # a parent's numbers cover its children's
        assert len(key) == 4 and key[0] == "execute", key
        # idle (by reason, and "idle or other spans") is each span's own rest of its
        # thread-seconds, not a sum over its children
        if not is_idle(key[2]) and key != SPAN_IDLE:
            assert outer.metrics[key] >= value - 1e-9, key
    assert inner.metrics[("execute", "inc", "tasks", "count")] == 10


def test_span_metrics_by_id_and_by_tag(seen: Observed) -> None:
    src = seen.source
    metrics, label = src.span_metrics(seen.inner)
    assert label == f"{seen.tag} / load"
    assert metrics[("execute", "inc", "tasks", "count")] == 10
    metrics, label = src.span_metrics(seen.tag)
    assert label == seen.tag
    assert metrics[("execute", "inc", "tasks", "count")] == 10
    assert metrics[("execute", "total", "tasks", "count")] == 1
    assert all(isinstance(v, int | float) for v in metrics.values())
    with pytest.raises(KeyError, match="tag"):
        src.span_metrics("no-such-tag-anywhere")


def workload_records(seen: Observed) -> list[TaskStreamRecord]:
    return seen.source.task_stream_since(seen.index0)


def test_task_stream_records_are_complete(seen: Observed) -> None:
    records = workload_records(seen)
    assert seen.index1 - seen.index0 == len(records) == 11
    assert [r.index for r in records] == list(range(seen.index0, seen.index1))
    workers = set(seen.source.info().workers)
    for r in records:
        assert isinstance(r, TaskStreamRecord)
        check_snapshot(r)
        assert r.status == "OK" and r.worker in workers and r.nbytes >= 0
        assert [ss.action for ss in r.startstops].count("compute") == 1
        for ss in r.startstops:
            assert isinstance(ss, StartStop)
            assert seen.now0 - SLACK <= ss.start <= ss.stop <= seen.now1 + SLACK
            if ss.action == "transfer":
                assert ss.source in workers
        assert r.as_dict()["startstops"] == [ss.as_dict() for ss in r.startstops]
    prefixes = [r.prefix for r in records]
    assert prefixes.count("inc") == 10 and prefixes.count("total") == 1
    assert {r.span_id for r in records if r.prefix == "inc"} == {seen.inner}
    assert {r.span_id for r in records if r.prefix == "total"} == {seen.outer}


def test_task_stream_windows(seen: Observed) -> None:
    src = seen.source
    records = workload_records(seen)
    ends = [max(ss.stop for ss in r.startstops) for r in records]
    window = src.task_stream(start=min(ends), stop=max(ends))
    assert {r.index for r in records} <= {r.index for r in window}
    (last,) = src.task_stream(count=1)
    assert last == records[-1]
    assert src.task_stream(start=max(ends) + 3600) == []
    assert src.task_stream_since(seen.index1) == []


def test_task_runs_are_the_records_compute_runs(seen: Observed) -> None:
    """What the critical path walks: each task's compute, its inputs and its worker
    (a source may make them without the records, as the engine's does)."""
    src = seen.source
    records = workload_records(seen)
    start = min(ss.start for r in records for ss in r.startstops)
    expected = [r.compute_run() for r in records]
    assert src.task_runs({seen.inner, seen.outer}, start=start)[-11:] == expected
    assert src.task_runs({seen.inner}, start=start) == expected[:10]
    (total_run,) = src.task_runs({seen.outer}, start=start)
    assert total_run.key == records[-1].key and total_run.worker == records[-1].worker
    # a Dask cluster's records say nothing of them: () there, the ten incs here
    assert total_run.dependencies == records[-1].dependencies
    assert len(total_run.dependencies) in (0, 10)
    assert src.task_runs({"no such span"}) == []


def test_memory_is_in_bytes(seen: Observed) -> None:
    m = seen.source.memory()
    assert isinstance(m, MemorySnapshot)
    check_snapshot(m)
    values = (m.process_bytes, m.managed_bytes, m.unmanaged_bytes, m.spilled_bytes)
    assert all(isinstance(v, int) and v >= 0 for v in values)
    assert m.process_bytes > 0
    assert m.unmanaged_bytes == max(0, m.process_bytes - m.managed_bytes)
    assert m.measure("spilled") == m.spilled_bytes


def test_profiles_and_their_timeline(seen: Observed) -> None:
    src = seen.source
    workers = set(src.info().workers)
    assert src.profile_interval() > 0 and src.profile_cycle_interval() > 0
    profiles = src.profiles()
    assert set(profiles) <= workers
    for rows in profiles.values():
        assert all(isinstance(r, tuple) and len(r) == 8 for r in rows)
        tree = from_flat(rows)
        assert tree["count"] >= sum(c["count"] for c in tree["children"].values())
    one = sorted(profiles)[:1]
    assert set(src.profiles(workers=one)) <= set(one)
    metas = src.profile_metadata()
    assert set(metas) <= workers
    for meta in metas.values():
        assert isinstance(meta, ProfileMetadata)
        check_snapshot(meta)
        assert meta.cycle_seconds is None or meta.cycle_seconds > 0
        for points in (meta.counts, *meta.keys.values()):
            for t, n in points:
                assert isinstance(t, float) and isinstance(n, int) and n >= 0
                assert t <= src.now() + SLACK


def test_transfer_logs_agree_with_the_task_stream(seen: Observed) -> None:
    src = seen.source
    logs = src.transfer_logs()
    assert set(logs) == set(src.info().workers)
    for log in logs.values():
        assert isinstance(log, TransferLogs)
        check_snapshot(log)
        for e in (*log.incoming, *log.outgoing):
            assert isinstance(e, TransferLogEntry)
            assert e.start <= e.stop and e.total_bytes >= 0 and e.compressed_bytes >= 0
    records = workload_records(seen)
    (summed,) = [r for r in records if r.prefix == "total"]
    fetched = {r.key: r.worker for r in records if r.prefix == "inc" and r.worker != summed.worker}
    assert fetched, "every inc ran on one worker: the workload needs two"
    received = {k for e in logs[summed.worker].incoming if e.stop >= seen.now0 for k in e.keys}
    assert set(fetched) <= received
    for key, worker in fetched.items():
        sent = {k for e in logs[worker].outgoing if e.peer == summed.worker for k in e.keys}
        assert key in sent
    one = sorted(logs)[:1]
    assert set(src.transfer_logs(workers=one)) == set(one)


def test_unknown_objects_are_refused() -> None:
    with pytest.raises(TypeError, match="DiagnosticsSource"):
        source_of(object())  # type: ignore[arg-type]
