"""Callback: the five hooks, their arguments and order, on get_sync and on the engine
(embedded and worker processes); errors, KeyboardInterrupt, nesting, registration and
two clients on one cluster."""

from __future__ import annotations

import logging
import os
import signal
import threading
from operator import add, mul

import pytest

from kernel_cluster import Callback, Client, get_client, get_sync
from kernel_cluster.local_diagnostics.callbacks import RemoteValue, active_callbacks
from tests.engine.helpers import on_loop

DSK = {"a": (add, 1, 2), "b": (add, 3, "a"), "c": (mul, "a", "b")}


class Recorder(Callback):
    """Every hook call, with what it was given (the state's sets copied)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.finish_state: dict | None = None

    def _start(self, dsk):
        self.calls.append(("start", dsk))

    def _start_state(self, dsk, state):
        self.calls.append(("start_state", dsk, set(state["waiting"])))

    def _pretask(self, key, dsk, state):
        self.calls.append(("pretask", key, key in state["running"]))

    def _posttask(self, key, result, dsk, state, id):
        self.calls.append(("posttask", key, result, id, key in state["finished"]))

    def _finish(self, dsk, state, errored):
        self.calls.append(("finish", errored))
        self.finish_state = state

    def names(self, kind: str) -> list:
        return [c[1] for c in self.calls if c[0] == kind]


def plugin_names(cluster) -> set[str]:
    return set(on_loop(cluster, lambda: list(cluster.scheduler.plugins.plugins)))


def test_get_sync_calls_each_hook_in_order_with_its_arguments():
    rec = Recorder()
    with rec:
        assert get_sync(DSK, "c") == 18
    sid = rec.calls[3][3]  # this thread's id, as posttask gets it
    assert rec.finish_state["workers"] == {sid: ("sync", threading.get_ident())}
    assert rec.calls == [
        ("start", DSK),
        ("start_state", DSK, {"a", "b", "c"}),
        ("pretask", "a", True),
        ("posttask", "a", 3, sid, True),
        ("pretask", "b", True),
        ("posttask", "b", 6, sid, True),
        ("pretask", "c", True),
        ("posttask", "c", 18, sid, True),
        ("finish", False),
    ]
    again = Recorder()
    with again:
        get_sync(DSK, "a")
    assert again.calls[3] == ("posttask", "a", 3, sid, True)  # a thread keeps its id
    state = rec.finish_state
    assert state["cache"] == {"c": 18}  # the inputs were let go once read
    assert state["released"] == {"a", "b"}
    assert state["dependencies"]["c"] == {"a", "b"}
    assert state["dependents"]["a"] == {"b", "c"}
    assert state["client"] is None


def test_functions_given_as_keywords_and_the_hook_tuple():
    seen: list = []

    def printkeys(key, dask, state):
        seen.append(key)

    cb = Callback(pretask=printkeys)
    assert cb._callback == (None, None, printkeys, None, None)
    with cb:
        get_sync(DSK, "c")
    assert seen == ["a", "b", "c"]
    with pytest.raises(TypeError, match="takes a function"):
        Callback(pretask=3)


def test_engine_hooks_in_order(client, processes):
    rec = Recorder()
    with rec:
        assert client.get(DSK, ["c", "a"]) == [18, 3]
    kinds = [c[0] for c in rec.calls]
    assert kinds[:2] == ["start", "start_state"] and kinds[-1] == "finish"
    assert rec.calls[0][1] is DSK
    assert rec.calls[-1] == ("finish", False)
    assert sorted(rec.names("pretask")) == ["a", "b", "c"]
    assert sorted(rec.names("posttask")) == ["a", "b", "c"]
    position = {(c[0], c[1]): i for i, c in enumerate(rec.calls) if c[0] in ("pretask", "posttask")}
    for key, deps in {"a": [], "b": ["a"], "c": ["a", "b"]}.items():
        assert position["pretask", key] < position["posttask", key]
        for d in deps:  # a task ends after its inputs
            assert position["posttask", d] < position["posttask", key]
    posts = {c[1]: c for c in rec.calls if c[0] == "posttask"}
    for key, value in {"a": 3, "b": 6, "c": 18}.items():
        _, _, result, wid, finished = posts[key]
        assert finished and isinstance(wid, int)
        if processes:  # the value stays in its worker process
            assert type(result) is RemoteValue and result.key == key and result.nbytes > 0
        else:
            assert result == value
    state = rec.finish_state
    assert state["finished"] == {"a", "b", "c"} and not state["running"]
    assert state["client"] is client
    assert set(state["task_times"]) == {"a", "b", "c"}
    for start, stop in state["task_times"].values():
        assert start <= stop
    assert set(state["workers"]) == {c[3] for c in posts.values()}
    # the events' plugin is gone once the computation ends
    assert plugin_names(client.cluster) == {"task-stream"}


def fail(x):
    raise ZeroDivisionError(f"no {x}")


def test_finish_runs_after_a_task_error(client, processes):
    rec = Recorder()
    dsk = {"a": (add, 1, 2), "b": (fail, "a"), "c": (add, "b", 1)}
    with rec, pytest.raises(ZeroDivisionError, match="no 3"):
        client.get(dsk, "c")
    assert rec.calls[-1] == ("finish", True)
    # the failed task, and what depended on it
    assert rec.finish_state["erred"] == {"b", "c"}
    assert rec.finish_state["finished"] == {"a"}
    assert plugin_names(client.cluster) == {"task-stream"}
    with rec:  # the client goes on
        assert client.get(DSK, "c") == 18
    with rec, pytest.raises(ZeroDivisionError):
        get_sync(dsk, "c")
    assert rec.calls[-1] == ("finish", True)


class Raises(Callback):
    def __init__(self, hook: str, exc: type[BaseException]) -> None:
        super().__init__(**{hook: self._raise})
        self.exc = exc

    def _raise(self, *args):
        raise self.exc("from a hook")


@pytest.mark.parametrize("hook", ["start", "start_state", "pretask", "posttask", "finish"])
def test_a_hook_that_raises_is_reported_once_and_the_result_stands(client, caplog, hook):
    rec = Recorder()
    bad = Raises(hook, ValueError)
    with caplog.at_level(logging.WARNING, "kernel_cluster.local_diagnostics.callbacks"):
        with bad, rec:
            assert client.get(DSK, "c") == 18
        with bad, rec:
            assert get_sync(DSK, "c") == 18
    reports = [r for r in caplog.records if f"The {hook} hook" in r.getMessage()]
    assert len(reports) == 2  # once per computation, though pretask runs three times each
    assert rec.calls.count(("finish", False)) == 2  # the others still called


def test_keyboard_interrupt_in_a_hook_still_finishes_everything(client):
    rec = Recorder()
    with rec, Raises("pretask", KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
        client.get(DSK, "c")
    assert rec.calls[-1] == ("finish", True)
    assert plugin_names(client.cluster) == {"task-stream"}
    assert client.get(DSK, "c") == 18


def interrupt_then_wait(pid, thread, event):
    """Ctrl-C for the client's main thread, then block until the test lets go."""
    if thread is not None:
        signal.pthread_kill(thread, signal.SIGINT)
    else:
        os.kill(pid, signal.SIGINT)  # Linux gives it to the main thread
    assert event.wait(30), "the test never let this task go"
    return 1


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals")
def test_a_real_ctrl_c_while_waiting_finishes_the_callbacks(
    client, processes, new_event, python_sigint
):
    rec = Recorder()
    event = new_event()
    thread = None if processes else threading.main_thread().ident
    dsk = {"x": (interrupt_then_wait, os.getpid(), thread, event), "y": (add, "x", 1)}
    try:
        with rec, pytest.raises(KeyboardInterrupt):
            client.get(dsk, "y")
    finally:
        event.set()
    assert rec.calls[-1] == ("finish", True)
    assert plugin_names(client.cluster) == {"task-stream"}


def nested(n):
    """A task that computes a graph itself, on the same cluster (embedded) or here."""
    try:
        c = get_client()
    except ValueError:
        return get_sync({"inner": (add, n, 1)}, "inner")
    return c.get({"inner": (add, n, 1)}, "inner")


def nested_sync(n):
    return get_sync({"inner": (add, n, 1)}, "inner")


@pytest.mark.embedded_only("a task uses the test's client")
def test_a_compute_nested_in_a_task_fires_no_outer_callback(client):
    rec, registered = Recorder(), Recorder()
    registered.register()
    try:
        with rec:
            assert client.get({"outer": (nested, 1)}, "outer") == 2
            assert get_sync({"outer": (nested_sync, 1)}, "outer") == 2
    finally:
        registered.unregister()
    for r in (rec, registered):
        assert r.names("pretask") == ["outer", "outer"]
        assert r.calls.count(("finish", False)) == 2


def test_register_and_unregister(client):
    rec = Recorder()
    rec.register()
    try:
        assert rec.registered and active_callbacks() == (rec,)
        with rec:  # active twice over: called once
            client.get(DSK, "c")
        assert rec.names("pretask").count("a") == 1
        client.get(DSK, "c")
        assert rec.calls.count(("finish", False)) == 2
    finally:
        rec.unregister()
    assert not rec.registered and active_callbacks() == ()
    before = len(rec.calls)
    client.get(DSK, "c")
    get_sync(DSK, "c")
    assert len(rec.calls) == before


def meet(mine, theirs, value):
    """Both graphs' tasks run at the same time: each waits for the other's."""
    mine.set()
    assert theirs.wait(30), "the other graph never started"
    return value


def test_two_clients_see_only_their_own_graphs(cluster, new_event):
    ea, eb = new_event(), new_event()
    results: dict = {}
    recs = {"A": Recorder(), "B": Recorder()}
    with Client(cluster, set_as_default=False) as ca, Client(cluster, set_as_default=False) as cb:

        def compute(name, client, mine, theirs):
            dsk = {f"{name}-x": (meet, mine, theirs, 1), f"{name}-y": (add, f"{name}-x", 1)}
            with recs[name]:
                results[name] = client.get(dsk, f"{name}-y")

        t = threading.Thread(target=compute, args=("B", cb, eb, ea))
        t.start()
        try:
            compute("A", ca, ea, eb)
        finally:
            ea.set()
            eb.set()
            t.join(30)
        # a third client's futures, running meanwhile, are not seen either
        rec = Recorder()
        with Client(cluster, set_as_default=False) as cc:
            other = cc.submit(add, 5, 6, key="C-other")
            with rec:
                ca.get(DSK, "c")
            assert other.result() == 11
            del other
    assert results == {"A": 2, "B": 2}
    for name, r in recs.items():
        assert sorted(r.names("pretask")) == [f"{name}-x", f"{name}-y"]
        assert sorted(r.names("posttask")) == [f"{name}-x", f"{name}-y"]
    assert sorted(rec.names("posttask")) == ["a", "b", "c"]


def test_a_with_block_belongs_to_its_thread(client):
    """``with`` applies to computations started in its thread (as ``span`` does);
    ``register()`` to all of them."""
    rec = Recorder()
    done = threading.Event()

    def elsewhere():
        client.get(DSK, "c")
        done.set()

    with rec:
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join(30)
    assert done.is_set()
    assert rec.calls == []


def test_get_sync_in_a_task_fires_no_callback_of_the_client(client):
    """In a task thread (embedded) or a worker process, the inner computation is the
    task's own business."""
    rec, registered = Recorder(), Recorder()
    registered.register()
    try:
        with rec:
            assert client.get({"outer": (nested_sync, 1)}, "outer") == 2
    finally:
        registered.unregister()
    for r in (rec, registered):
        assert r.names("pretask") == ["outer"] and r.names("posttask") == ["outer"]


def test_a_subclass_that_skips_our_init_works():
    class Bare(Callback):
        def __init__(self):
            self.keys = []

        def _pretask(self, key, dsk, state):
            self.keys.append(key)

    cb = Bare()
    with cb:
        get_sync(DSK, "c")
    assert cb.keys == ["a", "b", "c"]
