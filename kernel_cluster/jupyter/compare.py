"""The ``Compare`` widget, and the kernel's side of the JupyterLab Compare panel.

    from kernel_cluster.jupyter.compare import Compare
    Compare("etl@-1", "etl")          # or Compare() for the last pair compared
    kernel_cluster.show("compare")    # the same view as a JupyterLab panel

Both draw the renderer library's ``CompareView`` (``widgets/src/compare.ts``) from
``Comparison.to_data()``: paired or diverging bars by function and by activity,
the fine metrics' unit, function and activity filters, per-task and per-second
values, and the verdict. The comparison is computed here, once per pair; the
browser filters and normalises. Both offer the stored runs and the cluster's
finished top-level spans to choose ``a`` and ``b`` from; a choice comes back as
plain strings (a panel's message is validated in ``lab.check_message``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import anywidget
import traitlets

from ..diagnostics.attach import default_source, source_of
from ..diagnostics.history import compare as comparing
from ..diagnostics.history.stored import HistoryOff, StoredRun, stored_runs
from ..diagnostics.snapshots import SpanInfo
from ..diagnostics.source import Diagnosable, DiagnosticsSource
from .widgets import STYLES, _read, bundle_path

logger = logging.getLogger(__name__)

CHOICES = 40  # runs offered to choose from, the latest


def _source(client: Diagnosable | None) -> DiagnosticsSource | None:
    if client is not None:
        return source_of(client)
    try:
        return default_source()
    except ValueError:  # no cluster: stored runs only
        return None


def _ref(run: object) -> str:
    if isinstance(run, StoredRun | SpanInfo):
        return run.id
    if isinstance(run, str):
        return run
    raise TypeError(f"Compare takes span ids, names, 'name@-k' or stored runs; got {run!r}.")


def _label(name: str, stop: float, wall: float, where: str) -> str:
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stop)) if stop else "?"
    return f"{name} · {clock} · {wall:.3g} s ({where})"


def run_choices(source: DiagnosticsSource | None, limit: int = CHOICES) -> list[dict[str, str]]:
    """The latest finished top-level spans of the cluster, then the latest stored runs
    (a run both live and stored is offered once), newest first."""
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    if source is not None:
        try:
            spans = [s for s in source.spans(refresh=False) if s.parent is None and s.done]
        except (RuntimeError, TimeoutError):
            spans = []
        for s in sorted(spans, key=lambda s: s.stop, reverse=True)[:limit]:
            begin = s.start or s.enqueued
            out.append(
                {"ref": s.id, "label": _label(" / ".join(s.name), s.stop, s.stop - begin, "live")}
            )
            seen.add(s.id)
    try:
        stored = stored_runs(limit)
    except (HistoryOff, RuntimeError):
        return out
    for row in reversed(stored):
        if row["id"] not in seen:
            label = _label(row["name"], row["stop"], row["wall"], "stored")
            out.append({"ref": row["id"], "label": label})
    return out


def default_pair(choices: list[dict[str, str]]) -> tuple[str, str]:
    """What to show when nothing was chosen: the last pair compared here if both are
    still offered (not the spans of a cluster since closed), else the two latest runs
    ("", "" when there are not two)."""
    offered = {c["ref"] for c in choices}
    last = comparing.last_pair
    if last is not None and set(last) <= offered:
        return last
    if len(choices) >= 2:
        return choices[1]["ref"], choices[0]["ref"]
    return "", ""


def state(source: DiagnosticsSource | None, a: str | None, b: str | None) -> dict[str, Any]:
    """Everything a Compare view shows for the pair ``a``, ``b`` (None: the default):
    ``runs`` to choose from, the refs, ``data`` (``Comparison.to_data``) or ``error``."""
    choices = run_choices(source)
    if not a or not b:
        a, b = default_pair(choices)
    out: dict[str, Any] = {"runs": choices, "a": a, "b": b, "data": None, "error": ""}
    if not a or not b:
        return out
    try:
        out["data"] = comparing.comparison(a, b, source).to_data()
    except (KeyError, ValueError, TypeError, RuntimeError, TimeoutError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        out["error"] = f"Cannot compare {a} with {b}: {message}"
    return out


def runs_update(
    source: DiagnosticsSource | None, runs: list[dict[str, str]], compared: bool
) -> dict[str, Any]:
    """What an open Compare panel is sent when the runs changed (a span finished, a
    run was stored): the runs, or, with nothing compared yet, the default pair's
    state (the latest two runs, now that there may be two)."""
    if compared:
        return {"runs": runs}
    return state(source, None, None)


class Compare(anywidget.AnyWidget):
    """Two runs compared, ``b`` against the baseline ``a`` (see ``kernel_cluster.compare``
    for what they may be; None for both: the last pair compared, or the two latest
    runs). ``client``: where live spans are read (default: the latest Client, or
    ``attach``'s). Choosing other runs in the view, or setting ``a`` / ``b`` here,
    compares them; ``unit``, ``mode`` (``"side-by-side"`` or ``"diverging"``),
    ``normalise`` (``"total"``, ``"per-task"``, ``"per-wall"``) and the hidden
    functions and activities are synced with the view."""

    _esm = traitlets.Unicode("").tag(sync=True)
    _css = traitlets.Unicode("").tag(sync=True)
    kind = traitlets.Unicode("compare").tag(sync=True)
    _uid = traitlets.Unicode("").tag(sync=True)
    data = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
    runs: traitlets.List[dict[str, str]] = traitlets.List(traitlets.Dict()).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    a = traitlets.Unicode("").tag(sync=True)
    b = traitlets.Unicode("").tag(sync=True)
    unit = traitlets.Unicode("seconds").tag(sync=True)
    mode = traitlets.Enum(["side-by-side", "diverging"], "side-by-side").tag(sync=True)
    normalise = traitlets.Enum(["total", "per-task", "per-wall"], "total").tag(sync=True)
    hidden_functions = traitlets.List(traitlets.Unicode()).tag(sync=True)
    hidden_activities = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(
        self,
        a: object = None,
        b: object = None,
        client: Diagnosable | None = None,
        **kwargs: Any,
    ) -> None:
        self._ready = False  # a and b are set by __init__ below: nothing to redo yet
        self.source = _source(client)
        first = state(self.source, None if a is None else _ref(a), None if b is None else _ref(b))
        super().__init__(
            _esm=_read(bundle_path()),
            _css=_read(STYLES),
            _uid=uuid.uuid4().hex,
            **first,
            **kwargs,
        )
        self.on_msg(self._on_browser_message)
        self._ready = True

    @traitlets.observe("a", "b")
    def _pair_changed(self, change: dict[str, Any]) -> None:
        if self._ready:
            self.refresh()

    def refresh(self) -> None:
        """Compare ``a`` and ``b`` again (a live run may have gone on), and the choices."""
        new = state(self.source, self.a, self.b)
        with self.hold_trait_notifications():
            self.runs = new["runs"]
            self.data = new["data"]
            self.error = new["error"]

    def table(self) -> Any:
        """The comparison as ``kernel_cluster.compare`` returns it, for the current unit."""
        return comparing.comparison(self.a, self.b, self.source).table(self.unit)

    def _on_browser_message(self, _widget: Any, content: Any, buffers: list[bytes]) -> None:
        if isinstance(content, dict) and content.get("type") == "refresh":
            return  # every view asks when it starts; the data is in the traits already
        logger.warning("Ignoring an unexpected message from the browser: %.200r", content)
