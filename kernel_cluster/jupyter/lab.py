"""The kernel's side of the JupyterLab panels: one comm per browser, fed by the
same feeds as the inline widgets.

JupyterLab's extension (``labextension/``) keeps one connection per notebook kernel,
shared by its sidebar and panels. Either side opens it (comm target ``kernel-cluster-lab``):

- the browser when it meets a kernel (a notebook opened, a page reloaded, a kernel
  restarted); a kernel without kernel_cluster imported closes it;
- the kernel (``announce``) on ``%load_ext kernel_cluster``, the first view, ``show()``
  and a Client starting with no browser listening. ``import kernel_cluster`` only
  registers the target; the browser asks again after a cell naming kernel_cluster,
  or after a doubling wait (``AskAgain`` in ``labextension/src/connection.ts``).

Messages, kernel -> browser (JSON, plus binary buffers for ``update``):
- ``{"type": "hello", "protocol": 1}`` once a channel is open;
- ``{"type": "status", "cluster": {...} | None, "memory": [...] | None}``: the
  sidebar's summary (``lab_status.cluster_summary``: the engine, scheduler, dashboard,
  what the controls may do; the worker rows with ``workers``), at most once a second;
- ``{"type": "memory", "samples": [[time, process, managed, unmanaged, spilled]]}``:
  the memory history kept here, all of it (after a reload or a new cluster);
- ``{"type": "update", "parts": [...]}``: the feeds' deltas (``publisher.Publisher``);
- ``{"type": "show", "kind": ..., "mode": ...}``: open a panel (``show()``);
- ``{"type": "control", "request": ..., "ok": bool, "message": str}``: how a cluster
  control went (``cluster_controls.py``);
- ``{"type": "compare", "runs", "a", "b", "data", "error"}``: the Compare panel's
  state, in answer to its request (``compare.state``).

Browser -> kernel, validated here (anything else is logged and dropped):
- ``{"type": "refresh"}``: send everything again (a new page, or a lost delta);
- ``{"type": "subscribe", "feeds": [...]}``: the optional feeds the open panels
  need (``tasks``, ``profile``, ``workers``, ``compare``: the runs to choose from,
  sent again when a run is recorded); metrics, spans and progress always flow;
- ``{"type": "profile", "prefix": str, "start": float | None, "stop": float | None}``;
- ``{"type": "compare", "a": str | None, "b": str | None}``: compare these runs (None:
  the last pair compared, or the latest two);
- ``explain``, ``paths``: a span's critical path, idle and findings, or spans' path
  lengths, answered once from a thread of ``explain.py``'s (the walks take seconds);
- ``{"type": "ping"}``, every few seconds while the page lives: a channel silent for
  ``STALE_SECONDS`` is closed (its page went, and a page that goes says no goodbye);
- ``start``, ``scale``, ``stop``: the sidebar's cluster controls
  (``cluster_controls.check_control``).

The browser sends on a kernel subshell where the kernel has them (ipykernel 7), so
its messages are handled on that subshell's thread while a cell runs on the main
one: a panel opened mid-cell gets its data at once. ipykernel would route a comm's
browser messages to the subshell of whatever last sent on it (a cell, for
``announce``); ``_keep_browser_routing`` keeps the one the browser chose.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..diagnostics.attach import default_source, watch_default_source
from ..diagnostics.source import DiagnosticsSource
from . import explain
from . import hub as hub_module
from .cluster_controls import CONTROLS, ClusterControls, ControlRunner, check_control
from .hub import Hub as KernelHub
from .hub import Mirror, Publisher, message_size
from .lab_status import cluster_summary, memory_sample
from .notebook import in_notebook
from .worker_table import worker_rows

logger = logging.getLogger(__name__)

TARGET = "kernel-cluster-lab"
PROTOCOL = 1
VIEWS = (
    "fine-metrics",
    "span-tree",
    "profile",
    "task-stream",
    "memory",
    "progress",
    "workers",
    "compare",
)
MODES = ("split-right", "split-left", "split-top", "split-bottom", "tab-after", "tab-before")
BASE_FEEDS = ("metrics", "spans", "progress")
OPTIONAL_FEEDS = ("tasks", "profile", "workers", "compare")
INTERVAL = 0.5  # seconds between two looks at the cluster
STATUS_INTERVAL = 1.0  # seconds between two status messages (and memory samples)
RUNS_INTERVAL = 2.0  # seconds between two looks for new runs, while a Compare panel is open
MEMORY_SAMPLES = 3600  # an hour of memory history at one sample a second
PING_SECONDS = 5.0  # how often a page pings (labextension/src/connection.ts)
STALE_SECONDS = 4 * PING_SECONDS  # a channel silent this long has lost its page
MAX_REF = 1000  # characters of a run's reference from the browser


def _number_or_none(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a finite number or null, got {value!r}")
    try:
        number = float(value)  # an int past a float's range raises OverflowError
    except OverflowError:  # only an int can overflow here
        bits = value.bit_length() if isinstance(value, int) else 0
        raise ValueError(
            f"expected a finite number or null, got an integer of {bits} bits"
        ) from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number or null, got {value!r}")
    return number


def check_message(content: Any) -> dict[str, Any]:
    """A browser message, checked; ValueError says what is wrong with it."""
    if not isinstance(content, dict) or not isinstance(content.get("type"), str):
        raise ValueError("expected an object with a 'type'")
    kind = content["type"]
    if kind in ("refresh", "ping"):
        return {"type": kind}
    if kind in CONTROLS:
        return check_control(content)
    if kind in explain.KINDS:
        return explain.check_explain(content)
    if kind == "subscribe":
        feeds = content.get("feeds")
        if not isinstance(feeds, list) or not all(f in OPTIONAL_FEEDS for f in feeds):
            raise ValueError(f"'feeds' must be a list drawn from {OPTIONAL_FEEDS}")
        return {"type": kind, "feeds": [f for f in OPTIONAL_FEEDS if f in feeds]}
    if kind == "profile":
        prefix = content.get("prefix") or ""
        if not isinstance(prefix, str):
            raise ValueError("'prefix' must be a string")
        start = _number_or_none(content.get("start"))
        stop = _number_or_none(content.get("stop"))
        if start is not None and stop is not None and stop < start:
            start, stop = stop, start
        return {"type": kind, "prefix": prefix, "start": start, "stop": stop}
    if kind == "compare":
        refs = {}
        for side in ("a", "b"):
            ref = content.get(side)
            if ref is not None and (not isinstance(ref, str) or len(ref) > MAX_REF):
                raise ValueError(f"'{side}' must be a run's reference (a string) or null")
            refs[side] = ref or None
        return {"type": kind, **refs}
    raise ValueError(f"unknown message type {kind!r}")


class Channel:
    """One browser connection: its comm, and publishers holding what it was sent."""

    def __init__(self, hub: Hub, comm: Any):
        self.hub = hub
        self.comm = comm
        self.optional: tuple[str, ...] = ()
        self.profile = {"prefix": "", "start": None, "stop": None}
        self.publishers: dict[str, Publisher] = {}
        self.last_status: dict[str, Any] | None = None
        # the runs last sent to the Compare panel; whether it has a comparison
        self.compare_runs: list[dict[str, str]] | None = None
        self.compared = False
        self.sent_bytes = 0
        self.sent_messages = 0
        self.closed = False
        # when the page was last heard from (opening counts); on a subshell or not
        self.last_heard = time.monotonic()
        self.on_subshell = False
        self._lock = threading.RLock()
        _keep_browser_routing(comm)
        comm.on_msg(self._on_msg)
        comm.on_close(lambda _msg: hub.remove(self))

    # -- kernel -> browser -------------------------------------------------------------

    def send(self, content: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        if self.closed:
            return
        self.comm.send(content, buffers=buffers or [])
        self.sent_messages += 1
        self.sent_bytes += message_size(content, buffers or [])

    def bind(self, source: DiagnosticsSource | None) -> None:
        """Feed this browser from ``source`` (None: no cluster), starting afresh."""
        with self._lock:
            self._drop_publishers()
            if source is not None and not self.closed:
                main = (*BASE_FEEDS, *(f for f in self.optional if f == "tasks"))
                self.publishers["main"] = self._publisher(source, main, INTERVAL)
                if "profile" in self.optional:  # asks every worker: once a second at most
                    self.publishers["profile"] = self._publisher(source, ("profile",), 1.0)
                    self._select_profile()
                for publisher in self.publishers.values():  # the kernel's hub ticks them
                    self.hub.kernel_hub.subscribe(publisher)

    def _drop_publishers(self) -> None:
        for publisher in self.publishers.values():
            publisher.close()
        self.publishers = {}

    @property
    def mirror(self) -> Mirror | None:
        main = self.publishers.get("main")
        return main.mirror if main is not None else None

    def _publisher(
        self, source: DiagnosticsSource, feeds: tuple[str, ...], interval: float
    ) -> Publisher:
        options = {"tasks": {"max_tasks": 100_000}, "profile": {"max_frames": 20_000}}
        return Publisher(
            source,
            feeds,
            self.send,
            min_interval=interval,
            options={k: v for k, v in options.items() if k in feeds},
            hub=self.hub.kernel_hub,
        )

    def _select_profile(self) -> None:
        publisher = self.publishers.get("profile")
        if publisher is not None:
            p = self.profile
            publisher.feeds["profile"].select(p["prefix"] or None, p["start"], p["stop"])

    def send_everything(self) -> None:
        with self._lock:
            self.send({"type": "hello", "protocol": PROTOCOL})
            self.last_status = None
            self.hub.send_status(self)
            self.send({"type": "memory", "samples": list(self.hub.memory.copy())})
            for publisher in self.publishers.values():
                publisher.send_full()

    # -- browser -> kernel -------------------------------------------------------------

    def _on_msg(self, msg: dict[str, Any]) -> None:
        self.last_heard = time.monotonic()
        self.on_subshell = bool((msg.get("header") or {}).get("subshell_id"))
        data = msg.get("content", {}).get("data")
        try:
            request = check_message(data)
        except ValueError as exc:
            logger.warning("Ignoring a message from the browser (%s): %.200r", exc, data)
            return
        try:
            self._handle(request)
        except (RuntimeError, TimeoutError) as exc:  # the cluster closed under us
            logger.info("Cannot answer the browser: %s", exc)

    def _handle(self, request: dict[str, Any]) -> None:
        kind = request["type"]
        if kind == "ping":  # heard: that is all a ping says
            return
        if kind in CONTROLS:  # on a thread of its own: starting workers takes seconds
            self.hub.runner.run(request, self.send, self.hub.status_now)
            return
        if kind in explain.KINDS:  # asked by a view: answered on explain's thread
            explain.reply_later(self.hub.source, request, self.send)
            return
        with self._lock:
            if kind == "refresh":
                self.send_everything()
            elif kind == "subscribe" and tuple(request["feeds"]) != self.optional:
                self.optional = tuple(request["feeds"])
                self.bind(self.hub.source)
                for publisher in self.publishers.values():
                    publisher.send_full()
                if "workers" in self.optional:  # the worker table, without waiting a second
                    self.last_status = None
                    self.hub.status_now()
            elif kind == "compare":  # asked by the Compare panel; new runs follow
                from .compare import state

                answer = state(self.hub.source, request["a"], request["b"])
                self.compare_runs = answer["runs"]
                self.compared = answer["data"] is not None
                self.send({"type": "compare", **answer})
            elif kind == "profile":
                self.profile = {k: request[k] for k in ("prefix", "start", "stop")}
                self._select_profile()
                waiting = self.publishers.get("profile")
                if waiting is not None:  # someone is waiting for this one: no rate bound
                    waiting.tick(force=True)

    def offer_runs(self, runs: list[dict[str, str]]) -> None:
        """A Compare panel is open here: the runs to choose from, when they changed."""
        from .compare import runs_update

        with self._lock:
            if runs != self.compare_runs:
                self.compare_runs = runs
                message = runs_update(self.hub.source, runs, self.compared)
                self.compared = self.compared or message.get("data") is not None
                self.send({"type": "compare", **message})

    def stale(self, now: float, newest: float) -> bool:
        """Its page is gone: silent for ``STALE_SECONDS``, though a page pings every
        ``PING_SECONDS`` from the moment its comm opens. Pings on a subshell arrive
        while cells run; on the main shell they wait for the running cell, so there
        only silence while other pages were heard counts (``newest``: when the hub
        last heard any page; a lone page on the main shell is never judged)."""
        if self.on_subshell:
            return now - self.last_heard > STALE_SECONDS
        return newest - self.last_heard > STALE_SECONDS

    def close(self) -> None:
        self.closed = True
        with self._lock:
            self._drop_publishers()
        try:
            self.comm.close()
        except Exception:  # the kernel is going away
            pass


def _keep_browser_routing(comm: Any) -> None:
    """Handle the browser's messages on the subshell it sent them to.

    ipykernel 7 routes a comm's incoming messages to the subshell of the request
    under which the kernel last sent on that comm (``_reply_subshell_for``), for
    widgets that wait for a reply in a cell. Ours wait for nothing; the kernel sends
    on them from a cell (``announce``, a restart of the cluster) and from the hub's
    thread, which would send every later browser message to the main shell, behind
    the running cell. Keep the browser's choice."""
    if hasattr(comm, "_reply_subshell_for"):
        comm._reply_subshell_for = lambda _data, default: default


class Hub:
    """Every channel of this kernel and the memory history they share; follows the
    default source (the latest Client). No thread of its own: the kernel's hub
    (``hub.py``) ticks the channels' publishers and calls ``_tick`` (status, stale
    channels) while a channel is open."""

    def __init__(
        self, controls: ClusterControls | None = None, kernel_hub: KernelHub | None = None
    ) -> None:
        self.channels: list[Channel] = []
        self.runner = ControlRunner(controls)
        self.controls = controls
        self.source: DiagnosticsSource | None = None
        self.memory: collections.deque[list[float]] = collections.deque(maxlen=MEMORY_SAMPLES)
        self.status: dict[str, Any] = {"cluster": None, "memory": None}
        self._last_status_at = -math.inf
        self._last_runs_at = -math.inf
        self._lock = threading.RLock()
        self.kernel_hub = kernel_hub if kernel_hub is not None else hub_module.hub()
        try:
            self.source = default_source()
        except ValueError:
            self.source = None
        self._unwatch = watch_default_source(self._source_changed)

    # -- channels ----------------------------------------------------------------------

    def opened(self, comm: Any, _msg: Any = None) -> Channel:
        """A browser opened a comm (or accepted ours): feed it."""
        channel = Channel(self, comm)
        with self._lock:
            self.channels.append(channel)
            channel.bind(self.source)
            self._refresh_status()
            channel.send_everything()
            self._start()
        return channel

    def remove(self, channel: Channel) -> None:
        channel.closed = True
        with self._lock:
            if channel in self.channels:
                self.channels.remove(channel)
            channel._drop_publishers()

    def announce(self) -> None:
        """Open a comm to this kernel's JupyterLab (if it has the extension, it takes
        it as its connection; if not, it closes it)."""
        from comm import create_comm

        comm = create_comm(target_name=TARGET, data={"protocol": PROTOCOL})
        self.opened(comm)

    def show(self, kind: str, mode: str) -> None:
        with self._lock:
            if not self.channels:
                self.announce()
            for channel in self.channels:
                channel.send({"type": "show", "kind": kind, "mode": mode})

    # -- the cluster -------------------------------------------------------------------

    def _source_changed(self, source: DiagnosticsSource | None) -> None:
        with self._lock:
            if source is self.source:
                return
            self.source = source
            self.memory.clear()
            self._last_status_at = self._last_runs_at = -math.inf
            for channel in self.channels:
                channel.bind(source)
            if source is not None and not self.channels and in_notebook():
                self.announce()  # panels opened before this cluster existed: connect
                return
            self._refresh_status()
            for channel in self.channels:
                channel.send_everything()

    def _refresh_status(self) -> None:
        """Read the cluster's summary and a memory sample (at most once a second)."""
        now = time.monotonic()
        if now - self._last_status_at < STATUS_INTERVAL * 0.9:
            return
        self._last_status_at = now
        source = self.source
        if source is None:
            self.status = {"cluster": None, "memory": None}
            return
        try:
            sample = memory_sample(source, time.time())
            info = source.info()
            mirrors = [c.mirror for c in self.channels if c.mirror is not None]
            mirror = mirrors[0] if mirrors else None
            if mirror is not None and mirror.reads == 0:  # a new channel's: not read yet
                mirror.read()
            cluster = cluster_summary(source, info, mirror)
            if self.controls is not None:
                cluster["controls"] = self.controls.abilities(source)
                cluster["client_code"] = cluster["controls"].pop("client_code", None)
            self.status = {"cluster": cluster, "memory": sample}
            if any("workers" in c.optional for c in self.channels):
                self.status["workers"] = worker_rows(info)
        except (RuntimeError, TimeoutError) as exc:  # closed, though no Client said so
            self.status = {"cluster": None, "memory": None, "error": str(exc)}
            return
        if sample is not None:
            self.memory.append(sample)

    def send_status(self, channel: Channel) -> None:
        status = self.status
        if "workers" in status and "workers" not in channel.optional:
            status = {k: v for k, v in status.items() if k != "workers"}
        if channel.last_status != status:
            channel.last_status = status
            channel.send({"type": "status", **status})

    def status_now(self) -> None:
        """Read the cluster again and send every channel its status (a control ran,
        a worker table opened): not a second later."""
        with self._lock:
            self._last_status_at = -math.inf
            self._refresh_status()
            channels = list(self.channels)
        for channel in channels:
            try:
                self.send_status(channel)
            except Exception:
                logger.debug("Could not send a status", exc_info=True)

    # -- on the kernel hub's thread ------------------------------------------------------

    def _start(self) -> None:
        self.kernel_hub.add_hook(self._tick)

    def _close_stale(self) -> None:
        """Close the channels whose page is gone (see ``Channel.stale``)."""
        now = time.monotonic()
        with self._lock:
            newest = max((c.last_heard for c in self.channels), default=now)
            stale = [c for c in self.channels if c.stale(now, newest)]
        for channel in stale:
            logger.info("Closing a panel channel whose page has gone silent")
            self.remove(channel)
            channel.close()

    def _offer_runs(self, channels: list[Channel]) -> None:
        """Every few seconds, the runs to choose from to the open Compare panels."""
        comparing = [c for c in channels if "compare" in c.optional]
        now = time.monotonic()
        if not comparing or now - self._last_runs_at < RUNS_INTERVAL:
            return
        self._last_runs_at = now
        from .compare import run_choices

        runs = run_choices(self.source)
        for channel in comparing:
            channel.offer_runs(runs)

    def _tick(self) -> None:
        """Once per tick of the kernel's hub: close silent channels, refresh and send
        the status (at most once a second), offer Compare panels new runs; leave the
        hub when no channel is left."""
        self._close_stale()
        with self._lock:
            channels = list(self.channels)
            if not channels:
                self.kernel_hub.remove_hook(self._tick)
                return
            self._refresh_status()
        try:
            self._offer_runs(channels)
        except Exception:  # the run history unreadable, the cluster closing
            logger.debug("Could not offer the runs to compare", exc_info=True)
        for channel in channels:
            try:
                self.send_status(channel)
            except (RuntimeError, TimeoutError) as exc:
                logger.info("Panel updates paused: %s", exc)
            except Exception:
                logger.exception("A panel update failed; that panel is closed")
                self.remove(channel)
                channel.close()

    def close(self) -> None:
        self.kernel_hub.remove_hook(self._tick)
        self._unwatch()
        for channel in list(self.channels):
            self.remove(channel)
            channel.close()


_hub: Hub | None = None
_controls_factory: Callable[[], ClusterControls] | None = None
_target_registered = False
_announced = False


def set_controls(factory: Callable[[], ClusterControls]) -> None:
    """What makes the sidebar's cluster controls, called when the hub is made (the
    package passes its own: this layer cannot make clients)."""
    global _controls_factory
    _controls_factory = factory


def hub(controls: ClusterControls | None = None) -> Hub:
    """This kernel's JupyterLab side, made on first use."""
    global _hub
    if controls is None and (_hub is None or _hub.controls is None) and _controls_factory:
        controls = _controls_factory()
    if _hub is None:
        _hub = Hub(controls)
    elif controls is not None and _hub.controls is None:
        _hub.controls = _hub.runner.controls = controls
    return _hub


def _opened(comm: Any, msg: Any) -> None:
    hub().opened(comm, msg)


def register_target() -> bool:
    """In a Jupyter kernel: answer the browser's comms on ``TARGET`` (what ``import
    kernel_cluster`` does: no thread, no comm, no hub until a browser asks). False
    (and nothing done) elsewhere."""
    global _target_registered
    if not in_notebook():
        return False
    if not _target_registered:
        from comm import get_comm_manager

        # comm types the handler as returning None; what it returns is ignored
        get_comm_manager().register_target(TARGET, _opened)
        _target_registered = True
    return True


def register(controls: ClusterControls | None = None) -> bool:
    """In a Jupyter kernel: answer the browser's comms and tell JupyterLab that
    kernel_cluster is here, once (``%load_ext kernel_cluster``, the first view,
    ``show()``). ``controls``: what the sidebar's cluster controls call. False (and
    nothing done) elsewhere."""
    global _announced
    if not register_target():
        return False
    h = hub(controls)
    if not h.channels and not _announced:
        _announced = True
        try:
            h.announce()
        except Exception:  # no front-end to talk to (a console, a test kernel)
            logger.debug("Could not announce kernel_cluster to JupyterLab", exc_info=True)
    return True


def show(view: str, mode: str = "split-right") -> None:
    """Open a JupyterLab panel of this kernel's cluster: ``view`` in ``VIEWS``
    (``"flame-graph"`` is an alias of ``"profile"``), placed by ``mode`` next to the
    notebook: ``split-right``, ``split-left``, ``split-top``, ``split-bottom``,
    ``tab-after`` or ``tab-before``."""
    view = "profile" if view == "flame-graph" else view
    if view not in VIEWS:
        raise ValueError(f"Unknown view {view!r}; choose one of {', '.join(VIEWS)}.")
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; choose one of {', '.join(MODES)}.")
    if not register():
        raise RuntimeError(
            "kernel_cluster.show() opens a JupyterLab panel, so it needs a notebook in "
            "JupyterLab; elsewhere use the widgets (client.dashboard()) or "
            "performance_report()."
        )
    hub().show(view, mode)
