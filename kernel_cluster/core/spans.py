"""The span tree: nested labels over groups of tasks, and their metrics.

A plain structure, fed by the scheduler (tasks observed, metrics from
heartbeats, threads joining and leaving) and read by everybody else. Every
property of a Span describes its whole subtree, so a parent's numbers are its
own plus its children's.

Times come in as arguments: the tree reads no clock, except through ``now``,
which the owner passes in.

Default spans. Tasks submitted outside any ``span`` go to a default span, and a
new one begins once the previous one's tasks are all done: a loop of
``submit(...).result()`` makes one per iteration. So that such a loop cannot grow
the tree without bound, only the latest ``keep_default_spans`` finished default
spans are kept as they are; older ones fold, oldest first, into one span named
``("default",)`` with id ``"default-folded"``. A default span's id is
``default-<token>-<n>``: ``token`` is the tree's own (the scheduler passes a random
one), so that the ids of two clusters, or of two kernels' runs kept side by side,
never collide; ``n`` counts the tree's default spans, oldest first. Folding loses
nothing: the fold's metrics, task counts, durations, bytes and thread-seconds are
the sums of the spans folded into it (its ``folded`` says how many), so totals over all spans do
not change; only the folded spans' separate rows are gone. Metrics that arrive
for a span after it folded go to the fold. The owner of metrics keyed by span id
(the scheduler's) hands that dict over as ``keyed_metrics`` to have it re-keyed too.
The fold's arithmetic is core/span_folding.py's, which the Dask scheduler plugin
shares.

Finished spans. Readers that keep what finished (the run history) ask for the
spans that finished since a cursor (``finished_since``), a bounded log with a
running index, so a read costs what finished since, never the size of the tree.
The tree does no work per task for it: a span observed (given tasks) is *open*;
``collect_finished`` (called by the reader, and at a fold) moves the open spans
that are done into the log. A span that gets tasks again reopens, and is logged
again when it is done (a parent between two children, say): readers take the
latest entry as the span's final state.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from .changes import ChangeLog
from .finished_log import FinishedLog, children_first
from .metrics import add_metrics
from .scheduler_tasks import ALL_STATES, TaskGroup
from .span_folding import (
    DEFAULT,
    DEFAULT_ID_PREFIX,
    FOLDED_ID,
    KEEP_DEFAULT_SPANS,
    MAX_CODE,
    MAX_INTERVALS,
    FoldTotals,
    add_into,
    how_many_to_fold,
    is_default_span_id,
    with_idle,
)

FINISHED_LOG_LENGTH = 4096  # finished spans a reader can still get after they finished


class Finished(NamedTuple):
    """What ``SpanTree.finished_since`` returns: the spans logged since the cursor (in
    the order they finished; a span may appear twice if it reopened), the cursor to
    pass next time, and how many entries fell out of the log before this read."""

    spans: list[Span]
    cursor: int
    missed: int


__all__ = [
    "DEFAULT",
    "FOLDED_ID",
    "KEEP_DEFAULT_SPANS",
    "Finished",
    "FoldedSpan",
    "MergedSpan",
    "Span",
    "SpanTree",
    "is_default_span_id",
]


class Span:
    def __init__(
        self,
        name: tuple[str, ...],
        id_: str,
        parent: Span | None,
        total_nthreads_history: list[tuple[float, int]],
        enqueued: float,
        now: Callable[[], float],
    ):
        self.name = name
        self.id = id_
        self.parent = parent
        self.children: list[Span] = []
        self.groups: set[TaskGroup] = set()
        self.enqueued = enqueued
        self.code: list[tuple[Any, ...]] = []
        self._metrics: dict[tuple[Any, ...], float] = {}  # this span's own ("execute", ...) keys
        self._nthreads_history = total_nthreads_history
        self._now = now
        self._annotation: dict[str, tuple[Any, ...]] | None = None  # made once, when asked

    def __repr__(self) -> str:
        return f"Span<name={self.name}, id={self.id}>"

    # -- the tree ----------------------------------------------------------------------------

    def traverse_spans(self) -> Iterator[Span]:
        """This span and every span below it, top down."""
        stack = [self]
        while stack:
            span = stack.pop()
            yield span
            stack.extend(reversed(span.children))

    def traverse_groups(self) -> Iterator[TaskGroup]:
        for span in self.traverse_spans():
            yield from span.groups

    @property
    def annotation(self) -> dict[str, tuple[Any, ...]] | None:
        """The annotation tasks of this span carry: every name and id from the root.

        Made once (a span's place in the tree never changes): every task sent carries
        it, and walking up a deep tree for each would cost the depth per task."""
        if self.name == DEFAULT and self.parent is None:
            return None
        if self._annotation is None:
            # up to the nearest span that has made its own (no recursion: a tree may be
            # deeper than the recursion limit)
            above: list[str] = []
            span = self.parent
            while span is not None and span._annotation is None:
                above.append(span.id)
                span = span.parent
            base = span._annotation["ids"] if span is not None and span._annotation else ()
            ids = (*base, *reversed(above), self.id)
            self._annotation = {"name": self.name, "ids": ids}
        return self._annotation

    # -- times --------------------------------------------------------------------------------

    @property
    def start(self) -> float:
        """When the first task of the subtree started computing; 0 before any did.

        Never before ``enqueued``: a worker process's clock, corrected by an estimated
        offset, can place a start a few microseconds ahead of the scheduler's."""
        starts = [g.start for g in self.traverse_groups() if g.start]
        return max(min(starts), self.enqueued) if starts else 0.0

    @property
    def stop(self) -> float:
        """When the subtree finished computing, or now if it has not."""
        if not self.done:
            return self._now()
        stops = [g.stop for g in self.traverse_groups() if g.stop]
        return max(stops) if stops else self.enqueued

    @property
    def duration(self) -> float:
        """Time spent on every action of every task in the subtree."""
        return sum(self.all_durations.values())

    @property
    def all_durations(self) -> dict[str, float]:
        out: defaultdict[str, float] = defaultdict(float)
        for g in self.traverse_groups():
            for action, seconds in g.all_durations.items():
                out[action] += seconds
        return dict(out)

    @property
    def nbytes_total(self) -> int:
        return sum(g.nbytes_total for g in self.traverse_groups())

    @property
    def states(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
        for g in self.traverse_groups():
            for state, n in g.states.items():
                out[state] += n
        return out

    @property
    def done(self) -> bool:
        """Every task of the subtree is finished (this can turn false again)."""
        return all(g.done for g in self.traverse_groups())

    @property
    def nthreads_intervals(self) -> list[tuple[float, float, int]]:
        """(begin, end, threads on the cluster) from enqueued to stop."""
        return self.intervals_until(self.stop)

    def intervals_until(self, end: float) -> list[tuple[float, float, int]]:
        """``nthreads_intervals`` for a span that stops at ``end`` (read apart)."""
        begin = self.enqueued
        out = []
        history = self._nthreads_history
        for i, (t, n) in enumerate(history):
            t_next = history[i + 1][0] if i + 1 < len(history) else end
            lo, hi = max(t, begin), min(t_next, end)
            if hi > lo:
                out.append((lo, hi, n))
        return out

    @property
    def active_cpu_seconds(self) -> float:
        """Thread-seconds the cluster offered while this span was running."""
        return sum((hi - lo) * n for lo, hi, n in self.nthreads_intervals)

    # -- metrics -------------------------------------------------------------------------------

    @property
    def cumulative_worker_metrics(self) -> dict[tuple[Any, ...], float]:
        """``("execute", prefix, activity, unit)`` summed over the subtree (the workers'
        idle filed under it by reason included, function ``None``), plus Dask's
        ``("execute", "N/A", "idle or other spans", "seconds")``: the thread-seconds the
        span had and neither its tasks nor that idle used, so that its seconds add up
        to ``active_cpu_seconds``."""
        out: dict[tuple[Any, ...], float] = {}
        for span in self.traverse_spans():
            add_metrics(out, span._metrics)
        return with_idle(out, self.active_cpu_seconds)

    def add_metrics(self, key: tuple[Any, ...], value: float) -> None:
        self._metrics[key] = self._metrics.get(key, 0) + value

    # -- merging -------------------------------------------------------------------------------

    @staticmethod
    def merge(*items: Span) -> MergedSpan:
        """A synthetic span summing unrelated spans; overlapping time counts once and
        gaps between them do not count."""
        if not items:
            raise ValueError("Span.merge() needs at least one span.")
        return merge_spans(items, items[0]._now)


def _union(intervals: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Sorted (begin, end, n) intervals, trimmed so that no moment is counted twice."""
    out: list[tuple[float, float, int]] = []
    covered = float("-inf")
    for lo, hi, n in intervals:
        if hi <= covered:
            continue
        lo = max(lo, covered)
        out.append((lo, hi, n))
        covered = hi
    return out


class MergedSpan(Span):
    """What ``merge`` returns: gaps between its spans are not counted as active time."""

    _intervals: list[tuple[float, float, int]]

    @property
    def nthreads_intervals(self) -> list[tuple[float, float, int]]:
        return self._intervals

    @property
    def stop(self) -> float:
        return max(s.stop for s in self.children)

    @property
    def annotation(self) -> None:
        return None


class FoldedSpan(Span):
    """Finished default spans summed into one (see the module's docstring).

    Their numbers add up in ``totals`` (core/span_folding.py), which also bounds the
    thread-time intervals kept. The groups of folded spans whose tasks are all
    forgotten (nothing can change them again) go into the totals; groups with live
    tasks are kept as they are until they die, so a task recomputed later still shows.
    """

    MAX_INTERVALS = MAX_INTERVALS
    MAX_CODE = MAX_CODE

    def __init__(
        self,
        total_nthreads_history: list[tuple[float, int]],
        enqueued: float,
        now: Callable[[], float],
    ):
        super().__init__(DEFAULT, FOLDED_ID, None, total_nthreads_history, enqueued, now)
        self.totals = FoldTotals(enqueued)
        self._metrics = self.totals.metrics  # late metrics (add_metrics) go to the totals
        self.code = self.totals.code

    @property
    def folded(self) -> int:
        """How many default spans are folded in."""
        return self.totals.folded

    @property
    def nthreads_intervals(self) -> list[tuple[float, float, float]]:  # type: ignore[override]
        return self.totals.intervals

    def absorb(self, span: Span) -> None:
        """Add ``span`` (a finished default span, without children) to the fold."""
        totals = self.totals
        totals.add_span(span.enqueued, span.nthreads_intervals, span._metrics, span.code)
        self.enqueued = totals.enqueued
        self.groups.update(span.groups)
        for g in [g for g in self.groups if g.n_live == 0]:
            self.groups.discard(g)
            totals.add_tasks(
                g.start, g.stop, g.all_durations, g.nbytes_total, g.states, g.n_computed
            )

    # -- the totals, and the groups still live -------------------------------------------

    @property
    def start(self) -> float:
        starts = [g.start for g in self.groups if g.start]
        if self.totals.start:
            starts.append(self.totals.start)
        return max(min(starts), self.enqueued) if starts else 0.0

    @property
    def stop(self) -> float:
        if not self.done:
            return self._now()
        stops = [g.stop for g in self.groups if g.stop]
        if self.totals.stop:
            stops.append(self.totals.stop)
        return max(stops) if stops else self.enqueued

    @property
    def all_durations(self) -> dict[str, float]:
        out = dict(self.totals.durations)
        for g in self.groups:
            add_into(out, g.all_durations)
        return out

    @property
    def nbytes_total(self) -> int:
        return self.totals.nbytes_total + sum(g.nbytes_total for g in self.groups)

    @property
    def states(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(ALL_STATES, 0)
        add_into(out, self.totals.states)
        for g in self.groups:
            add_into(out, g.states)
        return out


def merge_spans(items: Iterable[Span], now: Callable[[], float]) -> MergedSpan:
    items = list(items)
    if not items:
        raise ValueError("There is no span to merge: nothing matched.")
    out = MergedSpan(("(merged)",), "merged", None, [], min(s.enqueued for s in items), now)
    out.children = items
    out._intervals = _union(sorted(iv for s in items for iv in s.nthreads_intervals))
    return out


class SpanTree:
    """All spans of a scheduler, and the ways to look them up."""

    def __init__(
        self,
        now: Callable[[], float],
        code_frames: int = 1,
        keep_default_spans: int = KEEP_DEFAULT_SPANS,
        token: str = "",
    ):
        """``keep_default_spans``: finished default spans kept apart before the oldest
        fold into one (an attribute: change it any time). ``token``: what makes this
        tree's default span ids its own (``default-<token>-<n>``; none: ``default-<n>``)."""
        self.keep_default_spans = keep_default_spans
        self._default_prefix = f"{DEFAULT_ID_PREFIX}{token}-" if token else DEFAULT_ID_PREFIX
        self.keyed_metrics: dict[tuple[Any, ...], float] | None = None
        self.folded: FoldedSpan | None = None
        self._finished_defaults: deque[Span] = deque()
        self._folded_upto = 0  # every default span numbered up to this one is folded
        self.spans: dict[str, Span] = {}
        self.root_spans: list[Span] = []
        self.spans_search_by_name: defaultdict[tuple[str, ...], list[Span]] = defaultdict(list)
        self.total_nthreads_history: list[tuple[float, int]] = []
        self.now = now
        self.code_frames = code_frames
        self._default: Span | None = None
        self._default_counter = 0
        # spans given tasks and not yet logged as finished (ordered: a dict), and the log
        self._open: dict[Span, None] = {}
        self._finished: FinishedLog[Span] = FinishedLog(FINISHED_LOG_LENGTH)
        # spans opened, updated and closed, for live views (the scheduler's state
        # shares it: tasks moving update their spans)
        self.changes = ChangeLog()

    def nthreads_changed(self, time: float, total: int) -> None:
        self.total_nthreads_history.append((time, total))

    def observe(
        self, annotation: dict[str, Any] | None, time: float, code: tuple[Any, ...] = ()
    ) -> Span:
        """The span a submission's tasks belong to, creating it (and its parents).

        No annotation: the current default span, or a new one once the last default
        span has finished all its tasks.
        """
        if not annotation:
            span = self._default
            if span is None or span.done:
                if span is not None:
                    finished = self._finished_defaults
                    finished.append(span)
                    for _ in range(how_many_to_fold(len(finished), self.keep_default_spans)):
                        self._fold(finished.popleft())
                self._default_counter += 1
                span_id = f"{self._default_prefix}{self._default_counter}"
                span = self._new(DEFAULT, span_id, None, time)
                self._default = span
        else:
            name, ids = tuple(annotation["name"]), tuple(annotation["ids"])
            if len(name) != len(ids):
                raise ValueError(f"span annotation {annotation!r}: names and ids differ in length")
            # the innermost span known, looked for from the inside out: a submission in
            # a known span costs one lookup, however deep the span is
            known = len(ids)
            found: Span | None = None
            while known > 0:
                found = self.spans.get(ids[known - 1])
                if found is not None:
                    break
                known -= 1
            parent = found
            last = len(ids) - 1
            for i in range(known, len(ids)):
                # the innermost takes the annotation's own tuples: no copy of the path
                parent = self._new(name if i == last else name[: i + 1], ids[i], parent, time)
                if i == last:
                    parent._annotation = {"name": name, "ids": ids}
            span = parent
            assert span is not None  # ids is not empty: found or made
        if code and code not in span.code:
            span.code.append(code)
        # it and its parents get tasks: open until done. A span open already has its
        # parents open (a parent is done only once its children are, and they close
        # together), so the walk stops there: a submission into a deep span costs one
        # step, not one per level
        node: Span | None = span
        opened = self._open
        while node is not None and node not in opened:
            opened[node] = None
            node = node.parent
        return span

    def _new(self, name: tuple[Any, ...], span_id: str, parent: Span | None, time: float) -> Span:
        span = Span(name, span_id, parent, self.total_nthreads_history, time, self.now)
        self.spans[span_id] = span
        self.spans_search_by_name[name].append(span)
        self.changes.span_opened(span_id)
        if parent is None:
            self.root_spans.append(span)
        else:
            parent.children.append(span)
        return span

    # -- folding default spans --------------------------------------------------------------

    def _fold(self, span: Span) -> None:
        """Sum ``span`` into the fold and forget it as a span of its own."""
        if span in self._open:  # done (it is a finished default span): log it first
            del self._open[span]
            self._log_finished(span)
        fold = self.folded
        if fold is None:
            fold = self.folded = FoldedSpan(self.total_nthreads_history, span.enqueued, self.now)
            self.spans[fold.id] = fold
            self.root_spans.insert(self.root_spans.index(span), fold)
            self.spans_search_by_name[DEFAULT].insert(0, fold)
        fold.absorb(span)
        self.changes.span_closed(span.id)
        self.changes.span_updated(fold.id)
        del self.spans[span.id]
        self.root_spans.remove(span)
        self.spans_search_by_name[DEFAULT].remove(span)
        self._folded_upto = int(span.id[len(self._default_prefix) :])
        metrics = self.keyed_metrics
        if metrics is not None:  # its ("execute", id, ...) entries move to the fold's id
            for _, prefix, activity, unit in span._metrics:
                old = ("execute", span.id, prefix, activity, unit)
                value = metrics.pop(old, None)
                if value is not None:
                    key = ("execute", fold.id, prefix, activity, unit)
                    metrics[key] = metrics.get(key, 0) + value
                    self.changes.metric(old)  # gone: read as 0
                    self.changes.metric(key)

    def is_folded(self, span_id: object) -> bool:
        """Whether ``span_id`` is a default span that has been folded."""
        if self.folded is None or type(span_id) is not str:
            return False
        if not span_id.startswith(self._default_prefix):
            return False
        number = span_id[len(self._default_prefix) :]
        return number.isdigit() and int(number) <= self._folded_upto

    def fold_keys(self, delta: dict[tuple[Any, ...], float]) -> dict[tuple[Any, ...], float]:
        """``delta`` with the metrics of folded spans keyed by the fold's id (metrics
        of a task can arrive after its span folded)."""
        if self.folded is None:
            return delta
        if not any(len(k) == 5 and self.is_folded(k[1]) for k in delta):
            return delta
        out: dict[tuple[Any, ...], float] = {}
        for key, value in delta.items():
            if len(key) == 5 and self.is_folded(key[1]):
                key = (key[0], FOLDED_ID, key[2], key[3], key[4])
            out[key] = out.get(key, 0) + value
        return out

    def add_metrics(self, delta: dict[tuple[Any, ...], float]) -> None:
        """Worker metrics keyed ("execute", span_id, prefix, activity, unit) go to spans;
        every key of ``delta`` (the owner's rows: ``keyed_metrics``) is logged as changed."""
        touched = self.changes.metric
        for key, value in delta.items():
            touched(key)
            if key[0] != "execute" or len(key) != 5 or key[1] is None:
                continue
            span = self.spans.get(key[1])
            if span is None and self.is_folded(key[1]):
                span = self.folded
            if span is not None:
                span.add_metrics(("execute", key[2], key[3], key[4]), value)
                self.changes.span_updated(span.id)

    # -- finished spans ---------------------------------------------------------------------

    def _log_finished(self, span: Span) -> None:
        if any(True for _ in span.traverse_groups()):  # a span without tasks has nothing
            self._finished.append(span)

    def collect_finished(self) -> None:
        """Log the open spans that are done now (children before their parents)."""
        done = [span for span in self._open if span.done]
        for span in children_first(done):
            del self._open[span]
            self._log_finished(span)

    def finished_since(self, cursor: int) -> Finished:
        """The spans logged as finished from entry ``cursor`` on (0: all still kept; a
        cursor past the end, from another tree, counts as 0)."""
        self.collect_finished()
        return Finished(*self._finished.since(cursor))

    # -- queries ----------------------------------------------------------------------------

    def find_by_tags(self, *tags: str) -> Iterator[Span]:
        """Spans with any of ``tags`` in their name; of a matching parent and child, the
        parent only (it already covers the child). Without recursion: a tree may be
        deeper than Python's recursion limit."""
        wanted = set(tags)
        stack = list(reversed(self.root_spans))
        while stack:
            span = stack.pop()
            # a span's name holds its parent's: only its own last tag is new here
            if wanted.intersection(span.name[-1:] if span.parent is not None else span.name):
                yield span
                continue
            stack.extend(reversed(span.children))

    def merge_by_tags(self, *tags: str) -> MergedSpan:
        return merge_spans(self.find_by_tags(*tags), self.now)

    def merge_all(self) -> MergedSpan:
        return merge_spans(self.root_spans, self.now)
