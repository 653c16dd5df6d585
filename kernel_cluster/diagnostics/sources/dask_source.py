"""DiagnosticsSource over a Dask distributed cluster: every view, fed by Dask.

    from distributed import Client
    import kernel_cluster
    dask_client = Client("tcp://scheduler:8786")
    kernel_cluster.attach(dask_client)     # views made without a client read it
    FineMetrics(dask_client)               # or hand it to any view directly

``DaskSource`` reads what a Dask scheduler already keeps (its fine performance
metrics, the spans extension, task prefixes, workers' heartbeats) through a small
scheduler plugin (``dask_plugin.ViewsPlugin``) installed on attach. Each read is
one round trip to one handler, answered on the scheduler's event loop with a
snapshot, and bounded by ``timeout`` seconds: a scheduler that goes away makes
every read fail fast with ``SchedulerUnreachable`` (a RuntimeError, which the
widgets, panels and samplers take as "this cluster is gone": one message, updates
stop), never a hung kernel.

Nothing here runs at import of ``kernel_cluster``: ``source.source_of`` imports
this module only when handed an object whose type comes from ``distributed``.

Mapping Dask's data to the protocol, and where they differ:

- Execute metrics. Dask's workers key them ``("execute", span_id, prefix,
  activity, unit)`` like the engine, but its scheduler sums them without the span
  (``cumulative_worker_metrics``) and per span in the spans extension. The
  plugin rebuilds the 5-part keys from each span's own metrics. Dask's activities
  keep their names (``thread-cpu``, ``thread-noncpu``, ``executor``, ``other``,
  ``memory-read``, ``disk-read``, ``serialize``, ...); it has no per-thread
  ``idle`` key in ``fine_metrics``; a span's metrics have its "idle or other spans"
  line, ``("execute", "N/A", "idle or other spans", "seconds")``, as the engine's do.
- Task counts. Dask does not count tasks as a metric; the plugin counts tasks that
  finished (processing to memory or erred) per span and prefix, from the moment it
  is installed, as ``("execute", span_id, prefix, "tasks", "count")``.
- Other contexts. ``gather-dep``, ``get-data`` and ``memory-monitor`` metrics are
  Dask's, 3-part keys as in the engine; Dask measures no bytes for ``gather-dep``
  (its transfer logs do: ``transfer_logs``). Keys outside the protocol (``p2p``
  shuffle metrics, plain-string keys such as ``latency``) are left out.
- Fresh metrics. The engine can ask its workers for their latest numbers;
  Dask's arrive with heartbeats, so ``refresh=True`` waits (up to 3 s) for two
  heartbeats of every worker. ``refresh=False`` reads what is there at once.
- Spans. Dask's, with its own ``enqueued``/``start``/``stop``/``duration``/
  ``active_cpu_seconds``; its state ``no-worker`` is kept as an extra state. Dask
  keeps every span; the plugin folds the old finished default spans into one as the
  engine does (core/span_folding.py, shared), so that reads stay bounded.
  Code snippets carry the file and line, not the function's name. Dask puts a
  task in the span of its TaskGroup (its function, by key name) while that group
  lives: tasks of a function submitted under a new span while earlier tasks of it
  are still held land in the earlier span, and a loop of ``submit(f).result()``
  may reuse one default span rather than making one per iteration.
- Finished spans (the run history). The plugin logs a span as finished when, after
  one of its tasks ended, every task of its subtree is done (Dask's ``Span.done``);
  the read waits for two heartbeats of every worker first, so that the spans'
  last metrics are in.
- Task stream. Kept by the plugin from the moment it is installed (earlier tasks
  are not in it), numbered, the last ``STREAM_LENGTH`` records.
- Profiles. Dask's workers' statistical profiles, read per worker and flattened on
  the scheduler; ``own`` samples are computed there (Dask does not keep them).
  ``profile_interval``/``profile_cycle_interval`` are the scheduler's settings
  (``distributed.worker.profile.*``), which workers started alike share.
- Progress. Dask's task prefixes count the tasks the scheduler still holds: once
  released and forgotten, a task leaves the counts (the engine keeps counting
  it as ``forgotten``).
- Memory. Process memory from the heartbeats (each host and pid once), managed
  bytes are ``WorkerState.nbytes``, spilled bytes are those on disk.
- ``kind``: ``"embedded"`` when every worker runs in this process
  (``LocalCluster(processes=False)``), ``"processes"`` otherwise.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, cast

import cloudpickle

from ...core.critical_path import TaskRun
from ..changes import Differ
from ..snapshots import (
    Changes,
    ClusterInfo,
    CodeFrame,
    FinishedSpan,
    FinishedSpans,
    FlatRow,
    MemorySnapshot,
    Metrics,
    ProfileMetadata,
    SourceKind,
    SpanInfo,
    StartStop,
    TaskStreamRecord,
    TransferLogEntry,
    TransferLogs,
    WorkerInfo,
    records_runs,
)
from ..source import WouldBlock
from . import dask_plugin

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0  # seconds any one read may take


class SchedulerUnreachable(RuntimeError):
    """The Dask scheduler behind a DaskSource does not answer (gone, or stuck)."""


def is_dask_client(obj: object) -> bool:
    """Whether ``obj`` is a ``distributed.Client``, without importing distributed
    unless the object's type comes from it."""
    if not type(obj).__module__.startswith("distributed"):
        return False
    from distributed import Client

    return isinstance(obj, Client)


_sources: weakref.WeakKeyDictionary[Any, DaskSource] = weakref.WeakKeyDictionary()
_sources_lock = threading.Lock()
_pickle_lock = threading.Lock()


def source_for(client: Any) -> DaskSource:
    """The one DaskSource of a ``distributed.Client`` (made, and attached, once)."""
    with _sources_lock:
        # a source holds its client: forget those of closed clients, or neither would go
        for old in [c for c in _sources if getattr(c, "status", None) == "closed"]:
            del _sources[old]
        source = _sources.get(client)
        if source is None:
            source = _sources[client] = DaskSource(client)
        return source


def _address_of(client: Any) -> str | None:
    """The scheduler's address as ``client`` knows it; a closed distributed.Client
    forgets it, but still holds what it was made with (an address, or a cluster)."""
    address = getattr(getattr(client, "scheduler", None), "address", None)
    if address:
        return str(address)
    start = getattr(client, "_start_arg", None)
    if isinstance(start, str):
        return start
    address = getattr(start or getattr(client, "cluster", None), "scheduler_address", None)
    return str(address) if address else None


def _by_value(obj: object) -> bytes:
    """``obj`` pickled with this package's scheduler-side module inlined (and the pure
    modules it shares with the engine, ``dask_plugin.PICKLED_WITH``), so a scheduler
    or worker without kernel_cluster installed can load it."""
    modules = [dask_plugin, *dask_plugin.PICKLED_WITH]
    with _pickle_lock:
        # modules already registered (by a user, say) stay so
        mine = [m for m in modules if m.__name__ not in cloudpickle.list_registry_pickle_by_value()]
        for module in mine:
            cloudpickle.register_pickle_by_value(module)
        try:
            return cast(bytes, cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        finally:
            for module in mine:
                cloudpickle.unregister_pickle_by_value(module)


class DaskSource:
    """The DiagnosticsSource of a Dask cluster, read through ``client`` (a
    ``distributed.Client``). ``timeout``: seconds one read may take."""

    def __init__(self, client: Any, timeout: float = DEFAULT_TIMEOUT) -> None:
        """An asynchronous ``client`` is read from other threads than its loop's (the
        views' own, ``async with MemorySampler().sample(...)``'s); a read on its loop
        raises ``WouldBlock``."""
        self.client = client
        self.timeout = timeout
        self._address = _address_of(client)  # kept for the errors once it is closed
        self._offset = 0.0  # scheduler clock minus ours, from the last answer
        self._last_now = 0.0
        self._transfer_fn: bytes | None = None
        self._install_lock = threading.Lock()
        self._clock_lock = threading.Lock()
        self._installed = False
        self._kind: SourceKind | None = None
        self._dashboard: str | None = None  # "" once known to have none
        self._hello: dict[str, float] | None = None
        self._differ: Differ | None = None
        if not self._on_client_loop():  # else on the first read from another thread
            self._settings()

    def _settings(self) -> dict[str, float]:
        """The scheduler's profile settings, read once."""
        if self._hello is None:
            self._hello = cast(dict[str, float], self._read("hello"))
        return self._hello

    def _on_client_loop(self) -> bool:
        """Whether this thread runs the event loop of an asynchronous client (where a
        read would wait for the loop it blocks)."""
        if not getattr(self.client, "asynchronous", False):
            return False
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop = getattr(self.client, "loop", None)
        return running is getattr(loop, "asyncio_loop", loop)

    def __repr__(self) -> str:
        return f"<DaskSource of the Dask scheduler at {self.address}>"

    @property
    def address(self) -> str:
        live = _address_of(self.client)
        if live:
            self._address = live
        return str(live or self._address or "?")

    # -- one read: a round trip to the plugin's handler ----------------------------------------

    def _install(self) -> None:
        plugin = _by_value(dask_plugin.ViewsPlugin())
        self._call(
            lambda: self.client.scheduler.register_scheduler_plugin(
                plugin=plugin, name=dask_plugin.NAME, idempotent=True
            ),
            self.timeout,
        )
        self._installed = True

    def _call(self, make: Callable[[], Any], timeout: float) -> Any:
        client = self.client
        status = getattr(client, "status", "running")
        if status != "running":
            raise SchedulerUnreachable(
                f"The Dask scheduler at {self.address} is not reachable: the "
                f"distributed.Client the views read it through is {status}. Views stop "
                "updating; connect a new distributed.Client and call "
                "kernel_cluster.attach(client) (or pass it to the view)."
            )

        async def call() -> Any:
            return await make()

        try:
            if getattr(client, "asynchronous", False):
                if self._on_client_loop():
                    raise WouldBlock(
                        "This view reads the Dask cluster of an asynchronous "
                        "distributed.Client, whose event loop runs this very code: it "
                        "cannot wait for the answer here. Read from another thread "
                        "(`await asyncio.to_thread(...)`; widgets and `async with "
                        "MemorySampler().sample(...)` do), or use a synchronous client."
                    )
                from distributed.utils import sync

                return sync(client.loop, call, callback_timeout=timeout)
            return client.sync(call, callback_timeout=timeout)
        except TimeoutError as exc:
            raise SchedulerUnreachable(
                f"The Dask scheduler at {self.address} did not answer within {timeout:g} s: "
                "it is gone or too busy. Views stop updating; make them again once it "
                "answers (or pass a longer timeout to DaskSource)."
            ) from exc
        except (OSError, EOFError) as exc:  # distributed's CommClosedError is an OSError
            raise SchedulerUnreachable(
                f"Lost the connection to the Dask scheduler at {self.address}: {exc}. "
                "Views stop updating."
            ) from exc

    def _read(self, read: str, timeout: float | None = None, **args: Any) -> object:
        """Ask the plugin for one snapshot (installing it first if need be)."""
        timeout = self.timeout if timeout is None else timeout
        for _ in range(2):
            with self._install_lock:
                if not self._installed:
                    self._install()
            reply = self._call(
                lambda: self.client.scheduler.kernel_cluster_views(read=read, **args), timeout
            )
            if isinstance(reply, Mapping) and "now" in reply:
                break
            # no plugin there (a scheduler restarted at the same address): install it again
            self._installed = False
        else:
            raise SchedulerUnreachable(
                f"The Dask scheduler at {self.address} gave no answer to a view's read "
                f"({reply!r:.200}), even with the views' plugin installed again."
            )
        t1 = time.time()
        # the answer's time is taken as it leaves the scheduler (after a refresh's wait,
        # too): off by the one-way trip back only
        self._offset = float(reply["now"]) - t1
        if "error" in reply:
            if reply["error"] == "KeyError":
                raise KeyError(reply["message"])
            raise ValueError(f"The Dask scheduler could not answer a view: {reply['message']}")
        return pickle.loads(reply["data"])

    # -- the protocol --------------------------------------------------------------------------

    @property
    def kind(self) -> SourceKind:
        """Told by the first workers seen (a cluster does not change how it runs them)."""
        if self._kind is None:
            here = {socket.gethostname(), "127.0.0.1", "localhost"}
            workers = self.info().workers.values()
            if not workers:
                return "processes"  # no worker yet: ask again later
            in_here = all(w.pid == os.getpid() for w in workers) and self._local(here)
            self._kind = "embedded" if in_here else "processes"
        return self._kind

    def _local(self, hosts: set[str]) -> bool:
        host = self.address.split("://")[-1].rsplit(":", 1)[0]
        return host in hosts or host.startswith("inproc") or self.address.startswith("inproc")

    def now(self) -> float:
        with self._clock_lock:  # never backwards, though the offset estimate moves
            self._last_now = max(self._last_now, time.time() + self._offset)
            return self._last_now

    def fine_metrics(self, refresh: bool = True) -> Metrics:
        return cast(Metrics, self._read("metrics", self.timeout + 3 * refresh, refresh=refresh))

    def span_metrics(self, selector: str | tuple[str, ...]) -> tuple[Metrics, str]:
        chosen = selector if isinstance(selector, str) else list(selector)
        # metrics as fresh as fine_metrics() gives them
        self._read("metrics", self.timeout + 3, refresh=True)
        metrics, label = cast(tuple[Metrics, str], self._read("span_metrics", selector=chosen))
        return metrics, label

    def changes_since(self, cursor: int) -> Changes:
        """What changed since ``cursor``, by diffing this read with the last one here
        (Dask's scheduler keeps no change log): the same answer as the engine's, so
        the live views do not ask which source they read."""
        differ = self._differ
        if differ is None:
            differ = self._differ = Differ(self)
        return differ.changes_since(cursor)

    def spans(self, refresh: bool = True) -> list[SpanInfo]:
        raw = cast(
            list[dict[str, Any]], self._read("spans", self.timeout + 3 * refresh, refresh=refresh)
        )
        return [_span(s) for s in raw]

    def finished_spans(self, cursor: int = 0) -> FinishedSpans:
        raw = self._read("finished_spans", self.timeout + 3, cursor=cursor)
        new_cursor, missed, records = cast(tuple[int, int, list[dict[str, Any]]], raw)
        return FinishedSpans(
            tuple(
                FinishedSpan(
                    span=_span(r["span"]),
                    root=str(r["root"]),
                    tasks={
                        str(p): {str(k): int(v) for k, v in c.items()}
                        for p, c in r["tasks"].items()
                    },
                    nbytes={str(p): int(n) for p, n in r["nbytes"].items()},
                    workers=int(r["workers"]),
                    threads=int(r["threads"]),
                )
                for r in records
            ),
            int(new_cursor),
            int(missed),
        )

    def progress(self) -> dict[str, dict[str, int]]:
        return cast(dict[str, dict[str, int]], self._read("progress"))

    def info(self) -> ClusterInfo:
        raw = cast(dict[str, Any], self._read("info"))
        return ClusterInfo(
            workers={a: _worker(a, w) for a, w in raw["workers"].items()},
            total_nthreads=int(raw["total_nthreads"]),
            tasks=int(raw["tasks"]),
            engine="dask",
            scheduler_address=self.address,
            dashboard_link=self._dashboard_link(),
        )

    def _dashboard_link(self) -> str | None:
        """Dask's dashboard, if the scheduler serves one (it needs bokeh)."""
        if self._dashboard is None:
            try:
                link = self.client.dashboard_link
            except Exception:  # no dashboard service, or the client is closing
                link = None
            self._dashboard = link or ""
        return self._dashboard or None

    def memory(self) -> MemorySnapshot:
        reply = cast(tuple[int, ...], self._read("memory"))
        process, managed, spilled = reply[:3]
        return MemorySnapshot(
            process_bytes=process,
            managed_bytes=managed,
            unmanaged_bytes=max(0, process - managed),
            spilled_bytes=spilled,
            unmanaged_old_bytes=reply[3] if len(reply) > 3 else None,  # an older plugin
        )

    def task_stream_index(self) -> int:
        return cast(int, self._read("stream_index"))

    def task_stream_since(self, index: int) -> list[TaskStreamRecord]:
        return _records(cast(list[tuple[Any, ...]], self._read("stream_since", index=index)))

    def task_stream(
        self, start: float | None = None, stop: float | None = None, count: int | None = None
    ) -> list[TaskStreamRecord]:
        raw = self._read("stream_window", start=start, stop=stop, count=count)
        return _records(cast(list[tuple[Any, ...]], raw))

    def task_runs(
        self, span_ids: Collection[str] | None = None, start: float | None = None
    ) -> list[TaskRun]:
        return records_runs(self.task_stream(start=start), span_ids)

    def profiles(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, list[FlatRow]]:
        raw = self._read("profiles", start=start, stop=stop, prefix=prefix, workers=workers)
        rows = cast(dict[str, list[tuple[Any, ...]]], raw)
        return {a: [cast(FlatRow, tuple(r)) for r in flat] for a, flat in rows.items()}

    def profile_metadata(
        self,
        start: float | None = None,
        stop: float | None = None,
        workers: list[str] | None = None,
    ) -> dict[str, ProfileMetadata]:
        raw = self._read("profile_metadata", start=start, stop=stop, workers=workers)
        metas = cast(dict[str, dict[str, Any]], raw)
        cycle = self.profile_cycle_interval()
        return {a: _metadata(m, cycle) for a, m in metas.items()}

    def profile_interval(self) -> float:
        return float(self._settings()["profile_interval"])

    def profile_cycle_interval(self) -> float:
        return float(self._settings()["profile_cycle"])

    def transfer_logs(self, workers: list[str] | None = None) -> dict[str, TransferLogs]:
        if self._transfer_fn is None:
            self._transfer_fn = _by_value(dask_plugin.read_transfer_logs)
        raw = self._read("run_on_workers", function=self._transfer_fn, workers=workers)
        logs = cast(dict[str, dict[str, list[dict[str, Any]]]], raw)
        return {
            a: TransferLogs(
                incoming=_transfers(log["incoming"], "who"),
                outgoing=_transfers(log["outgoing"], "who"),
            )
            for a, log in logs.items()
        }


# -- Dask's plain data to snapshots ----------------------------------------------------------


def _span(s: Mapping[str, Any]) -> SpanInfo:
    return SpanInfo(
        id=str(s["id"]),
        name=tuple(s["name"]),
        parent=s["parent"],
        children=tuple(s["children"]),
        enqueued=float(s["enqueued"]),
        start=float(s["start"]),
        stop=float(s["stop"]),
        duration=float(s["duration"]),
        nbytes_total=int(s["nbytes_total"]),
        states={str(k): int(v) for k, v in s["states"].items()},
        done=bool(s["done"]),
        active_cpu_seconds=float(s["active_cpu_seconds"]),
        metrics=dict(s["metrics"]),
        code=tuple(tuple(cast(CodeFrame, tuple(f)) for f in stack) for stack in s["code"]),
    )


def _worker(address: str, w: Mapping[str, Any]) -> WorkerInfo:
    # the worker table's counts, from the worker's last heartbeat metrics
    load = w.get("load") or {}
    counts = load.get("task_counts") or {}
    cpu = load.get("cpu")
    return WorkerInfo(
        address=address,
        name=w["name"],
        nthreads=int(w["nthreads"]),
        memory_limit_bytes=w["memory_limit"],
        processing=int(w["processing"]),
        paused=bool(w["paused"]),
        nbytes=int(w["nbytes"]),
        keys=int(w["keys"]),
        memory_bytes=int(w["memory"]),
        pid=w["pid"],
        last_seen=w["last_seen"],
        executing=int(counts.get("executing", 0)),
        ready=int(counts.get("ready", 0)) + int(counts.get("constrained", 0)),
        managed_bytes=int(load.get("managed_bytes") or 0),
        spilled_bytes=int((load.get("spilled_bytes") or {}).get("disk") or 0),
        cpu_percent=float(cpu) if isinstance(cpu, int | float) else None,
    )


def _records(raw: list[tuple[Any, ...]]) -> list[TaskStreamRecord]:
    return [
        TaskStreamRecord(
            index=int(index),
            key=key,
            prefix=str(prefix),
            span_id=span_id,
            worker=str(worker),
            thread=thread,
            status=str(status),
            nbytes=int(nbytes),
            startstops=tuple(StartStop(a, s, e, src) for a, s, e, src in startstops),
        )
        for index, key, prefix, span_id, worker, thread, status, nbytes, startstops in raw
    ]


def _metadata(meta: Mapping[str, Any], cycle: float) -> ProfileMetadata:
    """Dask's ``{"counts": [(t, n)], "keys": [(t, {prefix: n})]}`` as the protocol's
    per-prefix series."""
    keys: dict[str, list[tuple[float, int]]] = {}
    for t, counts in meta.get("keys", ()):
        for prefix, n in counts.items():
            keys.setdefault(str(prefix), []).append((float(t), int(n)))
    return ProfileMetadata(
        counts=tuple((float(t), int(n)) for t, n in meta.get("counts", ())),
        keys={p: tuple(points) for p, points in keys.items()},
        cycle_seconds=cycle,
    )


def _transfers(entries: list[dict[str, Any]], peer: str) -> tuple[TransferLogEntry, ...]:
    out = []
    for e in entries:
        keys = e.get("keys") or {}
        out.append(
            TransferLogEntry(
                peer=str(e.get(peer) or "client"),  # None: the client fetched them
                keys=tuple(keys)[:100],
                total_bytes=int(e.get("total", 0)),
                compressed_bytes=int(e.get("compressed", e.get("total", 0))),
                start=float(e["start"]),
                stop=float(e["stop"]),
                n_keys=len(keys),
            )
        )
    return tuple(out)
