"""The task thread pool on its own: real threads, no engine around it."""

from __future__ import annotations

import contextvars
import threading

from kernel_cluster.engine.pool import TaskThreadPool

var: contextvars.ContextVar[str | None] = contextvars.ContextVar("var", default=None)


def test_what_a_task_leaves_in_its_context_stays_out_of_the_wake_up():
    """The owner's wake-up runs outside the tasks' context: an asyncio loop would copy
    that context into its callbacks (the metrics listener must not travel that way)."""
    seen: list = []
    woke = threading.Event()

    def wake() -> None:
        seen.append(var.get())
        woke.set()

    pool = TaskThreadPool(1, "ctx", wake)
    try:
        pool.submit(var.set, "set by a task")
        assert woke.wait(10)
        assert seen == [None]
        pool.drain()
        woke.clear()
        pool.submit(var.get)  # the next task on that thread still sees it
        assert woke.wait(10)
        assert pool.drain() == ["set by a task"]
    finally:
        pool.stop()
