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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..diagnostics.changes import changes
from ..diagnostics.feeds.tables import progress_records, span_records
from ..diagnostics.periodic import Pause
from ..diagnostics.source import DiagnosticsSource
from .publisher import MIN_INTERVAL, Publisher

logger = logging.getLogger(__name__)

TICK = MIN_INTERVAL  # seconds between two ticks: the shortest a view may ask for

__all__ = ["Hub", "Mirror", "hub"]


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
                span_ids = [*spans, *ch.closed_spans]
                for p in self.publishers:
                    p.mark(ch.metrics, span_ids, progress, ch.tasks)


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
            self._thread = threading.Thread(target=self._run, name="kernel-cluster-hub", daemon=True)
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
