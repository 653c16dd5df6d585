"""Issue 32.3 and 32.9: keys that could not travel, and keys given twice.

Before: a key with a lone surrogate (``"x-\\ud800"``) was accepted; with worker
processes the message carrying it was dropped and the future never ended; embedded,
``fine_metrics()`` (and the other views) raised UnicodeEncodeError from then on, for
good. ``client.map(inc, [1, 2, 3], key=["a", "a", "b"])`` returned ``[2, 2, 4]``: the
second task was silently the first.
"""

from __future__ import annotations

import pytest

from kernel_cluster import span


def inc(x: int) -> int:
    return x + 1


BAD = "x-\ud800"


def still_works(client) -> None:
    assert client.submit(inc, 41, pure=False).result(timeout=10) == 42
    client.fine_metrics()
    client.spans().to_pandas()
    client.task_stream()


@pytest.mark.parametrize(
    "submit",
    [
        lambda c: c.submit(inc, 1, key=BAD),
        lambda c: c.submit(inc, 1, key=(BAD, 0)),
        lambda c: c.map(inc, [1, 2], key=["ok", BAD]),
        lambda c: c.map(inc, [1, 2], key=BAD),
        lambda c: c.get({BAD: (inc, 1)}, BAD),
    ],
    ids=["submit", "submit-tuple", "map-list", "map-prefix", "get"],
)
def test_a_key_with_a_lone_surrogate_is_refused_at_submission(client, submit):
    with pytest.raises(ValueError, match=r"lone surrogate .*not valid Unicode text"):
        submit(client)
    still_works(client)


def test_a_span_tag_with_a_lone_surrogate_is_refused(client):
    with pytest.raises(ValueError, match=r"span tag .*lone surrogate"), span("a\udc80"):
        pass
    still_works(client)


def test_keys_that_encode_travel_and_show(client):
    keys = ["ключ-1", "鍵-2", "emoji-\U0001f600", b"raw-\xff".decode("utf-8", "replace")]
    fs = client.map(inc, range(4), key=keys)
    assert client.gather(fs) == [1, 2, 3, 4]
    assert {r["key"] for r in client.task_stream()} >= set(keys)
    del fs
    still_works(client)


def test_duplicate_keys_in_one_map_are_refused(client):
    with pytest.raises(ValueError, match=r"map\(\) got the key 'a' twice \(items 0 and 1\)"):
        client.map(inc, [1, 2, 3], key=["a", "a", "b"])
    with pytest.raises(TypeError, match=r"map\(key=5\): give a str .* or a list of keys"):
        client.map(inc, [1], key=5)
    # the same pure task twice is one task, as ever
    fs = client.map(inc, [1, 1])
    assert fs[0].key == fs[1].key and client.gather(fs) == [2, 2]
    del fs
    still_works(client)


def bad_metric(value) -> float:
    return 1 / (value - value)  # ZeroDivisionError for any number


def test_a_cache_profiler_metric_that_raises_is_named_once(client):
    """Before: NaN in the results, and not a word (32.9)."""
    import warnings
    from operator import add

    from kernel_cluster.diagnostics import CacheProfiler

    dsk = {"a": (add, 1, 2), "b": (add, "a", 3), "c": (add, "b", 4)}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with CacheProfiler(metric=bad_metric) as cprof:
            assert client.get(dsk, "c") == 10
    mine = [w for w in seen if "CacheProfiler's metric" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in seen]
    assert "'bad_metric' raised ZeroDivisionError" in str(mine[0].message)
    assert issubclass(mine[0].category, RuntimeWarning)
    assert len(cprof.results) == 3 and all(r.metric != r.metric for r in cprof.results)
    still_works(client)
