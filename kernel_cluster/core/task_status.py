"""What a task is doing, in words: for a wait that timed out, so that the error says
why the future is not done (waiting for inputs, queued, running where, no worker it
may run on) instead of leaving the user to guess. Pure: reads the scheduler's records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .scheduler_tasks import TaskState

__all__ = ["task_status"]

_SHOWN = 3  # inputs or addresses named at most


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def task_status(tasks: Mapping[Any, TaskState], key: Any) -> str:
    """One clause on the task of ``key`` as the scheduler holds it now."""
    ts = tasks.get(key)
    if ts is None:
        return "the scheduler no longer holds it (released or forgotten)"
    state = ts.state
    if state == "processing" and ts.processing_on is not None:
        return f"it is running (or about to) on worker {ts.processing_on.address}"
    if state == "waiting":
        inputs = [repr(d.key) for d in ts.waiting_on]
        if inputs:
            return f"it waits for {len(inputs)} input(s) still being computed: {_names(inputs)}"
        return "it waits for its inputs"
    if state == "queued":
        return "it is queued on the scheduler: every worker thread is busy with other tasks"
    if state == "no-worker":
        allowed = sorted(ts.worker_restrictions or ())
        where = f" (allowed: {_names(allowed)})" if allowed else ""
        return f"no worker it may run on is in the cluster{where}: it waits for one to join"
    if state == "memory":
        return "it has finished; its value is on its way to the client"
    if state == "erred":
        return "it has failed; the error is on its way to the client"
    return f"its state on the scheduler is {state!r}"
