"""The engine's loop thread on its own."""

from __future__ import annotations

import contextvars
import threading

from kernel_cluster.engine.loop import LoopThread
from kernel_cluster.engine.process_meter import context_meter

var: contextvars.ContextVar[str | None] = contextvars.ContextVar("var", default=None)


def test_work_handed_to_the_loop_does_not_carry_the_callers_context():
    """Code inside a task (whose thread listens to context_meter) may call the engine:
    the engine's work must not report its metrics to that task."""
    loop = LoopThread("test-loop")
    token = var.set("the caller's")
    try:
        assert loop.run(var.get, timeout=10) is None
        seen: list = []
        done = threading.Event()
        loop.call_soon(lambda: (seen.append((var.get(), context_meter.active)), done.set()))
        assert done.wait(10)
        assert seen == [(None, False)]
    finally:
        var.reset(token)
        loop.stop()
