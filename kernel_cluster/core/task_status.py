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
        return _processing(ts)
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


def _processing(ts: TaskState) -> str:
    """Sent to a worker: what the scheduler knows of why it may not run yet there
    (a task may be sent ahead of its inputs; a worker tells it of each input it
    fetched, and of pausing; of its queue, it knows how many tasks it sent past the
    threads)."""
    ws = ts.processing_on
    assert ws is not None
    where = f"worker {ws.address}"
    computing = [repr(d.key) for d in ts.dependencies if d.state != "memory"]
    fetching = [repr(d.key) for d in ts.dependencies if d.state == "memory" and ws not in d.who_has]
    if computing:  # sent ahead of its inputs, to the worker that will have them
        return (
            f"it was sent to {where}, where it waits for {len(computing)} input(s) "
            f"still being computed: {_names(computing)}"
        )
    if ws.paused:
        return (
            f"it was sent to {where}, which is paused (its memory is past the pause "
            "fraction): it runs once the worker frees memory, or is moved if it leaves"
        )
    if fetching:
        return (
            f"it was sent to {where}, which fetches {len(fetching)} of its input(s) from "
            f"other workers before it can run: {_names(fetching)}"
        )
    # the tasks there that may run now (not those sent ahead of their inputs)
    busy = sum(1 for t in ws.processing if all(d.state == "memory" for d in t.dependencies))
    if busy > ws.nthreads:
        return (
            f"it was sent to {where}, whose {ws.nthreads} thread(s) have {busy} tasks: "
            "it runs, or waits there for a free thread"
        )
    if ws.running_cancelled:
        return (
            f"it was sent to {where}, whose threads still run {len(ws.running_cancelled)} "
            "cancelled task(s): it runs once one ends"
        )
    return f"it is running on {where} (or about to start)"
