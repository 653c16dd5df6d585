"""Issue 17: a task cancelled or released while it runs still takes its thread.

A running task cannot be interrupted. Before the fix the scheduler freed its slot at
once: new tasks went to that worker and waited behind the cancelled one while another
worker idled. Now the worker says when the cancelled run has ended, the scheduler
counts the thread as busy until then, and ``scheduler_info()`` shows it.
"""

from __future__ import annotations

import gc
import threading

import pytest

from tests.engine.helpers import FileEvent, scheduler_keys, wait_for


def hold(started: FileEvent, release: FileEvent, i: int) -> int:
    started.set()
    assert release.wait(30), "the test never released this task"
    return i


def thread_name(i: int) -> str:
    return threading.current_thread().name


@pytest.mark.parametrize("how", ["cancel", "release"])
def test_new_tasks_go_past_threads_busy_with_cancelled_tasks(client, cluster, new_event, how):
    info = client.scheduler_info()["workers"]
    busy, free = sorted(info)
    release = new_event()
    started = [new_event(), new_event()]
    # both threads of one worker run a task that will not end until released
    hogs = [
        client.submit(hold, started[i], release, i, workers=[busy], pure=False) for i in range(2)
    ]
    for event in started:
        assert event.wait(10), "the tasks to cancel did not start"
    if how == "cancel":
        client.cancel(hogs)
    del hogs
    gc.collect()
    wait_for(lambda: not scheduler_keys(cluster), what="the scheduler to let go of both")
    workers = client.scheduler_info()["workers"]
    assert workers[busy]["cancelled_running"] == 2
    assert workers[busy]["processing"] == 0
    try:
        fs = client.map(thread_name, range(2), pure=False)
        names = [f.result(timeout=10) for f in fs]
        free_name = info[free]["name"]
        assert all(n.startswith(f"{free_name}-") for n in names), (names, free_name)
    finally:
        release.set()
    wait_for(
        lambda: client.scheduler_info()["workers"][busy]["cancelled_running"] == 0,
        what="the cancelled runs to be reported ended",
    )
