"""Pushing snapshots to the browser: what a live widget sends, and when.

A ``Publisher`` reads a DiagnosticsSource, runs each snapshot through its feeds
(``kernel_cluster.diagnostics.feeds.tables``) and sends one message holding every
feed's delta, or nothing when nothing changed. It sends at most once per
``min_interval`` seconds; what it skips is not lost, because deltas are taken
against what was last *sent*.

Until a browser has asked for the full state (``refresh``, sent by the front-end
once it listens), every update is a full one: a view that loaded late, while the
kernel was busy and could not answer it, still ends up complete.

``Poller`` is the background thread that calls ``Publisher.tick``. The clock, the
poller's pause and the send function come in as parameters, so the tests drive a
publisher without sleeps or a kernel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..diagnostics.feeds.profile import ProfileFeed, read_profile_snapshot
from ..diagnostics.feeds.tables import (
    Message,
    MetricsFeed,
    RecordsFeed,
    progress_records,
    span_records,
)
from ..diagnostics.feeds.task_stream import TaskStreamFeed
from ..diagnostics.periodic import Pause, PeriodicThread
from ..diagnostics.snapshots import TaskStreamRecord
from ..diagnostics.source import DiagnosticsSource

logger = logging.getLogger(__name__)

MIN_INTERVAL = 0.25  # at most four updates per second per widget


def _read_tasks(source: DiagnosticsSource, feed: TaskStreamFeed) -> list[TaskStreamRecord]:
    if source.task_stream_index() == feed.next_index:
        return []  # nothing new: skip copying the history's tail
    return source.task_stream_since(feed.next_index)


# name -> (make a feed, read its next snapshot from a source)
READERS: dict[str, tuple[Callable[..., Any], Callable[[DiagnosticsSource, Any], Any]]] = {
    "metrics": (MetricsFeed, lambda src, _: src.fine_metrics(refresh=False)),
    "spans": (lambda: RecordsFeed("spans"), lambda src, _: span_records(src.spans(refresh=False))),
    "progress": (lambda: RecordsFeed("progress"), lambda src, _: progress_records(src.progress())),
    "tasks": (TaskStreamFeed, _read_tasks),
    "profile": (ProfileFeed, read_profile_snapshot),
}
FEEDS = tuple(READERS)


class Publisher:
    def __init__(
        self,
        source: DiagnosticsSource,
        feeds: tuple[str, ...],
        send: Callable[[dict[str, Any], list[bytes]], None],
        min_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        options: dict[str, dict[str, Any]] | None = None,
    ):
        """``feeds``: names among ``FEEDS``; ``options``: keyword arguments for a feed's
        constructor, by name (e.g. ``{"tasks": {"max_tasks": 1000}}``)."""
        unknown = set(feeds) - set(FEEDS)
        if unknown:
            raise ValueError(f"Unknown feeds {sorted(unknown)}; choose among {FEEDS}.")
        self.source = source
        self.names = feeds
        options = options or {}
        self.feeds: dict[str, Any] = {
            name: READERS[name][0](**options.get(name, {})) for name in feeds
        }
        self._send = send
        self.min_interval = max(min_interval, MIN_INTERVAL)
        self.clock = clock
        self.last_sent = -float("inf")
        self.in_sync = False  # a browser asked for the full state and got it
        self.sent_messages = 0
        self.sent_bytes = 0
        self._lock = threading.Lock()

    def _snapshot(self, name: str) -> Any:
        return READERS[name][1](self.source, self.feeds[name])

    def tick(self, force: bool = False) -> bool:
        """Send what changed since the last message, if the rate bound allows it now.

        Returns whether a message went out.
        """
        with self._lock:
            now = self.clock()
            if not force and now - self.last_sent < self.min_interval:
                return False
            snapshots = {name: self._snapshot(name) for name in self.names}
            parts = []
            for name in self.names:
                msg = self.feeds[name].update(snapshots[name])
                if msg is not None:
                    parts.append(msg)
            if not parts:
                return False
            if not self.in_sync:  # nobody has confirmed listening: restate everything
                parts = [self.feeds[name].full() for name in self.names]
            self._emit(parts)
            self.last_sent = now
            return True

    def send_full(self) -> None:
        """A browser asked for everything (it just started listening)."""
        with self._lock:
            snapshots = {name: self._snapshot(name) for name in self.names}
            for name in self.names:
                self.feeds[name].update(snapshots[name])
            self._emit([self.feeds[name].full() for name in self.names])
            self.in_sync = True
            self.last_sent = self.clock()

    def _emit(self, parts: list[Message]) -> None:
        content, buffers = pack(parts)
        self._send(content, buffers)
        self.sent_messages += 1
        self.sent_bytes += message_size(content, buffers)


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
    import json

    return len(json.dumps(content, separators=(",", ":"))) + sum(len(b) for b in buffers)


class Poller:
    """A daemon thread calling ``publisher.tick()`` every ``interval`` seconds until
    stopped, or until the source fails (its cluster closed).

    ``pause(stop, seconds)`` is how it waits between ticks: until ``seconds`` have
    passed or the event ``stop`` is set, returning whether it was set (None:
    ``stop.wait``); tests pass one driven by their clock.
    """

    def __init__(
        self,
        publisher: Publisher,
        interval: float,
        name: str = "kernel-cluster-widget",
        pause: Pause | None = None,
    ):
        self.publisher = publisher
        self.interval = max(interval, MIN_INTERVAL)
        self._thread = PeriodicThread(self._tick, self.interval, name, pause)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.running

    def _tick(self) -> bool:
        """One update; False ends the thread."""
        try:
            self.publisher.tick()
        except (RuntimeError, TimeoutError) as exc:  # the engine closed under us
            logger.info("Widget updates stopped: %s", exc)
            return False
        except Exception:
            logger.exception("Widget update failed; updates stopped")
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self._thread.stop(timeout)
