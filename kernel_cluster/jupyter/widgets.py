"""Live notebook widgets: fine metrics, the span tree, progress (all three at once in
the dashboard), the task stream and the statistical profile's flame graph.

    from kernel_cluster.jupyter.widgets import FineMetrics, ProfileFlameGraph, TaskStream
    FineMetrics(client)          # or client.dashboard() for the first three
    TaskStream(client)
    ProfileFlameGraph(client)

Each widget is an anywidget whose front-end is the renderer library in
``widgets/`` (bundled into ``static/``). The kernel pushes data: the kernel's one
update hub (``hub.py``: one thread for every widget and panel) reads the client's
DiagnosticsSource and sends each widget its deltas, at most ``1 / interval`` times
a second and nothing when nothing changed. The browser
holds the data and does the filtering (unit, functions, activities, span), so
those act at once, even while the kernel is busy. Filter choices are synced
traits: they survive re-rendering, and Python can read or set them.

The task stream's new records go as deltas of typed columns; the flame graph gets
the profile of the task prefix and time window chosen in the browser (synced
traits, read by the kernel at most once a second, or at once when they change).

Messages from the browser are JSON, checked here: ``{"type": "refresh"}`` (send me
everything), and ``explain`` / ``paths`` (a span's critical path and findings, checked
and answered once, from ``explain.py``'s thread). ``close()`` stops the updates.
"""

from __future__ import annotations

import logging
import pathlib
import uuid
from typing import Any

try:
    import anywidget
    import traitlets
except ModuleNotFoundError as exc:  # a plain install: the widgets are an extra
    raise ImportError(
        f"kernel_cluster's notebook widgets need {exc.name}, which is not installed: "
        "pip install 'kernel-cluster[widgets]' (anywidget, ipywidgets, bqplot). Without "
        "them, client.fine_metrics() and kernel_cluster.fine_metrics(dask_client) give the "
        "same numbers as a DataFrame, and performance_report(...) a page.",
        name=exc.name,
    ) from exc

from ..diagnostics.attach import source_of
from ..diagnostics.source import Diagnosable, WouldBlock
from . import explain
from .hub import Hub, Publisher
from .hub import hub as kernel_hub

logger = logging.getLogger(__name__)

STATIC = pathlib.Path(__file__).parent / "static"
BUNDLE = STATIC / "widget.js"
STYLES = STATIC / "widget.css"


def bundle_path() -> pathlib.Path:
    """The widget bundle, or a clear error if this install has none."""
    if not BUNDLE.exists():
        raise FileNotFoundError(
            f"kernel_cluster's widget bundle is missing ({BUNDLE}). In a source checkout, "
            "build it with `npm ci && npm run build` (or `make venv`); wheels carry it."
        )
    return BUNDLE


class _LiveWidget(anywidget.AnyWidget):
    # the bundle's text, read when a widget is made (so a rebuilt bundle is picked up)
    _esm = traitlets.Unicode("").tag(sync=True)
    _css = traitlets.Unicode("").tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)
    # names this widget's data in the browser, where all its views share it
    _uid = traitlets.Unicode("").tag(sync=True)
    _feeds: tuple[str, ...] = ()
    _min_interval = 0.25

    def __init__(
        self,
        client: Diagnosable | None = None,
        *,
        interval: float = 0.5,
        autostart: bool = True,
        clock: Any = None,
        hub: Hub | None = None,
        **kwargs: Any,
    ):
        """``client``: a Client, a ``distributed.Client`` or any DiagnosticsSource (None:
        the default source, the latest Client or ``kernel_cluster.attach``'s).
        ``interval``: seconds between updates (at least 0.25). ``autostart=False``
        sends nothing until ``update()``.
        ``clock`` (for tests): a function returning the time for the rate bound.
        ``hub`` (for tests): the hub that feeds it (None: the kernel's)."""
        bundle = bundle_path()
        options = self._feed_options(kwargs)
        super().__init__(_esm=_read(bundle), _css=_read(STYLES), _uid=uuid.uuid4().hex, **kwargs)
        self.source = source_of(client)
        extra = {"clock": clock} if clock is not None else {}
        interval = max(interval, self._min_interval)
        self._hub = hub if hub is not None else kernel_hub()
        self.publisher = Publisher(
            self.source,
            self._feeds,
            self._send_update,
            min_interval=interval,
            options=options,
            hub=self._hub,
            **extra,
        )
        self._publisher_ready()
        self.on_msg(self._on_browser_message)
        self._closed = False
        if autostart:
            try:
                self.publisher.tick(force=True)
            except WouldBlock:  # an asynchronous Dask client's loop runs this cell:
                pass  # the hub's thread reads instead
            self._hub.subscribe(self.publisher)

    def _feed_options(self, kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Take this widget's feed settings out of the constructor's keyword arguments."""
        return {}

    def _publisher_ready(self) -> None:
        """Called once the publisher exists, before the first update."""

    # -- kernel -> browser ------------------------------------------------------------------

    def _send_update(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if self.comm is not None:
            self.send(content, buffers)

    def _reply(self, content: dict[str, Any]) -> None:
        if not self._closed:
            self._send_update(content, [])

    def update(self, force: bool = False) -> bool:
        """Send what changed now (subject to the rate bound unless ``force``)."""
        return self.publisher.tick(force=force)

    @property
    def updating(self) -> bool:
        """The background updates are running."""
        return not self._closed and self._hub.subscribed(self.publisher)

    # -- browser -> kernel ------------------------------------------------------------------

    def _on_browser_message(self, _widget: Any, content: Any, buffers: list[bytes]) -> None:
        if isinstance(content, dict) and content.get("type") in explain.KINDS and not buffers:
            # a span's critical path and findings, asked by a view: answered from
            # explain.py's thread, not the kernel's (where this runs)
            explain.reply_later(self.source, explain.check_explain(content), self._reply)
            return
        if isinstance(content, dict) and content.get("type") == "refresh" and not buffers:
            try:
                self.publisher.send_full()
            except (RuntimeError, TimeoutError) as exc:
                logger.info("Cannot refresh %s: %s", self.kind, exc)
            return
        logger.warning("Ignoring an unexpected message from the browser: %.200r", content)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the updates and close the views."""
        self._closed = True
        publisher = getattr(self, "publisher", None)
        if publisher is not None:
            publisher.close()
        super().close()


class FineMetrics(_LiveWidget):
    """The seeds' panels: task execution by function and by activity, send and receive
    data by activity, with unit, function, activity and span filters."""

    kind = traitlets.Unicode("fine-metrics").tag(sync=True)
    unit = traitlets.Unicode("seconds").tag(sync=True)
    span_filter = traitlets.Unicode("", help="'' (all), 'tag:TAG' or 'id:SPAN_ID'").tag(sync=True)
    hidden_functions = traitlets.List(traitlets.Unicode()).tag(sync=True)
    hidden_activities = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _feeds: tuple[str, ...] = ("metrics", "spans")

    @traitlets.validate("span_filter")
    def _check_span_filter(self, proposal: Any) -> str:
        value: str = proposal["value"]
        if value and not value.startswith(("tag:", "id:")):
            raise traitlets.TraitError(
                f"span_filter must be '', 'tag:TAG' or 'id:SPAN_ID', got {value!r}."
            )
        return value

    def link(self, tree: SpanTree) -> FineMetrics:
        """Show only the span chosen in ``tree`` (and its children)."""

        def follow(change: dict[str, Any]) -> None:
            self.span_filter = f"id:{change['new']}" if change["new"] else ""

        tree.observe(follow, names="selected")
        return self


class SpanTree(_LiveWidget):
    """Spans as a collapsible tree: duration, task states and progress of each."""

    kind = traitlets.Unicode("span-tree").tag(sync=True)
    selected = traitlets.Unicode("", help="id of the span chosen in the browser").tag(sync=True)
    _feeds = ("spans",)


class Progress(_LiveWidget):
    """A progress bar per task prefix, split by task state. Outside a notebook,
    ``show_text()`` draws the same bars as text in the terminal."""

    kind = traitlets.Unicode("progress").tag(sync=True)
    _feeds = ("progress",)

    def show_text(self, **kwargs: Any) -> Any:
        """Text bars until every task is done (see ``diagnostics.queries.progress_text``);
        stops this widget's updates to the browser first (nobody is looking)."""
        from ..diagnostics.queries.progress_text import TextProgress

        self.close()
        return TextProgress(self.source, **kwargs).run()


class TaskStream(_LiveWidget):
    """Every task's compute, transfer, disk and deserialize times, one row per worker
    thread, zoomable (wheel) and pannable (drag); double-click follows the newest
    again. ``max_tasks``: how many of the most recent tasks the view keeps."""

    kind = traitlets.Unicode("task-stream").tag(sync=True)
    hidden_prefixes = traitlets.List(
        traitlets.Unicode(), help="task prefixes and actions the legend hides"
    ).tag(sync=True)
    _feeds = ("tasks",)

    def _feed_options(self, kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {"tasks": {"max_tasks": int(kwargs.pop("max_tasks", 100_000))}}


class ProfileFlameGraph(_LiveWidget):
    """The workers' statistical profile as a flame graph: click a frame to zoom into
    it; pick a task prefix; drag over the timeline of samples to choose a time window.

    ``prefix`` (``""``: every task), ``start`` and ``stop`` (scheduler times, None:
    open) are the selection, synced with the browser and settable from Python."""

    kind = traitlets.Unicode("flame-graph").tag(sync=True)
    prefix = traitlets.Unicode("").tag(sync=True)
    start = traitlets.Float(None, allow_none=True).tag(sync=True)
    stop = traitlets.Float(None, allow_none=True).tag(sync=True)
    _feeds = ("profile",)
    _min_interval = 1.0  # reading a profile asks every worker: once a second at most

    def _feed_options(self, kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {"profile": {"max_frames": int(kwargs.pop("max_frames", 20_000))}}

    def _publisher_ready(self) -> None:
        self._select()

    def _select(self) -> None:
        start, stop = self.start, self.stop
        if start is not None and stop is not None and stop < start:
            start, stop = stop, start  # a window brushed right to left, or set so
        self.publisher.feeds["profile"].select(self.prefix or None, start, stop)

    @traitlets.observe("prefix", "start", "stop")
    def _selection_changed(self, change: dict[str, Any]) -> None:
        if getattr(self, "publisher", None) is None or self._closed:
            return
        self._select()
        try:  # the user is waiting for this one: no rate bound
            self.publisher.tick(force=True)
        except (RuntimeError, TimeoutError, ValueError) as exc:
            logger.info("Cannot update the flame graph: %s", exc)


class Dashboard(FineMetrics):
    """Progress, span tree and fine metrics in one view; choosing a span in the tree
    filters the fine metrics, in the browser."""

    kind = traitlets.Unicode("dashboard").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    _feeds: tuple[str, ...] = ("metrics", "spans", "progress")


def dashboard(client: Diagnosable | None = None, **kwargs: Any) -> Dashboard:
    return Dashboard(client, **kwargs)


class ProfilerPlots(anywidget.AnyWidget):
    """The local profilers' plots (``kernel_cluster.local_diagnostics.plots.visualize``):
    not live, so the records go whole, once, in the ``data`` trait (the columns of
    ``local_plots.plots_data``), and the browser draws them as the HTML page does."""

    _esm = traitlets.Unicode("").tag(sync=True)
    _css = traitlets.Unicode("").tag(sync=True)
    kind = traitlets.Unicode("profiler-plots").tag(sync=True)
    _uid = traitlets.Unicode("").tag(sync=True)
    data = traitlets.Dict().tag(sync=True)

    def __init__(self, data: dict[str, Any], **kwargs: Any):
        super().__init__(
            _esm=_read(bundle_path()),
            _css=_read(STYLES),
            _uid=uuid.uuid4().hex,
            data=data,
            **kwargs,
        )
        self.on_msg(self._on_browser_message)

    @traitlets.validate("data")
    def _check_data(self, proposal: Any) -> dict[str, Any]:
        value: dict[str, Any] = proposal["value"]
        if value.get("page") != "profiler-plots" or not isinstance(value.get("plots"), list):
            raise traitlets.TraitError(
                "ProfilerPlots takes the data of kernel_cluster.local_diagnostics.plots.plots_data."
            )
        return value

    def _on_browser_message(self, _widget: Any, content: Any, buffers: list[bytes]) -> None:
        # every view asks for a refresh when it starts; the data is in its trait already
        if isinstance(content, dict) and content.get("type") == "refresh":
            return
        logger.warning("Ignoring an unexpected message from the browser: %.200r", content)


_texts: dict[pathlib.Path, tuple[float, str]] = {}


def _read(path: pathlib.Path) -> str:
    """A bundle's text, read again only when the file changed (a rebuild)."""
    mtime = path.stat().st_mtime
    cached = _texts.get(path)
    if cached is None or cached[0] != mtime:
        cached = _texts[path] = (mtime, path.read_text(encoding="utf-8"))
    return cached[1]
