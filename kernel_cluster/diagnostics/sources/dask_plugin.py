"""The scheduler side of ``DaskSource``: a plugin installed on a Dask scheduler.

``DaskSource`` registers ``ViewsPlugin`` on the scheduler when it attaches. The
plugin does two things there:

- it keeps what the scheduler does not: a numbered, bounded history of finished
  tasks (the task stream, readable "since index N"), the number of tasks each
  (span, prefix) ran (Dask's fine metrics count bytes and seconds, not tasks), and
  a numbered log of the spans that finished (for the run history: the spans a
  task of which ended since the last read are checked, never every span);
- it adds one handler, ``kernel_cluster_views``, that answers every read in one
  round trip with a snapshot built on the scheduler's event loop: plain tuples,
  dicts, strings and numbers, pickled, so tuple keys survive the trip.

This module is pickled *by value*, so that a scheduler started elsewhere without
this package can load it: it imports the standard library, ``distributed``/``dask``
(which every Dask scheduler has), and three pure modules of this package's core
that are pickled by value with it (``PICKLED_WITH``): core/span_folding.py (folding
old default spans, as the engine's span tree does), core/profile_tree.py (its
``to_flat``, for profiles) and core/finished_log.py (the finished spans' log).
Nothing else of ``kernel_cluster``. Reads that need the workers (profiles, their
per-cycle counts, transfer logs) ask them concurrently, each answer bounded by a
timeout, and leave out a worker that does not answer (killed, or stuck).
"""

from __future__ import annotations

import asyncio
import pickle
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from itertools import islice
from typing import Any

from dask.utils import key_split
from distributed.diagnostics.plugin import SchedulerPlugin

from ...core import finished_log, profile_tree, span_folding
from ...core.finished_log import FinishedLog, by_prefix, children_first, root_of
from ...core.profile_tree import to_flat
from ...core.span_folding import (
    DEFAULT,
    FOLDED_ID,
    IDLE,
    KEEP_DEFAULT_SPANS,
    FoldTotals,
    how_many_to_fold,
    with_idle,
)

# the modules pickled by value with this one (dask_source._by_value): pure, standard
# library only (tests/dask/test_plugin_alone.py checks both)
PICKLED_WITH = (span_folding, profile_tree, finished_log)

NAME = "kernel-cluster-views"
HANDLER = "kernel_cluster_views"
STREAM_LENGTH = 100_000  # task stream records kept on the scheduler
WORKER_TIMEOUT = 2.0  # seconds a worker has to answer a read
# the non-execute contexts of the protocol; each keyed (context, activity, unit)
PLAIN_CONTEXTS = ("gather-dep", "get-data", "memory-monitor")
STATES = ("released", "waiting", "queued", "processing", "memory", "erred", "forgotten")
# as the engine does: the latest finished default spans stay apart, older ones fold into
# one (FOLDED_ID), each once it has been finished for FOLD_GRACE
FOLD_GRACE = 5.0  # seconds after a default span ends before it may fold (late heartbeats)
# a finished span's snapshot is reused for this long unless one of its tasks finished since
# (reading every span on every poll would cost the scheduler ~0.1 ms per span)
SNAPSHOT_SECONDS = 2.0
FINISHED_LENGTH = 4096  # finished spans kept for the readers of the run history

# a task stream record: (index, key, prefix, span_id, worker, thread, status, nbytes,
# ((action, start, stop, source), ...))
Record = tuple[Any, ...]


class ViewsPlugin(SchedulerPlugin):
    """Installed once per scheduler (``idempotent``): several clients share it."""

    name = NAME
    idempotent = True

    def __init__(self, maxlen: int = STREAM_LENGTH) -> None:
        self.maxlen = maxlen
        self.scheduler: Any = None
        self.records: deque[Record] = deque(maxlen=maxlen)
        self.index = 0  # records ever made: the next one's number
        self.counts: dict[str | None, dict[str, int]] = {}  # span id -> prefix -> tasks
        self.folded: set[str] = set()  # ids of the default spans folded into FOLDED_ID
        self.fold: FoldTotals | None = None  # what they add up to
        self._fold_from = 0  # default spans before this index are all folded
        self.keep_default_spans = KEEP_DEFAULT_SPANS
        self._snapshots: dict[str, tuple[float, dict[str, Any]]] = {}  # id -> (made, snapshot)
        self._touched: set[str | None] = set()  # spans a task of which finished since
        self.fold_grace = FOLD_GRACE
        self._ending: set[str | None] = set()  # the same, for the finished-span log
        self.finished: FinishedLog[str] = FinishedLog(FINISHED_LENGTH)  # span ids, as they end

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        scheduler.handlers[HANDLER] = self.handle

    async def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.handlers.pop(HANDLER, None)

    # -- per task: the only per-task work is here, one tuple and one counter ---------------

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kw: Any) -> None:
        if start != "processing" or finish not in ("memory", "erred"):
            return
        ts = self.scheduler.tasks.get(key) if self.scheduler is not None else None
        prefix = ts.prefix.name if ts is not None else key_split(key)
        span_id = ts.group.span_id if ts is not None else None
        self._touched.add(span_id)
        self._ending.add(span_id)
        if span_id in self.folded:
            span_id = FOLDED_ID
        counts = self.counts.get(span_id)
        if counts is None:
            counts = self.counts[span_id] = {}
        counts[prefix] = counts.get(prefix, 0) + 1
        startstops = tuple(
            (ss["action"], float(ss["start"]), float(ss["stop"]), ss.get("source"))
            for ss in kw.get("startstops") or ()
        )
        if not startstops:
            return
        self.records.append(
            (
                self.index,
                key,
                prefix,
                span_id,
                kw.get("worker") or "",
                kw.get("thread"),
                "OK" if finish == "memory" else "error",
                int(kw.get("nbytes") or 0),
                startstops,
            )
        )
        self.index += 1

    # -- the handler --------------------------------------------------------------------

    async def handle(self, comm: Any = None, read: str = "", **args: Any) -> dict[str, Any]:
        """One read: ``{"now": scheduler time, "data": pickled answer}``, or
        ``{"error": ..., "message": ...}`` for a read that failed as expected."""
        from distributed.metrics import time

        if self.scheduler.plugins.get(NAME) is not self:
            return {}  # unregistered: the reader installs a new plugin, which answers
        reader = self.readers().get(read)
        if reader is None:
            return {"now": time(), "error": "ValueError", "message": f"unknown read {read!r}"}
        try:
            data = await reader(**args)
        except KeyError as exc:
            return {"now": time(), "error": "KeyError", "message": str(exc.args[0])}
        except Exception as exc:  # answered, not raised: no traceback per poll in its log
            message = f"{read} failed on the scheduler: {type(exc).__name__}: {exc}"
            return {"now": time(), "error": type(exc).__name__, "message": message}
        return {"now": time(), "data": pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)}

    def readers(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        return {
            "hello": self.hello,
            "metrics": self.metrics,
            "spans": self.spans,
            "finished_spans": self.finished_spans,
            "span_metrics": self.span_metrics,
            "progress": self.progress,
            "info": self.info,
            "memory": self.memory,
            "stream_index": self.stream_index,
            "stream_since": self.stream_since,
            "stream_window": self.stream_window,
            "profiles": self.profiles,
            "profile_metadata": self.profile_metadata,
            "run_on_workers": self.run_on_workers,
        }

    async def hello(self) -> dict[str, Any]:
        import dask

        return {
            "profile_interval": _seconds(dask.config.get("distributed.worker.profile.interval")),
            "profile_cycle": _seconds(dask.config.get("distributed.worker.profile.cycle")),
        }

    async def _fresh(self, refresh: bool, timeout: float) -> None:
        """With ``refresh``: wait (at most ``timeout``) for two heartbeats of every worker
        (the first may have been collected before this read), so that what workers
        measured before it is in. Dask workers cannot be asked for metrics out of turn."""
        if not refresh:
            return
        from distributed.metrics import time

        deadline = time() + timeout
        seen = {a: (ws.last_seen, 0) for a, ws in self.scheduler.workers.items()}
        while time() < deadline:
            waiting = False
            for address, (last, n) in list(seen.items()):
                ws = self.scheduler.workers.get(address)
                if ws is None:  # gone: nothing more will come from it
                    del seen[address]
                    continue
                if ws.last_seen != last:
                    seen[address] = last, n = ws.last_seen, n + 1
                waiting = waiting or n < 2
            if not waiting:
                return
            await asyncio.sleep(0.02)

    async def metrics(self, refresh: bool = False, timeout: float = 3.0) -> dict[Any, float]:
        """The protocol's shape: ``("execute", span_id, prefix, activity, unit)`` from each
        span's own metrics, plus the plain contexts from the scheduler's totals."""
        await self._fresh(refresh, timeout)
        self._fold()
        out: dict[Any, float] = {}
        spans = self.scheduler.extensions.get("spans")
        folded = self.folded
        for span_id, span in spans.spans.items() if spans is not None else ():
            if span_id in folded:
                continue
            # Each span's own metrics, which Dask keeps private: its public
            # ``cumulative_worker_metrics`` sums the whole subtree and adds an idle line
            # worked out from the cluster's thread history, at the cost of a walk of
            # both per span on every poll (thousands of spans); a parent's own numbers
            # are not to be had back from it exactly (subtracting the children's sums
            # leaves float residue). Folding, once per span, reads the public one.
            for key, value in span._cumulative_worker_metrics.items():
                if isinstance(key, tuple) and len(key) == 4 and key[0] == "execute":
                    out[("execute", span_id, *key[1:])] = value
        if self.fold is not None:
            for key, value in self.fold.metrics.items():
                out[("execute", FOLDED_ID, *key[1:])] = value
        for span_id, counts in self.counts.items():
            for prefix, n in counts.items():
                out[("execute", span_id, prefix, "tasks", "count")] = n
        for key, value in self.scheduler.cumulative_worker_metrics.items():
            if isinstance(key, tuple) and len(key) == 3 and key[0] in PLAIN_CONTEXTS:
                out[key] = value
        return out

    def _subtree_counts(self, span: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in span.traverse_spans():
            for prefix, n in self.counts.get(node.id, {}).items():
                out[prefix] = out.get(prefix, 0) + n
        return out

    # -- folding old default spans: reads stay bounded however many there were ----------

    def _fold(self) -> None:
        """Fold the finished default spans older than the latest ``keep_default_spans``
        (each once, ``fold_grace`` seconds after it ended) into ``FOLDED_ID``. Looks at
        the unfolded default spans only: a bounded number."""
        from distributed.metrics import time

        ext = self.scheduler.extensions.get("spans")
        defaults = ext.spans_search_by_name.get(DEFAULT, []) if ext is not None else []
        while self._fold_from < len(defaults) and defaults[self._fold_from].id in self.folded:
            self._fold_from += 1
        cutoff = time() - self.fold_grace
        finished = [
            s
            for s in defaults[self._fold_from :]
            if s.id not in self.folded and s.done and s.stop < cutoff
        ]
        for span in finished[: how_many_to_fold(len(finished), self.keep_default_spans)]:
            self._fold_one(span)

    def _fold_one(self, span: Any) -> None:
        """Add ``span`` (finished: what its tasks did no longer changes) to the fold."""
        snap = self._snapshot(span)
        self.folded.add(span.id)
        self._snapshots.pop(span.id, None)
        fold = self.fold
        if fold is None:
            fold = self.fold = FoldTotals(snap["enqueued"])
        # a default span has no children: the public subtree read is its own metrics,
        # but for the idle line it adds (the fold works its own out, as the engine does)
        own = {
            key: value
            for key, value in span.cumulative_worker_metrics.items()
            if isinstance(key, tuple) and len(key) == 4 and key[0] == "execute"
            if key != IDLE
        }
        intervals = [(float(lo), float(hi), float(n)) for lo, hi, n in span.nthreads_intervals]
        fold.add_span(snap["enqueued"], intervals, own, snap["code"])
        durations = {str(k): float(v) for k, v in span.all_durations.items()}
        fold.add_tasks(snap["start"], snap["stop"], durations, snap["nbytes_total"], snap["states"])
        into = self.counts.setdefault(FOLDED_ID, {})
        for prefix, n in self.counts.pop(span.id, {}).items():
            into[prefix] = into.get(prefix, 0) + n

    def _fold_snapshot(self, fold: FoldTotals) -> dict[str, Any]:
        """The fold as ``spans()`` gives a span: its metrics with the idle thread time
        and the task counts, as ``_span_metrics`` gives a span's."""
        metrics = with_idle(fold.metrics, fold.active_cpu_seconds)
        for prefix, n in self.counts.get(FOLDED_ID, {}).items():
            metrics[("execute", prefix, "tasks", "count")] = n
        states = dict.fromkeys(STATES, 0)
        states.update(fold.states)
        return {
            "id": FOLDED_ID,
            "name": DEFAULT,
            "parent": None,
            "children": (),
            "enqueued": fold.enqueued,
            "start": fold.start,
            "stop": fold.stop,
            "duration": sum(fold.durations.values()),
            "nbytes_total": fold.nbytes_total,
            "states": states,
            "done": True,
            "active_cpu_seconds": fold.active_cpu_seconds,
            "metrics": metrics,
            "code": tuple(fold.code),
        }

    def _span_metrics(self, span: Any) -> dict[Any, float]:
        """A span's subtree metrics keyed ``("execute", prefix, activity, unit)``, its
        "idle or other spans" line included (the engine's ``IDLE`` is Dask's key)."""
        out: dict[Any, float] = {}
        for key, value in span.cumulative_worker_metrics.items():
            if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "execute"):
                continue
            out[key] = value
        for prefix, n in self._subtree_counts(span).items():
            out[("execute", prefix, "tasks", "count")] = n
        return out

    async def spans(self, refresh: bool = False, timeout: float = 3.0) -> list[dict[str, Any]]:
        await self._fresh(refresh, timeout)
        self._fold()
        from distributed.metrics import time

        ext = self.scheduler.extensions.get("spans")
        spans = ext.spans if ext is not None else {}
        changed: set[str] = set()  # the spans touched and their ancestors
        for span_id in self._touched:
            node = spans.get(span_id)
            while node is not None and node.id not in changed:
                changed.add(node.id)
                node = node.parent
        self._touched.clear()
        now = time()
        out = []
        for span in spans.values():
            if span.id in self.folded:
                continue
            kept = self._snapshots.get(span.id)
            if (
                not refresh
                and kept is not None
                and kept[1]["done"]
                and span.id not in changed
                and now - kept[0] < SNAPSHOT_SECONDS
            ):
                out.append(kept[1])
                continue
            snap = self._snapshot(span)
            self._snapshots[span.id] = (now, snap)
            out.append(snap)
        if self.fold is not None:
            out.append(self._fold_snapshot(self.fold))
        return out

    def _collect_finished(self) -> None:
        """Log the spans (and their parents) a task of which ended since the last look
        and that are done now, children first."""
        ext = self.scheduler.extensions.get("spans")
        if ext is None:
            self._ending.clear()
            return
        candidates: dict[str, Any] = {}
        for span_id in self._ending:
            node = ext.spans.get(span_id)
            while node is not None and node.id not in candidates:
                candidates[node.id] = node
                node = node.parent
        self._ending.clear()
        for span in children_first(candidates.values()):
            if span.done and any(True for _ in span.traverse_groups()):
                self.finished.append(span.id)

    async def finished_spans(
        self, cursor: int = 0, timeout: float = 3.0
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """``(cursor, missed, records)``: the spans logged as finished since ``cursor``,
        read after two heartbeats of every worker (their last tasks' metrics)."""
        self._collect_finished()
        ids, count, missed = self.finished.since(cursor)  # another scheduler's cursor: 0
        if not ids:
            return count, missed, []
        await self._fresh(True, timeout)
        ext = self.scheduler.extensions["spans"]
        workers = len(self.scheduler.workers)
        threads = int(self.scheduler.total_nthreads)
        out = []
        for span in filter(None, map(ext.spans.get, ids)):  # (a span Dask forgot: None)
            tasks, nbytes = by_prefix(span.traverse_groups())
            snap = self._snapshot(span)
            record = {"span": snap, "root": root_of(span).id, "tasks": tasks, "nbytes": nbytes}
            out.append({**record, "workers": workers, "threads": threads})
        return count, missed, out

    def _snapshot(self, span: Any) -> dict[str, Any]:
        states = dict.fromkeys(STATES, 0)
        states.update(span.states)
        parent = span.parent
        return {
            "id": span.id,
            "name": tuple(span.name),
            "parent": parent.id if parent is not None else None,
            "children": tuple(c.id for c in span.children),
            "enqueued": float(span.enqueued),
            "start": float(span.start),
            "stop": float(span.stop),
            "duration": float(span.duration),
            "nbytes_total": int(span.nbytes_total),
            "states": states,
            "done": bool(span.done),
            "active_cpu_seconds": float(span.active_cpu_seconds),
            "metrics": self._span_metrics(span),
            "code": tuple(
                tuple(
                    (str(sc.filename), int(sc.lineno_frame), "", str(sc.code)[:2000])
                    for sc in stack
                )
                for stack in span.code[:3]
            ),
        }

    async def span_metrics(self, selector: Any) -> tuple[dict[Any, float], str]:
        ext = self.scheduler.extensions["spans"]
        if selector == FOLDED_ID and self.fold is not None:
            return self._fold_snapshot(self.fold)["metrics"], "default (folded)"
        if isinstance(selector, str) and selector in ext.spans:
            span = ext.spans[selector]
            return self._span_metrics(span), " / ".join(span.name)
        tags = (selector,) if isinstance(selector, str) else tuple(selector)
        found = list(ext.find_by_tags(*tags))
        if not found:
            seen = sorted({t for name in ext.spans_search_by_name for t in name})
            raise KeyError(f"No span has the tag(s) {tags!r}; tags seen so far: {seen[:10]!r}.")
        merged: dict[Any, float] = {}
        for span in found:  # the roots of the matching subtrees: no double counting
            for key, value in self._span_metrics(span).items():
                merged[key] = merged.get(key, 0) + value
        return merged, " | ".join(tags)

    async def progress(self) -> dict[str, dict[str, int]]:
        out = {}
        for name, tp in self.scheduler.task_prefixes.items():
            states = dict.fromkeys(STATES, 0)
            states.update(tp.states)
            out[name] = states
        return out

    async def info(self) -> dict[str, Any]:
        workers = {}
        for address, ws in self.scheduler.workers.items():
            workers[address] = {
                "name": ws.name if isinstance(ws.name, str | int) else str(ws.name),
                "nthreads": int(ws.nthreads),
                "memory_limit": int(ws.memory_limit) if ws.memory_limit else None,
                "processing": len(ws.processing),
                "paused": str(getattr(ws.status, "name", ws.status)) == "paused",
                "nbytes": int(ws.nbytes),
                "keys": len(ws.has_what),
                "memory": int((ws.metrics or {}).get("memory") or 0),
                "pid": int(ws.pid) if ws.pid else None,
                "host": ws.host,
                "last_seen": float(ws.last_seen) if ws.last_seen else None,
                "load": dict(ws.metrics or {}),  # its last heartbeat: the worker table's
            }
        return {
            "workers": workers,
            "total_nthreads": int(self.scheduler.total_nthreads),
            "tasks": len(self.scheduler.tasks),
        }

    async def memory(self) -> tuple[int, int, int, int]:
        """(process, managed, spilled, unmanaged_old) bytes, each process counted once
        (``unmanaged_old``: Dask's, each process's once)."""
        by_process: dict[Any, int] = {}
        old_by_process: dict[Any, int] = {}
        managed = spilled = 0
        for address, ws in self.scheduler.workers.items():
            metrics = ws.metrics or {}
            process = (ws.host, ws.pid) if ws.pid else address
            by_process[process] = int(metrics.get("memory") or 0)
            try:
                old_by_process[process] = int(ws.memory.unmanaged_old)
            except AttributeError:  # an older distributed
                pass
            managed += int(ws.nbytes)
            spilled += int((metrics.get("spilled_bytes") or {}).get("disk") or 0)
        return sum(by_process.values()), managed, spilled, sum(old_by_process.values())

    async def stream_index(self) -> int:
        return self.index

    async def stream_since(self, index: int) -> list[Record]:
        first = self.index - len(self.records)  # the oldest record still kept
        tail = len(self.records) - max(0, index - first)
        if tail <= 0:
            return []
        out = list(islice(reversed(self.records), tail))  # from the end: O(tail)
        out.reverse()
        return out

    async def stream_window(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[Record]:
        out = []
        for record in reversed(self.records):  # newest first: a short window stops early
            end = max(ss[2] for ss in record[8])
            if stop is not None and end > stop:
                continue
            if start is not None and end < start:
                if stop is None:
                    break  # records end roughly in order; older ones are older still
                continue
            out.append(record)
            if count and len(out) >= count:
                break
        out.reverse()
        return out

    async def _ask(
        self, workers: Iterable[str] | None, call: Callable[[Any], Any]
    ) -> dict[str, Any]:
        """``call(rpc)`` on every worker at once; a worker that fails or does not answer
        in time is left out."""
        addresses = list(self.scheduler.workers) if workers is None else list(workers)
        addresses = [a for a in addresses if a in self.scheduler.workers]

        async def one(address: str) -> Any:
            return await asyncio.wait_for(call(self.scheduler.rpc(address)), WORKER_TIMEOUT)

        answers = await asyncio.gather(*(one(a) for a in addresses), return_exceptions=True)
        return {a: r for a, r in zip(addresses, answers) if not isinstance(r, BaseException)}

    async def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list[tuple[Any, ...]]]:
        trees = await self._ask(
            workers, lambda rpc: rpc.profile(start=start, stop=stop, key=prefix, server=False)
        )
        return {address: to_flat(tree) for address, tree in trees.items()}

    async def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, Any]:
        return await self._ask(
            workers, lambda rpc: rpc.profile_metadata(start=start or 0, stop=stop)
        )

    async def run_on_workers(
        self, function: bytes, workers: list[str] | None = None
    ) -> dict[str, Any]:
        """A function pickled by the client, run on each worker (Dask's ``run``)."""
        from distributed.protocol.serialize import Serialized, deserialize

        answers = await self._ask(workers, lambda rpc: rpc.run(function=function))
        out = {}
        for address, answer in answers.items():
            if answer.get("status") != "OK":
                continue
            result = answer["result"]
            if isinstance(result, Serialized):  # the scheduler leaves results serialized
                result = deserialize(result.header, result.frames)  # type: ignore[no-untyped-call]
            out[address] = result
        return out


def read_transfer_logs(dask_worker: Any) -> dict[str, list[dict[str, Any]]]:
    """Run on a Dask worker: its transfer logs as plain dicts (pickled by value)."""
    return {
        "incoming": [dict(e) for e in dask_worker.transfer_incoming_log],
        "outgoing": [dict(e) for e in dask_worker.transfer_outgoing_log],
    }


def _seconds(value: str | float) -> float:
    from dask.utils import parse_timedelta

    return float(parse_timedelta(value, default="ms"))
