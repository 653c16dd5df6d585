"""ProgressBar: one computation's progress, as a text bar or the Progress widget.

In a terminal (or a script, or a log) it draws, every ``dt`` seconds while the
computation runs, the share of its tasks done and the time since it started::

    [##########################              ] | 65% Completed | 3.2 s

and one last line at the end (``100%``, unless it failed), nothing at all for a
computation shorter than ``minimum`` seconds. In a notebook, on a cluster, it shows
the ``Progress`` widget of the computing client instead (the widget, from
``kernel_cluster.jupyter``, registers itself here: diagnostics imports nothing of
the layer above). Its timer thread ends with the computation, however it ends.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from ..jupyter.notebook import in_notebook
from .callbacks import Callback

__all__ = ["ProgressBar", "format_time", "progress_bar_widget"]


def progress_bar_widget(client: Any) -> Callable[[], None] | None:
    """Show the client's ``Progress`` widget now if in a notebook; returns what ends
    its updates once the computation is done (None elsewhere: the bar is text)."""
    if not in_notebook():
        return None
    try:
        from IPython.display import display

        from ..jupyter.widgets import Progress  # anywidget: imported when first needed

        widget = Progress(client)
    except (ImportError, FileNotFoundError):  # no widget libraries or bundle: text
        return None
    display(widget)  # type: ignore[no-untyped-call]

    def done() -> None:
        try:
            widget.update(force=True)
        finally:
            poller = getattr(widget, "_poller", None)
            if poller is not None:
                poller.stop()  # the views stay, showing the final state

    return done


def format_time(seconds: float) -> str:
    """``3.2 s``, ``2min 5.0 s``, ``1hr 2min 5.0 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}min {secs:.1f} s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}hr {int(minutes)}min {secs:.1f} s"


class ProgressBar(Callback):
    """``with ProgressBar(): client.get(dsk, keys)``, or ``ProgressBar().register()``.

    ``minimum``: draw nothing for computations shorter than this (seconds);
    ``width``: characters of the bar; ``dt``: seconds between redraws; ``out``: where
    the text goes (standard output, as it is when drawing, by default).
    """

    uses_result = False

    def __init__(
        self, minimum: float = 0, width: int = 40, dt: float = 0.1, out: IO[str] | None = None
    ) -> None:
        if not width >= 1:
            raise ValueError(f"ProgressBar(width={width!r}): give a number of characters >= 1.")
        if not dt > 0:
            raise ValueError(f"ProgressBar(dt={dt!r}): give seconds between redraws, > 0.")
        super().__init__()
        self.minimum = minimum
        self.width = int(width)
        self.dt = dt
        self._out = out
        self._state: dict[str, Any] | None = None  # the latest computation's
        self._t0 = 0.0
        self._runs: dict[int, _Run] = {}  # id(state) -> the bar of each computation
        self._lock = threading.Lock()
        self._starting = threading.local()
        self._drawn = False
        self.last_elapsed = 0.0

    @property
    def out(self) -> IO[str]:
        return self._out if self._out is not None else sys.stdout

    def _start(self, dsk: Any) -> None:
        self._drawn = False
        self._starting.t0 = time.perf_counter()  # (start_state follows in this thread)

    def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
        t0 = getattr(self._starting, "t0", None) or time.perf_counter()
        self._starting.t0 = None
        bar = _Run(state, t0)
        with self._lock:
            self._runs[id(state)] = bar
        self._state, self._t0 = state, t0
        client = state.get("client")
        if client is not None:
            bar.widget_stop = progress_bar_widget(client)
            if bar.widget_stop is not None:
                return
        bar.timer = threading.Thread(
            target=self._tick, args=(bar,), name="ProgressBar", daemon=True
        )
        bar.timer.start()

    def _pretask(self, key: Any, dsk: Any, state: dict[str, Any]) -> None:
        pass  # (declared so that the engine reports tasks: the bar counts them)

    def _tick(self, bar: _Run) -> None:
        while not bar.stop.wait(self.dt):
            elapsed = time.perf_counter() - bar.t0
            if elapsed >= self.minimum:
                self._draw(_fraction(bar.state), elapsed)

    def fraction(self) -> float:
        """The share of the (latest) computation's tasks finished."""
        return _fraction(self._state)

    def _draw(self, fraction: float, elapsed: float, end: str = "") -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        n = int(self.width * fraction)
        bar = "#" * n + " " * (self.width - n)
        text = f"\r[{bar}] | {int(100 * fraction):3d}% Completed | {format_time(elapsed)}"
        out = self.out
        try:
            out.write(text + end)
            out.flush()
        except (OSError, ValueError):  # a closed stream: nothing to show it on
            return
        self._drawn = True

    def _finish(self, dsk: Any, state: dict[str, Any], errored: bool) -> None:
        with self._lock:
            bar = self._runs.pop(id(state), None)
        if bar is None:  # (its start_state hook raised: nothing was started)
            return
        elapsed = time.perf_counter() - bar.t0
        self.last_elapsed = elapsed
        bar.stop.set()
        if bar.timer is not None and bar.timer is not threading.current_thread():
            bar.timer.join()
        if bar.widget_stop is not None:
            bar.widget_stop()
        elif elapsed >= self.minimum:
            self._draw(_fraction(state) if errored else 1.0, elapsed, end="\n")
        if self._state is state:
            self._state = None


class _Run:
    """One computation's bar: a registered ProgressBar (or one ``with`` block around
    several ``client.compute`` calls) follows overlapping computations, each with its
    own timer, ended by its own finish."""

    __slots__ = ("state", "stop", "t0", "timer", "widget_stop")

    def __init__(self, state: dict[str, Any], t0: float) -> None:
        self.state = state
        self.t0 = t0
        self.stop = threading.Event()
        self.timer: threading.Thread | None = None
        self.widget_stop: Callable[[], None] | None = None


def _fraction(state: dict[str, Any] | None) -> float:
    if not state:
        return 0.0
    total = len(state["dependencies"])
    return len(state["finished"]) / total if total else 1.0
