"""The default cluster is shared: ``Client()`` twice, and closing one leaves the other
working. The last client to close stops it."""

from __future__ import annotations

from kernel_cluster import client as client_module
from kernel_cluster.client import Client
from tests.engine.helpers import assert_nothing_left, running_now


def inc(x: int) -> int:
    return x + 1


def test_closing_one_default_client_leaves_the_other_working():
    before = running_now()
    first = Client()
    second = Client()
    try:
        assert first.cluster is second.cluster
        cluster = first.cluster
        first.close()
        assert cluster.status == "running", "closing the first client closed the shared cluster"
        assert second.submit(inc, 1).result(timeout=10) == 2
        third = Client()  # joins the same cluster, still running
        assert third.cluster is cluster
        second.close()
        assert cluster.status == "running"
        assert third.submit(inc, 2).result(timeout=10) == 3
        third.close()
        assert cluster.status == "closed", "the last client out did not stop the default cluster"
    finally:
        for c in (first, second):
            c.close()
        if client_module._default_cluster is not None:
            client_module._default_cluster.close()
    assert_nothing_left(before)


def test_a_new_default_cluster_after_the_last_client_closed():
    with Client() as c:
        old = c.cluster
    assert old.status == "closed"
    with Client() as c:
        assert c.cluster is not old and c.cluster.status == "running"
        assert c.submit(inc, 1).result(timeout=10) == 2
    assert c.cluster.status == "closed"


def test_a_cluster_you_made_is_not_closed_by_its_clients(cluster):
    with Client(cluster) as c:
        assert c.submit(inc, 1).result(timeout=10) == 2
    assert cluster.status == "running"
