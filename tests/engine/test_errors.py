"""Failures end to end: task errors, rejected graphs, timeouts and cancellation."""

from __future__ import annotations

import asyncio
import gc
import traceback
from operator import add

import pytest

from kernel_cluster.client.client import Client, MissingKeyError
from kernel_cluster.client.futures import CancelledError, as_completed, wait
from kernel_cluster.core.spec import GraphError

from .helpers import (
    FileEvent,
    blocked_until,
    on_loop,
    scheduler_keys,
    settled,
    wait_for,
    worker_task_records,
)


class CustomError(Exception):
    pass


def inc(x):
    return x + 1


def fail_on(x, bad):
    if x == bad:
        raise CustomError(f"bad input {x}")
    return x


def user_function_that_fails(x):
    return helper_that_raises(x)


def helper_that_raises(x):
    raise CustomError(f"failed on {x}")


def frame_names(tb) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(tb)]


ENGINE_FRAMES = {"run", "_run_in_full", "evaluate", "_substitute", "_run", "_work"}


# -- a task raises -------------------------------------------------------------------


def test_result_reraises_the_original_exception_with_the_user_traceback(client):
    f = client.submit(user_function_that_fails, 3)
    with pytest.raises(CustomError, match="failed on 3") as info:
        f.result()
    names = frame_names(info.value.__traceback__)
    assert names[-2:] == ["user_function_that_fails", "helper_that_raises"]
    assert not ENGINE_FRAMES & set(names), names
    assert f.status == "error"
    assert f.done()


def test_exception_and_traceback_methods(client):
    f = client.submit(user_function_that_fails, 1)
    exc = f.exception(timeout=10)
    assert isinstance(exc, CustomError)
    assert str(exc) == "failed on 1"
    names = frame_names(f.traceback())
    # the traceback starts at the user's function: no engine frame above it
    assert names == ["user_function_that_fails", "helper_that_raises"]


def test_result_raises_the_same_way_every_time(client):
    f = client.submit(user_function_that_fails, 2)
    for _ in range(3):
        with pytest.raises(CustomError) as info:
            f.result()
        assert frame_names(info.value.__traceback__)[-1] == "helper_that_raises"


def test_dependents_fail_with_the_same_error(client):
    x = client.submit(user_function_that_fails, 1)
    y = client.submit(inc, x)
    z = client.submit(add, y, client.submit(inc, 10))
    for f in (x, y, z):
        with pytest.raises(CustomError, match="failed on 1") as info:
            f.result()
        assert frame_names(info.value.__traceback__)[-1] == "helper_that_raises"
    assert type(z.exception()) is CustomError


def test_gather_and_get_raise_the_task_error(client):
    fs = client.map(fail_on, range(10), bad=7)
    with pytest.raises(CustomError, match="bad input 7"):
        client.gather(fs)
    assert client.gather(fs, errors="skip") == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    dsk = {"a": (fail_on, 1, 1), "b": (inc, "a"), "c": (inc, 1)}
    with pytest.raises(CustomError, match="bad input 1"):
        client.get(dsk, ["c", "b"])


def test_get_and_gather_raise_as_soon_as_a_key_fails(client, new_event):
    # the first key is still running when the second fails: the error comes back at
    # once, not after the slow key is done (its task is released and cancelled)
    event = new_event()
    dsk = {"slow": (blocked_until, event, 1), "bad": (fail_on, 3, 3)}
    with pytest.raises(CustomError, match="bad input 3"):
        client.get(dsk, ["slow", "bad"])
    slow = client.submit(blocked_until, event, 2)
    bad = client.submit(fail_on, 4, 4)
    with pytest.raises(CustomError, match="bad input 4"):
        client.gather([slow, bad])
    assert not slow.done()
    event.set()
    assert client.gather([slow, bad], errors="skip") == [2]


def test_an_error_in_a_nested_task_of_a_dict_graph(client):
    dsk = {"a": 1, "b": (inc, (user_function_that_fails, (inc, "a")))}
    with pytest.raises(CustomError, match="failed on 2") as info:
        client.get(dsk, "b")
    names = frame_names(info.value.__traceback__)
    assert names[-2:] == ["user_function_that_fails", "helper_that_raises"]
    assert not ENGINE_FRAMES & set(names), names


def test_the_cluster_keeps_working_after_errors(client, cluster):
    bad = client.map(fail_on, range(100), bad=50)
    wait(bad)
    assert sum(f.status == "error" for f in bad) == 1
    assert client.gather(client.map(inc, range(100))) == list(range(1, 101))
    assert client.submit(inc, client.submit(inc, 1)).result() == 3
    del bad
    wait_for(lambda: not any(key.startswith("fail_on") for key in scheduler_keys(cluster)))


def test_released_failed_futures_are_forgotten(client, cluster):
    x = client.submit(user_function_that_fails, 1)
    y = client.submit(inc, x)
    with pytest.raises(CustomError):
        y.result()
    with pytest.raises(CustomError):
        client.gather([x, y])
    del x, y
    gc.collect()
    wait_for(lambda: scheduler_keys(cluster) == set(), what="failed tasks to be forgotten")


def test_workers_forget_failed_tasks(client, cluster):
    f = client.submit(user_function_that_fails, 1)
    assert isinstance(f.exception(timeout=10), CustomError)
    del f
    wait_for(lambda: scheduler_keys(cluster) == set())
    # the scheduler frees the worker's record of the failure in the same engine event
    # (a worker process hears of it a message later)
    settled(cluster, lambda: worker_task_records(cluster), {}, "task records on workers")


def test_as_completed_reports_failed_futures_too(client):
    good = client.submit(inc, 1)
    bad = client.submit(user_function_that_fails, 1)
    assert set(as_completed([good, bad])) == {good, bad}
    with pytest.raises(CustomError):
        list(as_completed([good, bad], with_results=True))


def test_an_error_that_cannot_be_instantiated_again(client):
    class Awkward(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    def raise_awkward():
        raise Awkward(1, 2)

    with pytest.raises(Awkward, match="1/2"):
        client.submit(raise_awkward).result()


# -- graphs rejected before anything runs -------------------------------------------


def test_a_cycle_is_rejected_before_anything_runs(client, cluster):
    dsk = {"a": (inc, "c"), "b": (inc, "a"), "c": (inc, "b"), "d": (inc, 1)}
    with pytest.raises(GraphError, match="cycle") as info:
        client.get(dsk, "d")
    assert set(info.value.keys) >= {"a", "b", "c"}
    with pytest.raises(GraphError, match="itself"):
        client.get({"a": (inc, "a")}, "a")
    with pytest.raises(GraphError, match="cycle"):
        client.get({"a": (inc, (inc, "b")), "b": (add, 1, ["a"])}, "a")
    assert scheduler_keys(cluster) == set()


def test_a_missing_key_is_rejected_before_anything_runs(client, cluster):
    dsk = {"a": (inc, 1), "b": (inc, "a")}
    with pytest.raises(MissingKeyError, match="'zzz' is not in the graph") as info:
        client.get(dsk, ["b", "zzz"])
    assert isinstance(info.value, KeyError)
    assert "'zzz' is not in the graph" in str(info.value)
    with pytest.raises(KeyError):
        client.get(dsk, [["a"], [("b", 0)]])
    assert scheduler_keys(cluster) == set()


def test_malformed_keys_are_rejected_before_anything_runs(client, cluster):
    with pytest.raises(TypeError, match="list"):
        client.submit(inc, 1, key=["a"])
    with pytest.raises(TypeError, match="object"):
        client.get({object(): (inc, 1), "b": (inc, 2)}, "b")
    with pytest.raises(TypeError, match="list"):
        client.map(inc, [1, 2], key=["ok", ["not", "ok"]])
    with pytest.raises(TypeError, match="empty"):
        client.get({(): 1, "b": 2}, "b")
    with pytest.raises((KeyError, TypeError)):
        client.get({"a": 1}, [{"a"}])
    with pytest.raises(TypeError, match="dict"):
        client.get([("a", 1)], "a")
    assert scheduler_keys(cluster) == set()


# -- timeouts ---------------------------------------------------------------------------


def test_as_completed_timeout(client, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 1)
    seq = as_completed([f])
    with pytest.raises(TimeoutError):
        next(seq.iter(timeout=0.05))
    event.set()
    assert next(seq.iter(timeout=10)) is f


def test_result_timeout_leaves_the_task_running(client, cluster, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 7)
    with pytest.raises(TimeoutError, match="goes on"):
        f.result(timeout=0.1)
    with pytest.raises(TimeoutError):
        f.exception(timeout=0.01)
    assert not f.done()
    assert on_loop(cluster, lambda: cluster.scheduler.state.tasks[f.key].state) == "processing"
    event.set()
    assert f.result(timeout=10) == 7


def _running_on(cluster, key):
    ts = cluster.scheduler.state.tasks.get(key)
    return ts.processing_on.address if ts is not None and ts.processing_on else None


def test_a_timeout_names_the_timeout_given_and_what_the_task_is_doing(client, cluster, new_event):
    """A user trial's timeouts said "not done after 1.99 s" for ``wait(fs, timeout=6)``
    (the time left for the last future, not the timeout given) and "the task keeps
    running" of tasks that had not started: now the timeout given, and the task's
    state on the scheduler."""
    event = new_event()
    running = client.submit(blocked_until, event, 1)
    wait_for(lambda: on_loop(cluster, _running_on, cluster, running.key), 30, "it to run")
    worker = on_loop(cluster, _running_on, cluster, running.key)
    with pytest.raises(TimeoutError) as info:
        running.result(timeout=0.2)
    text = str(info.value)
    assert "timeout of 0.2 s" in text and "running" in text and worker in text, text
    waiting = client.submit(inc, running)  # waits for the blocked one
    with pytest.raises(TimeoutError) as info:
        wait([running, waiting], timeout=0.3)
    text = str(info.value)
    assert "timeout of 0.3 s" in text and "2 of the 2 futures are not done" in text, text
    nowhere = client.submit(inc, 1, workers=["tcp://10.0.0.1:1"], pure=False)
    with pytest.raises(TimeoutError) as info:
        nowhere.result(timeout=0.2)
    text = str(info.value)
    assert "no worker" in text and "tcp://10.0.0.1:1" in text, text
    event.set()
    assert waiting.result(timeout=60) == 2
    nowhere.cancel()


def test_first_completed_and_as_completed_timeouts_say_what_a_task_is_doing(
    client, cluster, new_event
):
    """A user trial: ``wait(..., return_when=FIRST_COMPLETED)`` and ``as_completed``
    said "No future finished within 1.0 s." (no state, another format); now as
    ``result`` and ``wait`` say it."""
    event = new_event()
    running = client.submit(blocked_until, event, 2)
    wait_for(lambda: on_loop(cluster, _running_on, cluster, running.key), 30, "it to run")
    worker = on_loop(cluster, _running_on, cluster, running.key)
    with pytest.raises(TimeoutError) as info:
        wait([running], timeout=1, return_when="FIRST_COMPLETED")
    text = str(info.value)
    assert "timeout of 1 s" in text and worker in text and "wait again" in text, text
    with pytest.raises(TimeoutError) as info:
        next(as_completed([running]).iter(timeout=0.25))
    text = str(info.value)
    assert "timeout of 0.25 s" in text and repr(running.key) in text and worker in text, text
    assert "iterate again" in text, text
    event.set()
    assert running.result(timeout=60) == 2


def test_gather_with_a_timeout_names_it_and_what_the_task_not_done_is_doing(
    client, cluster, new_event
):
    """``client.gather(fs, timeout=t)`` (a user trial asked for it, as Future.result
    and wait have it): the same message, for the first future not done."""
    event = new_event()
    done = client.submit(inc, 1)
    running = client.submit(blocked_until, event, 1)
    wait_for(lambda: on_loop(cluster, _running_on, cluster, running.key), 30, "it to run")
    worker = on_loop(cluster, _running_on, cluster, running.key)
    with pytest.raises(TimeoutError) as info:
        client.gather([done, running], timeout=0.3)
    text = str(info.value)
    assert "timeout of 0.3 s" in text and running.key in text, text
    assert "running" in text and worker in text, text
    assert text.startswith("1 of the 2 futures is not done"), text
    with pytest.raises(ValueError, match="timeout=-1"):
        client.gather([done], timeout=-1)
    event.set()
    assert client.gather([done, running], timeout=60) == [2, 1]


# -- cancellation -----------------------------------------------------------------------


def test_cancel_a_running_task_and_its_dependents(client, cluster, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 1)
    g = client.submit(inc, f)
    h = client.submit(inc, g)
    f.cancel()
    for future in (f, g, h):
        with pytest.raises(CancelledError):
            future.result(timeout=10)
        assert future.cancelled()
        assert future.done()
    wait_for(lambda: scheduler_keys(cluster) == set(), what="cancelled tasks to be forgotten")
    event.set()
    assert client.submit(inc, 41).result() == 42
    assert client.gather(client.map(inc, range(10))) == list(range(1, 11))


def test_cancel_a_task_waiting_on_another(client, cluster, new_event):
    event = new_event()
    blocker = client.submit(blocked_until, event, 1)
    waiting = client.submit(inc, blocker)
    downstream = client.submit(inc, waiting)
    client.cancel([waiting])
    with pytest.raises(CancelledError):
        waiting.result(timeout=10)
    with pytest.raises(CancelledError):
        downstream.result(timeout=10)
    assert not blocker.done()
    event.set()
    assert blocker.result(timeout=10) == 1
    assert scheduler_keys(cluster) == {blocker.key}


def test_cancel_queued_tasks(client, cluster, new_event):
    event = new_event()
    # more tasks than the workers will take at once: most wait in the scheduler's queue
    fs = client.map(blocked_until, [event] * 40, range(40))
    client.cancel(fs)
    for f in fs:
        with pytest.raises(CancelledError):
            f.result(timeout=10)
    event.set()
    assert client.gather(client.map(inc, range(40))) == list(range(1, 41))


def test_resubmitting_a_cancelled_call_computes_it_again(client, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 5, key="again")
    f.cancel()
    with pytest.raises(CancelledError):
        f.result(timeout=10)
    event.set()
    g = client.submit(blocked_until, event, 5, key="again")
    assert g.result(timeout=10) == 5


def test_resubmitting_right_after_cancel(client, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 6, key="at-once")
    f.cancel()
    # before the scheduler has even answered the cancel
    g = client.submit(blocked_until, event, 6, key="at-once")
    with pytest.raises(CancelledError):
        f.result(timeout=60)
    assert not g.done()
    event.set()
    assert g.result(timeout=60) == 6
    assert f.cancelled()


def test_cancel_only_affects_the_cancelling_client(client, cluster, new_event):
    event = new_event()
    with Client(cluster, set_as_default=False) as other:
        mine = client.submit(blocked_until, event, 9, key="shared-key")
        theirs = other.submit(blocked_until, event, 9, key="shared-key")
        mine.cancel()
        with pytest.raises(CancelledError):
            mine.result(timeout=10)
        assert not theirs.done()
        event.set()
        assert theirs.result(timeout=10) == 9
        del theirs


def test_cancel_a_finished_future_releases_it(client, cluster):
    f = client.submit(inc, 1)
    assert f.result() == 2
    client.cancel(f)
    assert f.cancelled()
    with pytest.raises(CancelledError):
        f.result()
    wait_for(lambda: scheduler_keys(cluster) == set(), what="the cancelled result to be freed")


def test_an_asynchronous_result_timeout_says_what_the_task_is_doing(tmp_path):
    """``await future.result(timeout=t)`` said only that the task goes on: now, as the
    blocking one does, the timeout given and the task's state on the scheduler."""
    event = FileEvent(tmp_path / "go")

    async def main() -> tuple[str, str, list]:
        async with Client(asynchronous=True, n_workers=1, threads_per_worker=1) as client:
            running = client.submit(blocked_until, event, 1)
            with pytest.raises(TimeoutError) as info:
                await running.result(timeout=0.2)
            with pytest.raises(TimeoutError) as gathered:
                await client.gather([running], timeout=0.2)
            event.set()
            return str(info.value), str(gathered.value), await client.gather([running])

    text, gathered, values = asyncio.run(main())
    assert "timeout of 0.2 s" in text and "worker" in text, text
    assert "timeout of 0.2 s" in gathered and "worker" in gathered, gathered
    assert gathered.startswith("the future is not done"), gathered
    assert values == [1]
