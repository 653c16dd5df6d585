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

from tests.engine.helpers import FileEvent, on_loop, scheduler_keys, wait_for


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


# -- issue 26.1: a cancelled task that runs on (for ever, perhaps) holds back no work --------


def spin_until(release: FileEvent, started: FileEvent) -> int:
    """Busy (holding a thread, as a loop that ignores cancellation does) until released."""
    started.set()
    while not release.is_set():
        pass
    return 0


def inc(x: int) -> int:
    return x + 1


@pytest.fixture
def one_thread_each(processes):
    """Two workers with one thread each (the issue's cluster), embedded or processes."""
    from kernel_cluster.client.client import Client
    from kernel_cluster.engine.cluster import KernelCluster

    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=processes) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def test_work_after_a_cancel_goes_past_the_thread_still_running_it(one_thread_each, tmp_path):
    """The issue's case: before, the six trivial tasks waited for the cancelled task's
    end on the worker whose only thread ran it (19.5 s there)."""
    from kernel_cluster.client.futures import wait

    _cluster, client = one_thread_each
    release, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")
    try:
        hog = client.submit(spin_until, release, started, pure=False)
        assert started.wait(10), "the task to cancel did not start"
        hog.cancel()
        fs = client.map(inc, range(6))
        _done, not_done = wait(fs, timeout=15)
        assert not not_done, "new work waited behind a cancelled task that still runs"
        assert client.gather(fs) == [1, 2, 3, 4, 5, 6]
    finally:
        release.set()


def test_work_queued_behind_a_task_then_cancelled_is_taken_back(one_thread_each, tmp_path):
    """Tasks already sent to the worker before the cancel wait there behind the task
    that runs on: the scheduler takes them back once the worker says every one of its
    threads runs a cancelled task, and places them on the free threads."""
    from kernel_cluster.client.futures import wait

    cluster, client = one_thread_each
    stuck, _free = sorted(client.scheduler_info()["workers"])
    release, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")
    try:
        hog = client.submit(spin_until, release, started, workers=[stuck], pure=False)
        assert started.wait(10), "the task to cancel did not start"
        # sent to the stuck worker while its thread is busy: they queue there
        fs = client.map(inc, range(4), workers=[stuck], allow_other_workers=True)
        wait_for(
            lambda: (
                on_loop(cluster, lambda: len(cluster.scheduler.state.workers[stuck].processing)) > 1
            ),
            what="tasks to be sent to the busy worker",
        )
        hog.cancel()
        _done, not_done = wait(fs, timeout=15)
        assert not not_done, "tasks stayed behind a task that was cancelled and runs on"
        assert client.gather(fs) == [1, 2, 3, 4]
        info = client.scheduler_info()["workers"][stuck]
        assert info["cancelled_running"] == 1 and info["processing"] == 0
    finally:
        release.set()
    wait_for(
        lambda: client.scheduler_info()["workers"][stuck]["cancelled_running"] == 0,
        what="the cancelled run to be reported ended",
    )
    assert client.submit(inc, 1, workers=[stuck]).result(timeout=10) == 2


def test_a_task_cancelled_while_it_waits_in_the_pool_takes_no_thread(one_thread_each, tmp_path):
    """A task handed to the worker's threads but not started when it is cancelled is
    withdrawn at once: it does not count as a running cancelled task until the task
    ahead of it ends (which would keep the worker from getting new work)."""
    cluster, client = one_thread_each
    busy, _ = sorted(client.scheduler_info()["workers"])
    release, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")
    try:
        running = client.submit(spin_until, release, started, workers=[busy], pure=False)
        assert started.wait(10), "the first task did not start"
        behind = client.submit(inc, 1, workers=[busy])
        wait_for(
            lambda: (
                on_loop(cluster, lambda: len(cluster.scheduler.state.workers[busy].processing)) == 2
            ),
            what="the second task to be sent behind the first",
        )
        behind.cancel()
        wait_for(
            lambda: client.scheduler_info()["workers"][busy]["cancelled_running"] == 0,
            what="the withdrawn task to be reported ended while the first still runs",
        )
        assert not running.done()
    finally:
        release.set()
    assert running.result(timeout=10) == 0


def test_cancelled_task_timeout_restarts_a_worker_process_whose_cancelled_task_runs_on(tmp_path):
    """Opt in: a worker process whose cancelled task still runs after the timeout is
    replaced (its thread could never be had back otherwise); off by default."""
    import psutil

    from kernel_cluster.client.client import Client
    from kernel_cluster.engine.cluster import KernelCluster

    release, started = FileEvent(tmp_path / "release"), FileEvent(tmp_path / "started")
    with (
        KernelCluster(
            n_workers=1, threads_per_worker=1, processes=True, cancelled_task_timeout=0.5
        ) as cluster,
        Client(cluster) as client,
    ):
        try:
            (old_pid,) = cluster.worker_pids().values()
            hog = client.submit(spin_until, release, started, pure=False)
            assert started.wait(10), "the task to cancel did not start"
            hog.cancel()
            wait_for(
                lambda: list(cluster.worker_pids().values()) not in ([], [old_pid]),
                timeout=30,
                what="the worker to be replaced",
            )
            assert client.submit(inc, 1).result(timeout=30) == 2
            wait_for(lambda: not psutil.pid_exists(old_pid) or _zombie(old_pid), what="its end")
        finally:
            release.set()


def _zombie(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_closing_past_a_cancelled_task_that_runs_on_says_what_it_leaves(caplog):
    """Embedded, ``close()`` waited 10 s per thread for a cancelled task that ignores
    cancellation, then returned saying nothing of the thread it left running."""
    from kernel_cluster import Client, KernelCluster

    release = threading.Event()
    started = threading.Event()

    def ignores_cancel() -> int:
        started.set()
        release.wait(120)
        return 1

    cluster = KernelCluster(n_workers=1, threads_per_worker=2)
    client = Client(cluster, set_as_default=False)
    try:
        future = client.submit(ignores_cancel)
        assert started.wait(30)
        future.cancel()
        client.close()
        with caplog.at_level("WARNING", logger="kernel_cluster.engine.pool"):
            cluster.close()
        (record,) = [r for r in caplog.records if "cannot stop a thread" in r.getMessage()]
        assert "1 task thread(s)" in record.getMessage()
        assert "processes=True" in record.getMessage()
    finally:
        release.set()
