"""Live notebook widgets: fine metrics, the span tree, progress, and all three at once.

    from kernel_cluster.jupyter.widgets import FineMetrics
    FineMetrics(client)          # or client.dashboard() for everything

Each widget is an anywidget whose front-end is the renderer library in
``widgets/`` (bundled into ``static/``). The kernel pushes data: a background
thread reads the client's DiagnosticsSource and sends deltas, at most
``1 / interval`` times a second and nothing when nothing changed. The browser
holds the data and does the filtering (unit, functions, activities, span), so
those act at once, even while the kernel is busy. Filter choices are synced
traits: they survive re-rendering, and Python can read or set them.

Messages from the browser are JSON, checked here; only ``{"type": "refresh"}``
(send me everything) is acted upon. ``close()`` stops the updates.
"""

from __future__ import annotations

import logging
import pathlib
import uuid
from typing import Any

import anywidget
import traitlets

from .live import Poller, Publisher

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


def source_of(obj: Any) -> Any:
    """The DiagnosticsSource behind a Client, or ``obj`` itself if it is one."""
    diagnostics = getattr(type(obj), "_diagnostics", None)
    if diagnostics is not None:  # a Client: its engine's source
        return obj._diagnostics
    for method in ("fine_metrics", "spans", "progress"):
        if not callable(getattr(obj, method, None)):
            raise TypeError(
                f"Expected a kernel_cluster Client or a DiagnosticsSource, got "
                f"{type(obj).__name__} (it has no {method}() method)."
            )
    return obj


class _LiveWidget(anywidget.AnyWidget):
    # the bundle's text, read when a widget is made (so a rebuilt bundle is picked up)
    _esm = traitlets.Unicode("").tag(sync=True)
    _css = traitlets.Unicode("").tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)
    # names this widget's data in the browser, where all its views share it
    _uid = traitlets.Unicode("").tag(sync=True)
    _feeds: tuple[str, ...] = ()

    def __init__(
        self,
        client: Any,
        *,
        interval: float = 0.5,
        autostart: bool = True,
        clock: Any = None,
        **kwargs: Any,
    ):
        """``client``: a Client (or any DiagnosticsSource). ``interval``: seconds between
        updates (at least 0.25). ``autostart=False`` sends nothing until ``update()``."""
        bundle = bundle_path()
        super().__init__(_esm=_read(bundle), _css=_read(STYLES), _uid=uuid.uuid4().hex, **kwargs)
        self.source = source_of(client)
        extra = {"clock": clock} if clock is not None else {}
        self.publisher = Publisher(
            self.source, self._feeds, self._send_update, min_interval=interval, **extra
        )
        self.on_msg(self._on_browser_message)
        self._poller: Poller | None = None
        if autostart:
            self.publisher.tick(force=True)
            self._poller = Poller(self.publisher, interval, name=f"kernel-cluster-{self.kind}")
            self._poller.start()

    # -- kernel -> browser ------------------------------------------------------------------

    def _send_update(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if self.comm is not None:
            self.send(content, buffers)

    def update(self, force: bool = False) -> bool:
        """Send what changed now (subject to the rate bound unless ``force``)."""
        return self.publisher.tick(force=force)

    @property
    def updating(self) -> bool:
        """The background updates are running."""
        return self._poller is not None and self._poller.running

    # -- browser -> kernel ------------------------------------------------------------------

    def _on_browser_message(self, _widget: Any, content: Any, buffers: list) -> None:
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
        poller = getattr(self, "_poller", None)
        if poller is not None:
            poller.stop()
        super().close()


class FineMetrics(_LiveWidget):
    """The seeds' panels: task execution by function and by activity, send and receive
    data by activity, with unit, function, activity and span filters."""

    kind = traitlets.Unicode("fine-metrics").tag(sync=True)
    unit = traitlets.Unicode("seconds").tag(sync=True)
    span_filter = traitlets.Unicode("", help="'' (all), 'tag:TAG' or 'id:SPAN_ID'").tag(sync=True)
    hidden_functions = traitlets.List(traitlets.Unicode()).tag(sync=True)
    hidden_activities = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _feeds = ("metrics", "spans")

    @traitlets.validate("span_filter")
    def _check_span_filter(self, proposal: Any) -> str:
        value = proposal["value"]
        if value and not value.startswith(("tag:", "id:")):
            raise traitlets.TraitError(
                f"span_filter must be '', 'tag:TAG' or 'id:SPAN_ID', got {value!r}."
            )
        return value

    def link(self, tree: SpanTree) -> FineMetrics:
        """Show only the span chosen in ``tree`` (and its children)."""

        def follow(change: dict) -> None:
            self.span_filter = f"id:{change['new']}" if change["new"] else ""

        tree.observe(follow, names="selected")
        return self


class SpanTree(_LiveWidget):
    """Spans as a collapsible tree: duration, task states and progress of each."""

    kind = traitlets.Unicode("span-tree").tag(sync=True)
    selected = traitlets.Unicode("", help="id of the span chosen in the browser").tag(sync=True)
    _feeds = ("spans",)


class Progress(_LiveWidget):
    """A progress bar per task prefix, split by task state."""

    kind = traitlets.Unicode("progress").tag(sync=True)
    _feeds = ("progress",)


class Dashboard(FineMetrics):
    """Progress, span tree and fine metrics in one view; choosing a span in the tree
    filters the fine metrics, in the browser."""

    kind = traitlets.Unicode("dashboard").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    _feeds = ("metrics", "spans", "progress")


def dashboard(client: Any, **kwargs: Any) -> Dashboard:
    return Dashboard(client, **kwargs)


_texts: dict[pathlib.Path, tuple[float, str]] = {}


def _read(path: pathlib.Path) -> str:
    """A bundle's text, read again only when the file changed (a rebuild)."""
    mtime = path.stat().st_mtime
    cached = _texts.get(path)
    if cached is None or cached[0] != mtime:
        cached = _texts[path] = (mtime, path.read_text(encoding="utf-8"))
    return cached[1]
