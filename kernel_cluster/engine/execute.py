"""Running one task on a task thread and describing the outcome as an event."""

from __future__ import annotations

import os
import threading
import time
import traceback as tb_module
from types import TracebackType
from typing import Any

import cloudpickle
import tblib

from ..core import spec as spec_module
from ..core.keys import Key
from ..core.sizeof import sizeof
from ..core.worker_messages import ExecuteFailed, ExecuteSucceeded

# Frames from these files sit between the engine and the user's function; a
# traceback shown to the user starts below them.
_ENGINE_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(spec_module.__file__)})


def run_task(key: Key, spec: Any, data: dict) -> ExecuteSucceeded | ExecuteFailed:
    """Evaluate a task with its inputs; never raises (the outcome is the event).

    ``spec`` is a TaskSpec, or its cloudpickled bytes when it came from another process.
    """
    thread = threading.get_ident()
    start = time.time()
    try:
        if type(spec) is bytes:
            spec = load_task(key, spec)
        value = spec_module.evaluate(spec.expr, data)
    except BaseException as exc:
        stop = time.time()
        tb = user_traceback(exc.__traceback__)
        text = "".join(tb_module.format_exception(type(exc), exc, tb))
        exc.__traceback__ = tb
        return ExecuteFailed(key, exc, tb, text, [("compute", start, stop)], thread)
    stop = time.time()
    return ExecuteSucceeded(
        key, value, sizeof(value), type(value).__qualname__, [("compute", start, stop)], thread
    )


class TaskDeserializationError(RuntimeError):
    """A task arrived but could not be unpickled on the worker."""

    def __init__(self, key: Key, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(
            f"Task {key!r} could not be loaded on the worker: {reason}. Make sure the modules "
            "its function needs are importable in the worker's environment."
        )

    def __reduce__(self):
        return (TaskDeserializationError, (self.key, self.reason))


def load_task(key: Key, payload: bytes) -> Any:
    try:
        return cloudpickle.loads(payload)
    except Exception as exc:
        raise TaskDeserializationError(key, f"{type(exc).__name__}: {exc}") from None


def pack_exception(exc: BaseException, tb: TracebackType | None) -> tuple[bytes, dict | None]:
    """An exception as bytes and its traceback as plain data, for another process.

    The kernel unpickles them only when the user asks for the error; an exception
    that will not pickle is replaced by a RuntimeError carrying its text.
    """
    try:
        payload = cloudpickle.dumps(exc)
    except Exception:
        text = "".join(tb_module.format_exception_only(type(exc), exc)).strip()
        payload = cloudpickle.dumps(RuntimeError(f"(unpicklable exception) {text}"))
    tb_data = None
    if tb is not None:
        try:
            tb_data = tblib.Traceback(tb).as_dict()
        except Exception:
            tb_data = None
    return payload, tb_data


def unpack_exception(payload: Any, tb_data: Any, text: str = "") -> tuple[BaseException, Any]:
    """The inverse of ``pack_exception``; objects made in this process pass through."""
    if isinstance(payload, BaseException) or payload is None:
        return payload, tb_data
    try:
        exc = cloudpickle.loads(payload)
    except Exception as err:
        exc = RuntimeError(
            f"The task failed, and its exception could not be loaded ({err}):\n{text}"
        )
    tb = None
    if isinstance(tb_data, dict):
        try:
            tb = tblib.Traceback.from_dict(tb_data).as_traceback()
        except Exception:
            tb = None
    return exc, tb


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the engine's own frames from the top of a task's traceback."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in _ENGINE_FILES:
        tb = tb.tb_next
    return tb
