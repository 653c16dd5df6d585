"""The Client API end to end: submit, map, gather, get, futures, wait and as_completed."""

from __future__ import annotations

import functools
import threading
from operator import add, mul

import pytest

from kernel_cluster.client.client import Client, get_client
from kernel_cluster.client.futures import Future, as_completed, wait
from kernel_cluster.core.keys import key_split

from .helpers import CallLog, blocked_until, on_loop, scheduler_keys


def inc(x):
    return x + 1


def double(x):
    return 2 * x


def add_kw(x, y=0, *, z=0):
    return x + y + z


def describe(*args, **kwargs):
    """Echo the arguments as the task received them."""
    return args, kwargs


def prefixes(cluster) -> set[str]:
    return on_loop(cluster, lambda: set(cluster.scheduler.state.task_prefixes))


# -- submit -------------------------------------------------------------------------


def test_submit_returns_a_future_with_the_result(client):
    f = client.submit(inc, 1)
    assert isinstance(f, Future)
    assert f.result() == 2
    assert f.done()
    assert f.status == "finished"
    assert f.exception() is None
    assert f.traceback() is None


def test_submit_passes_positional_and_keyword_arguments(client):
    assert client.submit(add_kw, 1, 2, z=10).result() == 13
    assert client.submit(add_kw, 1, y=5).result() == 6
    args, kwargs = client.submit(describe, 1, [2, 3], a={"b": 4}).result()
    assert args == (1, [2, 3])
    assert kwargs == {"a": {"b": 4}}


class Scale:
    def __call__(self, x):
        return 10 * x


def test_submit_names_the_key_after_the_function(client, cluster):
    f = client.submit(inc, 1)
    g = client.submit(lambda x: x, 1)
    h = client.submit(functools.partial(add_kw, y=1), 1)
    i = client.submit(Scale(), 1)
    assert f.key.startswith("inc-")
    assert key_split(f.key) == "inc"
    assert g.key.startswith("lambda-")
    assert key_split(h.key) == "add_kw"
    assert key_split(i.key) == "Scale"
    assert client.gather([f, g, h, i]) == [2, 1, 2, 10]
    assert {"inc", "lambda", "add_kw", "Scale"} <= prefixes(cluster)


def test_pure_calls_share_a_key_and_impure_calls_do_not(client):
    a = client.submit(inc, 1)
    b = client.submit(inc, 1)
    c = client.submit(inc, 2)
    d = client.submit(inc, 1, pure=False)
    e = client.submit(inc, 1, pure=False)
    assert a.key == b.key
    assert len({a.key, c.key, d.key, e.key}) == 4
    assert client.submit(add_kw, 1, y=2).key != client.submit(add_kw, 1, y=3).key
    assert [f.result() for f in (a, b, c, d, e)] == [2, 2, 3, 2, 2]


def test_submit_with_explicit_keys(client, cluster):
    token = "0123456789abcdef0123456789abcdef"
    f = client.submit(inc, 1, key=f"load-{token}")
    g = client.submit(inc, f, key=(f"x-{token}", 0))
    assert f.key == f"load-{token}"
    assert g.key == (f"x-{token}", 0)
    assert g.result() == 3
    assert scheduler_keys(cluster) == {f.key, g.key}
    assert {"load", "x"} <= prefixes(cluster)


def test_submit_rejects_what_cannot_run(client, cluster):
    with pytest.raises(TypeError, match="callable"):
        client.submit(1, 2)
    with pytest.raises(TypeError, match="key"):
        client.submit(inc, 1, key=["a", "list"])
    assert scheduler_keys(cluster) == set()


# -- map ----------------------------------------------------------------------------


def test_map_over_one_and_several_iterables(client):
    fs = client.map(inc, range(20))
    assert [f.result() for f in fs] == list(range(1, 21))
    assert client.gather(client.map(add, [1, 2, 3], [10, 20, 30])) == [11, 22, 33]
    # the shortest iterable decides, as with the builtin map
    assert client.gather(client.map(add, [1, 2, 3], [10, 20])) == [11, 22]


def test_map_passes_keyword_arguments_to_every_call(client):
    assert client.gather(client.map(add_kw, [1, 2], y=10, z=100)) == [111, 112]


def test_map_keys_are_pure_unless_told_otherwise(client):
    a = client.map(inc, [1, 2, 3])
    b = client.map(inc, [1, 2, 3])
    c = client.map(inc, [1, 2, 3], pure=False)
    assert [f.key for f in a] == [f.key for f in b]
    assert {f.key for f in a}.isdisjoint(f.key for f in c)
    assert len({f.key for f in c}) == 3
    assert all(key_split(f.key) == "inc" for f in a + c)
    # the same input twice in one call is one task
    d = client.map(inc, [5, 5])
    assert d[0].key == d[1].key
    assert client.gather(a + c + d) == [2, 3, 4, 2, 3, 4, 6, 6]


def test_map_key_as_a_prefix(client, cluster):
    fs = client.map(inc, range(5), key="load")
    gs = client.map(inc, range(5), key="read-csv", pure=False)
    assert all(key_split(f.key) == "load" for f in fs)
    assert all(key_split(g.key) == "read-csv" for g in gs)
    assert len({f.key for f in fs + gs}) == 10
    assert client.gather(fs) == [1, 2, 3, 4, 5]
    assert client.gather(gs) == [1, 2, 3, 4, 5]
    assert {"load", "read-csv"} <= prefixes(cluster)


def test_map_key_as_a_list(client, cluster):
    keys = ["first", ("second", 1), "third"]
    fs = client.map(inc, [1, 2, 3], key=keys)
    assert [f.key for f in fs] == keys
    assert client.gather(fs) == [2, 3, 4]
    assert scheduler_keys(cluster) == {"first", ("second", 1), "third"}
    with pytest.raises(ValueError, match="2 keys for 3 tasks"):
        client.map(inc, [1, 2, 3], key=["a", "b"])


def test_map_accepts_futures_as_items(client):
    xs = client.map(inc, range(10))
    ys = client.map(double, xs)
    assert client.gather(ys) == [2 * (i + 1) for i in range(10)]


# -- futures as arguments -----------------------------------------------------------


def test_futures_as_arguments_are_dependencies(client, cluster):
    x = client.submit(inc, 1)
    y = client.submit(inc, 10)
    z = client.submit(add, x, y)
    assert z.result() == 13
    deps = on_loop(
        cluster, lambda: {d.key for d in cluster.scheduler.state.tasks[z.key].dependencies}
    )
    assert deps == {x.key, y.key}


def test_futures_nested_in_containers_are_replaced_by_their_values(client):
    x = client.submit(inc, 1)
    y = client.submit(inc, 2)
    z = client.submit(inc, 3)
    args, kwargs = client.submit(describe, [x, (y, {"z": z})], opt={"k": [x]}, t=(z, 0)).result()
    assert args == ([2, (3, {"z": 4})],)
    assert kwargs == {"opt": {"k": [2]}, "t": (4, 0)}


def test_a_future_as_a_keyword_argument(client):
    x = client.submit(inc, 1)
    assert client.submit(add_kw, 1, y=x, z=x).result() == 5


def test_futures_from_another_client_of_the_same_cluster(client, cluster):
    with Client(cluster, set_as_default=False) as other:
        x = other.submit(inc, 1)
        assert client.submit(inc, x).result() == 3
        del x


# -- gather ---------------------------------------------------------------------------


def test_gather_keeps_the_shape_of_nested_containers(client):
    a, b, c = client.map(inc, [1, 2, 3])
    assert client.gather(a) == 2
    assert client.gather([a, b, c]) == [2, 3, 4]
    assert client.gather((a, [b, (c,)])) == (2, [3, (4,)])
    assert client.gather({"a": a, "rest": [b, {"c": c}]}) == {"a": 2, "rest": [3, {"c": 4}]}
    assert client.gather([a, "literal", 5]) == [2, "literal", 5]


def test_gather_the_same_future_twice(client):
    a = client.submit(inc, 1)
    assert client.gather([a, a, [a]]) == [2, 2, [2]]


# -- get ------------------------------------------------------------------------------


def test_get_a_dict_graph(client):
    dsk = {"a": (add, 1, 2), "b": (add, 3, "a"), "c": (mul, "a", "b")}
    assert client.get(dsk, "c") == 18
    assert client.get(dsk, ["a", "b", "c"]) == [3, 6, 18]
    assert client.get(dsk, [["a"], ["b", ["c"]], []]) == [[3], [6, [18]], []]
    assert client.get(dsk, ["c", "c"]) == [18, 18]


def test_get_with_tuple_keys(client):
    dsk = {("x", 0): 1, ("x", 1): (inc, ("x", 0)), "total": (add, ("x", 0), ("x", 1))}
    assert client.get(dsk, ("x", 1)) == 2
    assert client.get(dsk, [("x", 0), "total"]) == [1, 3]


def test_get_evaluates_nested_tasks_lists_and_dicts(client):
    dsk = {
        "a": 1,
        "b": (add, (inc, "a"), (mul, 10, (inc, 1))),  # nested tasks run inline
        "c": (sum, ["a", "b", (inc, "b")]),  # references inside a list
        "d": (describe, {"x": "a", "y": ["b", "c"]}),  # and inside a dict
        "e": "c",  # an alias
        "f": (describe, "not-a-key", ("a", "tuple")),  # strings and tuples naming no key
    }
    assert client.get(dsk, "b") == 22
    assert client.get(dsk, "c") == 1 + 22 + 23
    assert client.get(dsk, "d") == (({"x": 1, "y": [22, 46]},), {})
    assert client.get(dsk, "e") == 46
    assert client.get(dsk, "f") == (("not-a-key", ("a", "tuple")), {})


def test_get_only_runs_what_the_keys_need(client, tmp_path):
    ran = CallLog(tmp_path / "ran")

    def record(name):
        ran.append(name)
        return name

    dsk = {"a": (record, "A"), "b": (record, "B"), "c": (add, "a", "a")}
    assert client.get(dsk, "c") == "AA"
    assert ran.read() == ["A"]


def test_get_reuses_results_of_futures_held_by_the_client(client, tmp_path):
    calls = CallLog(tmp_path / "calls")

    def once(x):
        calls.append(x)
        return x

    f = client.submit(once, 7, key="seven")
    assert f.result() == 7
    assert client.get({"seven": (once, 7), "eight": (inc, "seven")}, "eight") == 8
    assert calls.read() == [7]


# -- the future's own API -----------------------------------------------------------


def test_future_result_waits_for_a_running_task(client, new_event):
    event = new_event()
    f = client.submit(blocked_until, event, 42)
    assert not f.done()
    assert f.status == "pending"
    event.set()
    assert f.result(timeout=10) == 42
    assert f.done()


def test_futures_for_one_key_share_their_state(client, new_event):
    event = new_event()
    a = client.submit(blocked_until, event, 1, key="shared")
    b = client.submit(blocked_until, event, 1, key="shared")
    assert a.key == b.key and a is not b
    event.set()
    assert a.result() == 1
    assert b.done() and b.result() == 1


def test_done_callback(client, new_event):
    event = new_event()
    seen = []
    called = threading.Event()
    f = client.submit(blocked_until, event, 3)

    def callback(fut):
        seen.append((fut, fut.status))
        called.set()

    f.add_done_callback(callback)
    event.set()
    assert called.wait(10)
    assert seen == [(f, "finished")]
    # once done, a new callback runs at once, on the caller's thread
    f.add_done_callback(lambda fut: seen.append(threading.current_thread()))
    assert seen[-1] is threading.current_thread()


def test_get_client_is_the_latest_open_client(client, cluster):
    assert get_client() is client
    with Client(cluster) as other:
        assert get_client() is other
    with pytest.raises(ValueError, match="No client"):
        get_client()


# -- wait and as_completed ----------------------------------------------------------


def test_wait_for_all(client):
    fs = client.map(inc, range(50))
    done, not_done = wait(fs)
    assert done == set(fs)
    assert not not_done
    assert all(f.done() for f in fs)


def test_wait_first_completed_and_timeout(client, new_event):
    event = new_event()
    slow = client.submit(blocked_until, event, 1)
    fast = client.submit(inc, 1)
    done, not_done = wait([slow, fast], return_when="FIRST_COMPLETED", timeout=10)
    assert done == {fast}
    assert not_done == {slow}
    with pytest.raises(TimeoutError):
        wait([slow, fast], timeout=0.05)
    event.set()
    assert wait(slow, timeout=10).done == {slow}


def test_as_completed_yields_in_finishing_order(client, new_event):
    first, second = new_event(), new_event()
    a = client.submit(blocked_until, first, "a")
    b = client.submit(blocked_until, second, "b")
    c = client.submit(inc, 1)
    it = iter(as_completed([a, b, c]))
    assert next(it) is c
    second.set()
    assert next(it) is b
    first.set()
    assert next(it) is a
    with pytest.raises(StopIteration):
        next(it)


def test_as_completed_with_results(client):
    fs = client.map(inc, range(20))
    pairs = list(as_completed(fs, with_results=True))
    assert {f for f, _ in pairs} == set(fs)
    assert all(f.result() == value for f, value in pairs)
    assert sorted(value for _, value in pairs) == list(range(1, 21))


def test_as_completed_add_while_iterating(client):
    seq = as_completed([client.submit(inc, 0)])
    assert seq.count() == 1
    results = []
    for future in seq:
        value = future.result()
        results.append(value)
        if value < 5:
            seq.add(client.submit(inc, value))
    assert results == [1, 2, 3, 4, 5]
    assert seq.is_empty()


def test_as_completed_empty(client):
    assert list(as_completed([])) == []
