"""Pushing snapshots to the browser: what one live view is sent, and when.

A ``Publisher`` is one view's subscription: its feeds (``diagnostics.feeds``),
which remember what this view was last sent, the keys that changed since (marked
by the hub's ``Mirror`` of the source, each read), and the send function. When it
is due, it turns the changed keys into one message holding every feed's delta, or
nothing when nothing changed. It sends at most once per ``min_interval`` seconds;
what it skips is not lost: the changed keys pile up until it sends.

Until a browser has asked for the full state (``refresh``, sent by the front-end
once it listens), every update is a full one: a view that loaded late, while the
kernel was busy and could not answer it, still ends up complete.

No publisher has a thread: the kernel's one hub (``hub.py``) reads each source once
per tick and ticks every publisher subscribed to it. ``tick()`` called directly
(``widget.update()``, a test) reads the source's mirror first. The clock and the
send function come in as parameters, so tests drive a publisher without sleeps.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..diagnostics.feeds.profile import ProfileFeed, read_profile_snapshot
from ..diagnostics.feeds.tables import Message, MetricsFeed, RecordsFeed
from ..diagnostics.feeds.task_stream import TaskStreamFeed
from ..diagnostics.snapshots import TaskStreamRecord
from ..diagnostics.source import DiagnosticsSource

if TYPE_CHECKING:
    from .hub import Hub, Mirror

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
            from .hub import hub as kernel_hub

            hub = kernel_hub()
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
        self.mirror: Mirror = hub.attach(self)

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
