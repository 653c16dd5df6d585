"""The kernel's one update hub: one thread, one read of each source per tick, shared
by every live view (inline widgets and JupyterLab channels alike).

Each source watched gets a ``Mirror``: the latest metrics, span and progress
records, kept from the source's ``changes_since`` reads (the engine's cost what
changed, not the history: ``diagnostics/changes.py``). A read tells every
``Publisher`` attached to the mirror which keys changed; each publisher keeps its
own last-sent state, so every view gets its own deltas from the one read.

The thread starts with the first subscriber (or hook: the JupyterLab side's status)
and ends when the last one leaves: four widgets cost no thread more than one. A
tick reads the mirrors that have a publisher due, runs the hooks, then ticks the
publishers (``Publisher.tick(read=False)``). A source that fails (its cluster
closed) stops its publishers' updates, as a widget's own poller did.

``import kernel_cluster`` makes no hub; the first view does (``hub()``).

A ``Publisher`` is one view's subscription: its feeds (``diagnostics.feeds``),
which remember what this view was last sent, the keys that changed since (marked
by the hub's ``Mirror`` of the source, each read), and the send function. When it
is due, it turns the changed keys into one message holding every feed's delta, or
nothing when nothing changed. It sends at most once per ``min_interval`` seconds;
what it skips is not lost: the changed keys pile up until it sends.

Until a browser has asked for the full state (``refresh``, sent by the front-end
once it listens), every update is a full one: a view that loaded late, while the
kernel was busy and could not answer it, still ends up complete.

No publisher has a thread: the hub reads each source once per tick and ticks every
publisher subscribed to it. ``tick()`` called directly
(``widget.update()``, a test) reads the source's mirror first. The clock and the
send function come in as parameters, so tests drive a publisher without sleeps.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..diagnostics.changes import changes
from ..diagnostics.feeds.profile import ProfileFeed, read_profile_snapshot
from ..diagnostics.feeds.tables import (
    Message,
    MetricsFeed,
    RecordsFeed,
    progress_records,
    span_records,
)
from ..diagnostics.feeds.task_stream import TaskStreamFeed
from ..diagnostics.periodic import Pause
from ..diagnostics.snapshots import TaskStreamRecord
from ..diagnostics.source import DiagnosticsSource

logger = logging.getLogger(__name__)

MIN_INTERVAL = 0.25  # at most four updates per second per view

# name -> make a feed
MAKERS: dict[str, Callable[..., Any]] = {
    "metrics": MetricsFeed,
    "spans": lambda: RecordsFeed("spans"),
    "progress": lambda: RecordsFeed("progress"),
    "tasks": TaskStreamFeed,
    "profile": ProfileFeed,
}
FEEDS = tuple(MAKERS)


class Publisher:
    def __init__(
        self,
        source: DiagnosticsSource,
        feeds: tuple[str, ...],
        send: Callable[[dict[str, Any], list[bytes]], None],
        min_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        options: dict[str, dict[str, Any]] | None = None,
        hub: Hub | None = None,
    ):
        """``feeds``: names among ``FEEDS``; ``options``: keyword arguments for a feed's
        constructor, by name (e.g. ``{"tasks": {"max_tasks": 1000}}``); ``hub``: the
        hub whose mirror of ``source`` marks this view's changes (None: the kernel's)."""
        unknown = set(feeds) - set(FEEDS)
        if unknown:
            raise ValueError(f"Unknown feeds {sorted(unknown)}; choose among {FEEDS}.")
        if hub is None:
            hub = _kernel_hub()
        self.source = source
        self.names = feeds
        options = options or {}
        self.feeds: dict[str, Any] = {name: MAKERS[name](**options.get(name, {})) for name in feeds}
        self._send = send
        self.min_interval = max(min_interval, MIN_INTERVAL)
        self.clock = clock
        self.last_sent = -float("inf")
        self.in_sync = False  # a browser asked for the full state and got it
        self.sent_messages = 0
        self.sent_bytes = 0
        self._lock = threading.Lock()
        # what changed since this view's last message (the mirror marks it)
        self.dirty_metrics: set[Any] = set()
        self.dirty_spans: set[str] = set()
        self.dirty_progress: set[str] = set()
        self.new_tasks: list[TaskStreamRecord] = []
        self.tasks_behind = True  # read the task stream from the feed's index first
        self.hub = hub
        self.mirror = hub.attach(self)

    # -- what the mirror tells ------------------------------------------------------------

    def mark(
        self,
        metrics: Any,
        spans: Any,
        progress: Any,
        tasks: tuple[TaskStreamRecord, ...] | None,
    ) -> None:
        """Keys that changed in the last read (``tasks`` None: read the stream again)."""
        with self._lock:
            self.dirty_metrics.update(metrics)
            self.dirty_spans.update(spans)
            self.dirty_progress.update(progress)
            if "tasks" in self.feeds:
                if tasks is None:
                    self.tasks_behind = True
                    self.new_tasks = []
                elif not self.tasks_behind:
                    self.new_tasks.extend(tasks)

    # -- sending --------------------------------------------------------------------------

    def due(self, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        return now - self.last_sent >= self.min_interval

    def tick(self, force: bool = False, read: bool = True) -> bool:
        """Send what changed since the last message, if the rate bound allows it now.
        ``read``: have the mirror read the source first (the hub's thread has read it
        already). Returns whether a message went out."""
        now = self.clock()
        if not force and now - self.last_sent < self.min_interval:
            return False
        if read:
            self.mirror.read()
        with self._lock:
            parts = self._parts()
            if not parts:
                return False
            if not self.in_sync:  # nobody has confirmed listening: restate everything
                parts = [self.feeds[name].full() for name in self.names]
            self._emit(parts)
            self.last_sent = now
            return True

    def send_full(self) -> None:
        """A browser asked for everything (it just started listening)."""
        self.mirror.read()
        with self._lock:
            self._parts()
            self._emit([self.feeds[name].full() for name in self.names])
            self.in_sync = True
            self.last_sent = self.clock()

    def _parts(self) -> list[Message]:
        """Bring every feed to the mirror's state; the messages that takes."""
        mirror = self.mirror
        parts: list[Message | None] = []
        for name in self.names:
            feed = self.feeds[name]
            if name == "metrics":
                rows = {k: mirror.metrics.get(k, 0.0) for k in self.dirty_metrics}
                self.dirty_metrics = set()
                parts.append(feed.update(rows, partial=True) if rows else None)
            elif name in ("spans", "progress"):
                dirty, records = (
                    (self.dirty_spans, mirror.spans)
                    if name == "spans"
                    else (self.dirty_progress, mirror.progress)
                )
                changed = {k: records[k] for k in dirty if k in records}
                removed = [k for k in dirty if k not in records]
                dirty.clear()
                parts.append(feed.update_some(changed, removed))
            elif name == "tasks":
                parts.append(feed.update(self._task_records(feed)))
            else:  # the profile: its own selection, its own read
                parts.append(feed.update(read_profile_snapshot(self.source, feed)))
        return [p for p in parts if p is not None]

    def _task_records(self, feed: TaskStreamFeed) -> list[TaskStreamRecord]:
        records: list[TaskStreamRecord] = []
        if self.tasks_behind:  # new here, or after a resync: what the stream holds
            self.tasks_behind = False
            if self.source.task_stream_index() != feed.next_index:
                records = self.source.task_stream_since(feed.next_index)
        start = records[-1].index + 1 if records else feed.next_index
        records.extend(r for r in self.new_tasks if r.index >= start)
        self.new_tasks = []
        return records

    def _emit(self, parts: list[Message]) -> None:
        content, buffers = pack(parts)
        self._send(content, buffers)
        self.sent_messages += 1
        self.sent_bytes += message_size(content, buffers)

    def close(self) -> None:
        """No more updates: leave the hub (and the mirror)."""
        self.hub.unsubscribe(self)
        self.hub.detach(self)


def pack(parts: list[Message]) -> Message:
    """Several feeds' messages as one: ``{"type": "update", "parts": [...]}``, each
    part naming how many of the buffers that follow are its own."""
    contents = []
    buffers: list[bytes] = []
    for content, bufs in parts:
        contents.append({**content, "nbuffers": len(bufs)})
        buffers.extend(bufs)
    return {"type": "update", "parts": contents}, buffers


def message_size(content: dict[str, Any], buffers: list[bytes]) -> int:
    """Bytes on the wire for this message's content (as JSON) and buffers."""
    return len(json.dumps(content, separators=(",", ":"))) + sum(len(b) for b in buffers)


TICK = MIN_INTERVAL  # seconds between two ticks: the shortest a view may ask for

__all__ = ["FEEDS", "MIN_INTERVAL", "Hub", "Mirror", "Publisher", "hub", "message_size", "pack"]


class Mirror:
    """The latest state of one source as its views need it, and who to tell."""

    def __init__(self, source: DiagnosticsSource) -> None:
        self.source = source
        self.cursor = 0
        self.metrics: dict[Any, float] = {}
        self.spans: dict[str, Any] = {}  # span records (feeds.tables.span_records)
        self.progress: dict[str, Any] = {}
        self.task_index = 0
        self.publishers: list[Publisher] = []
        self.reads = 0
        self._lock = threading.Lock()

    def add(self, publisher: Publisher) -> None:
        """A new view: everything held is news to it."""
        with self._lock:
            self.publishers.append(publisher)
            publisher.mark(self.metrics, self.spans, self.progress, None)

    def read(self) -> None:
        """One read of the source's changes, told to every publisher."""
        with self._lock:
            ch = changes(self.source, self.cursor)
            self.reads += 1
            self.cursor = ch.cursor
            self.task_index = ch.task_index
            spans = span_records(ch.spans)
            progress = progress_records(ch.progress)
            if ch.full:  # everything again: what went is what is not there any more
                metric_keys = self.metrics.keys() | ch.metrics.keys()
                span_ids = self.spans.keys() | spans.keys()
                prefixes = self.progress.keys() | progress.keys()
                self.metrics = dict(ch.metrics)
                self.spans = spans
                self.progress = progress
                for p in self.publishers:
                    p.mark(metric_keys, span_ids, prefixes, None)
                return
            self.metrics.update(ch.metrics)
            self.spans.update(spans)
            for span_id in ch.closed_spans:
                self.spans.pop(span_id, None)
            self.progress.update(progress)
            if ch.metrics or spans or ch.closed_spans or progress or ch.tasks:
                touched = [*spans, *ch.closed_spans]
                for p in self.publishers:
                    p.mark(ch.metrics, touched, progress, ch.tasks)


class Hub:
    """Every live view of this kernel, and the thread that feeds them."""

    def __init__(
        self,
        interval: float = TICK,
        pause: Pause | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``pause(stop, seconds)`` is how the thread waits between ticks (None:
        ``stop.wait``) and ``clock`` what it reads: tests pass theirs."""
        self.interval = interval
        self.clock = clock
        self._pause: Pause = pause or threading.Event.wait
        self.mirrors: dict[int, Mirror] = {}  # by id of the source (sources need not hash)
        self.subscribers: list[Publisher] = []
        self.hooks: list[Callable[[], object]] = []
        self.ticks = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- views ------------------------------------------------------------------------------

    def attach(self, publisher: Publisher) -> Mirror:
        """The mirror of ``publisher``'s source (made if new), telling it changes."""
        with self._lock:
            mirror = self.mirrors.get(id(publisher.source))
            if mirror is None or mirror.source is not publisher.source:
                mirror = self.mirrors[id(publisher.source)] = Mirror(publisher.source)
        mirror.add(publisher)
        return mirror

    def detach(self, publisher: Publisher) -> None:
        with self._lock:
            mirror = publisher.mirror
            if publisher in mirror.publishers:
                mirror.publishers.remove(publisher)
            if not mirror.publishers and self.mirrors.get(id(mirror.source)) is mirror:
                del self.mirrors[id(mirror.source)]

    def subscribe(self, publisher: Publisher) -> None:
        """Tick ``publisher`` on the hub's thread from now on."""
        with self._lock:
            if publisher not in self.subscribers:
                self.subscribers.append(publisher)
            self._start()

    def unsubscribe(self, publisher: Publisher) -> None:
        with self._lock:
            if publisher in self.subscribers:
                self.subscribers.remove(publisher)

    def add_hook(self, hook: Callable[[], object]) -> None:
        """Call ``hook()`` on every tick (after the reads, before the publishers)."""
        with self._lock:
            if hook not in self.hooks:
                self.hooks.append(hook)
            self._start()

    def remove_hook(self, hook: Callable[[], object]) -> None:
        with self._lock:
            if hook in self.hooks:
                self.hooks.remove(hook)

    def subscribed(self, publisher: Publisher) -> bool:
        """``publisher`` is ticked by a running thread."""
        return publisher in self.subscribers and self.running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the thread ---------------------------------------------------------------------------

    def _start(self) -> None:
        if not self.running:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="kernel-cluster-hub", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._pause(self._stop, self.interval):
            with self._lock:
                if not self.subscribers and not self.hooks:
                    self._thread = None  # the last view left
                    return
            self.tick()

    def tick(self) -> None:
        """One round: read each mirror a due publisher needs (once), run the hooks,
        tick the publishers."""
        self.ticks += 1
        with self._lock:
            subscribers = list(self.subscribers)
            hooks = list(self.hooks)
        due = [p for p in subscribers if p.due()]
        failed: set[int] = set()
        read: set[int] = set()
        for p in due:
            mirror = p.mirror
            if id(mirror) in read or id(mirror) in failed:
                continue
            try:
                mirror.read()
                read.add(id(mirror))
            except (RuntimeError, TimeoutError) as exc:  # the engine closed under us
                logger.info("Live view updates stopped: %s", exc)
                failed.add(id(mirror))
            except Exception:
                logger.exception("Reading a source failed; its live view updates stopped")
                failed.add(id(mirror))
        for hook in hooks:
            try:
                hook()
            except Exception:
                logger.exception("A hub hook failed")
        for p in due:
            if id(p.mirror) in failed:
                self.unsubscribe(p)
                continue
            try:
                p.tick(read=False)
            except (RuntimeError, TimeoutError) as exc:
                logger.info("Live view updates stopped: %s", exc)
                self.unsubscribe(p)
            except Exception:
                logger.exception("A live view's update failed; its updates stopped")
                self.unsubscribe(p)

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (the views stay subscribed; tests use this)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


_hub: Hub | None = None
_hub_lock = threading.Lock()


def hub() -> Hub:
    """This kernel's hub, made on first use (no thread until a view subscribes)."""
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = Hub()
        return _hub


_kernel_hub = hub  # for Publisher, whose argument ``hub`` hides the function
