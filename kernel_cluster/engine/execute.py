"""Running one task on a task thread and describing the outcome as an event."""

from __future__ import annotations

import os
import threading
import time
import traceback as tb_module
from types import TracebackType
from typing import Any

from ..core import spec as spec_module
from ..core.keys import Key
from ..core.sizeof import sizeof
from ..core.worker_messages import ExecuteFailed, ExecuteSucceeded

# Frames from these files sit between the engine and the user's function; a
# traceback shown to the user starts below them.
_ENGINE_FILES = frozenset({os.path.abspath(__file__), os.path.abspath(spec_module.__file__)})


def run_task(key: Key, expr: Any, data: dict) -> ExecuteSucceeded | ExecuteFailed:
    """Evaluate ``expr`` with its inputs; never raises (the outcome is the event)."""
    thread = threading.get_ident()
    start = time.time()
    try:
        value = spec_module.evaluate(expr, data)
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


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """Drop the engine's own frames from the top of a task's traceback."""
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in _ENGINE_FILES:
        tb = tb.tb_next
    return tb
