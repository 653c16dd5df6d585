"""RecentMinimum: the least value of the last ``window`` seconds, by events and a
scripted clock (Dask's ``unmanaged_old``)."""

from __future__ import annotations

import random

import pytest

from kernel_cluster.core.recent_minimum import RecentMinimum
from kernel_cluster.core.spans import SpanTree


def test_the_least_value_within_the_window():
    w = RecentMinimum(window=30.0)
    assert w.minimum(0.0) is None
    w.add(0.0, 500)
    w.add(10.0, 300)
    w.add(20.0, 800)  # a spike: not the old part
    assert w.minimum(20.0) == 300
    assert w.minimum(40.5) == 800  # the 300 of t=10 is older than 30 s now
    assert w.minimum(51.0) is None


def test_matches_a_brute_force_minimum():
    rng = random.Random(1)
    w = RecentMinimum(window=5.0)
    seen: list[tuple[float, int]] = []
    t = 0.0
    for _ in range(2000):
        t += rng.random()
        value = rng.randrange(1000)
        w.add(t, value)
        seen.append((t, value))
        expected = min(v for s, v in seen if s >= t - 5.0)
        assert w.minimum(t) == expected
    assert len(w) < 200  # values a smaller, later one hides are dropped


def test_a_window_must_be_positive():
    with pytest.raises(ValueError, match="window"):
        RecentMinimum(0)


def test_default_span_ids_carry_the_trees_token():
    a = SpanTree(now=lambda: 0.0, token="aaa")
    b = SpanTree(now=lambda: 0.0, token="bbb")
    assert a.observe(None, 0.0).id == "default-aaa-1"
    assert b.observe(None, 0.0).id == "default-bbb-1"
    assert SpanTree(now=lambda: 0.0).observe(None, 0.0).id == "default-1"
