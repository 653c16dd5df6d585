"""The JupyterLab sidebar's cluster controls, kernel side: start a cluster for this
kernel (embedded or worker processes), scale it, stop it.

The sidebar asks over the panels' comm (``lab.py``), and the work happens here, in the
kernel, never in the Jupyter server. This layer cannot make clients (``client/`` is
above it), so what does it is a ``ClusterControls`` handed to ``lab.register`` by
the package (``kernel_cluster/__init__.py``, with ``client/lab_controls.py``'s).

Browser messages, validated by ``check_control`` (anything else is refused with a
``ValueError`` naming the field, the value and what is accepted):

- ``{"type": "start", "processes": bool, "n_workers": int, "threads_per_worker":
  int, "memory_limit": str}`` (``""``: the default, ``"auto"``);
- ``{"type": "scale", "n_workers": int}``;
- ``{"type": "stop"}``.

The kernel answers ``{"type": "control", "request": ..., "ok": bool, "message": str}``.
A control runs on a thread of its own, one at a time: starting worker processes
takes seconds, and the channel keeps answering meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..diagnostics.source import DiagnosticsSource

logger = logging.getLogger(__name__)

CONTROLS = ("start", "scale", "stop")
MAX_WORKERS = 256
MAX_THREADS = 256
MAX_MEMORY_LIMIT_CHARS = 40


class ClusterControls(Protocol):
    """What the sidebar can do to the kernel's cluster. Each returns what to tell the
    user, or raises an exception whose message says what went wrong."""

    def start(
        self, *, processes: bool, n_workers: int, threads_per_worker: int, memory_limit: str
    ) -> str: ...

    def scale(self, n_workers: int) -> str: ...

    def stop(self) -> str: ...

    def abilities(self, source: DiagnosticsSource | None) -> dict[str, Any]:
        """``{"scale": bool, "stop": bool, "client_code": str | None}`` for the
        cluster ``source`` shows (None: no cluster)."""
        ...


def _whole(content: dict[str, Any], name: str, low: int, high: int) -> int:
    value = content.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name!r} must be a whole number from {low} to {high}, got {value!r}")
    return value


def check_control(content: dict[str, Any]) -> dict[str, Any]:
    """A control message, checked (``content["type"]`` is one of ``CONTROLS``)."""
    kind = content["type"]
    if kind == "start":
        processes = content.get("processes")
        if not isinstance(processes, bool):
            raise ValueError(f"'processes' must be true or false, got {processes!r}")
        limit = content.get("memory_limit", "")
        if not isinstance(limit, str) or len(limit) > MAX_MEMORY_LIMIT_CHARS:
            raise ValueError(
                f"'memory_limit' must be a short string ('4 GiB', 'auto' or ''), got {limit!r:.60}"
            )
        return {
            "type": kind,
            "processes": processes,
            "n_workers": _whole(content, "n_workers", 0, MAX_WORKERS),
            "threads_per_worker": _whole(content, "threads_per_worker", 1, MAX_THREADS),
            "memory_limit": limit.strip(),
        }
    if kind == "scale":
        return {"type": kind, "n_workers": _whole(content, "n_workers", 0, MAX_WORKERS)}
    if kind == "stop":
        return {"type": kind}
    raise ValueError(f"unknown control {kind!r}; choose one of {CONTROLS}")


class ControlRunner:
    """Runs one control at a time on a thread of its own; ``reply(answer)`` gets the
    outcome, ``done()`` is called after (to send a fresh status)."""

    def __init__(self, controls: ClusterControls | None):
        self.controls = controls
        self._busy: str | None = None
        self._lock = threading.Lock()

    def run(
        self,
        request: dict[str, Any],
        reply: Callable[[dict[str, Any]], None],
        done: Callable[[], None],
    ) -> threading.Thread | None:
        kind = request["type"]
        answer = {"type": "control", "request": kind}
        if self.controls is None:
            reply({**answer, "ok": False, "message": "This kernel cannot start clusters."})
            return None
        with self._lock:
            if self._busy is not None:
                busy = self._busy
                reply({**answer, "ok": False, "message": f"Still busy with '{busy}': try again."})
                return None
            self._busy = kind
        thread = threading.Thread(
            target=self._run, args=(request, answer, reply, done), name=f"kernel-cluster-{kind}"
        )
        thread.daemon = True
        thread.start()
        return thread

    def _run(
        self,
        request: dict[str, Any],
        answer: dict[str, Any],
        reply: Callable[[dict[str, Any]], None],
        done: Callable[[], None],
    ) -> None:
        controls = self.controls
        assert controls is not None
        try:
            if request["type"] == "start":
                args = {k: v for k, v in request.items() if k != "type"}
                message = controls.start(**args)
            elif request["type"] == "scale":
                message = controls.scale(request["n_workers"])
            else:
                message = controls.stop()
            outcome = {**answer, "ok": True, "message": message}
        except Exception as exc:  # told to the user, who asked for it
            logger.info("Cluster control %s failed", request["type"], exc_info=True)
            outcome = {**answer, "ok": False, "message": f"{type(exc).__name__}: {exc}"}
        finally:
            with self._lock:
                self._busy = None
        try:
            reply(outcome)
            done()
        except Exception:
            logger.exception("Could not tell the browser how a cluster control went")
