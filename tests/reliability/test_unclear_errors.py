"""Issue 32, "unclear errors": each mistake fails at the call that made it, naming the
argument and what is accepted, and the engine keeps working.

Before: ``result(timeout=float("inf"))`` raised OverflowError, ``as_completed([1, 2])``
AttributeError, ``fine_metrics(span=12345)`` and ``MemorySampler.sample(interval="1s")``
a raw TypeError, ``submit(workers=5)`` "'int' object is not iterable",
``run(workers="tcp://...")`` took the string for a list of characters ("address 'i'
has no scheme"), ``Client(code_frames="x")`` failed only at the first submit, views of
a closed cluster said "Event loop is closed", and a lab message with
``start=10**400`` raised OverflowError past the checks.
"""

from __future__ import annotations

import math

import pytest

from kernel_cluster import MemorySampler, as_completed, wait
from kernel_cluster.client.client import Client
from kernel_cluster.jupyter import lab


def inc(x: int) -> int:
    return x + 1


def still_works(client: Client) -> None:
    assert client.submit(inc, 41, pure=False).result(timeout=10) == 42


def test_an_infinite_timeout_waits_as_none_does(client):
    f = client.submit(inc, 1)
    assert f.result(timeout=math.inf) == 2
    assert not wait([f], timeout=math.inf).not_done
    assert list(as_completed([f]).iter(timeout=math.inf)) == [f]
    with pytest.raises(ValueError, match=r"timeout=nan: give a number of seconds >= 0"):
        f.result(timeout=math.nan)


def test_waiting_on_what_is_not_a_future_is_named(client):
    with pytest.raises(TypeError, match=r"as_completed\(\) takes futures .*got int 1"):
        as_completed([1, 2])
    with pytest.raises(TypeError, match=r"wait\(\) takes a future or futures .*got str 'x'"):
        wait(["x"])
    still_works(client)


def test_fine_metrics_span_must_be_an_id_or_tags(client):
    with pytest.raises(TypeError, match=r"fine_metrics\(span=12345\): give a span's id"):
        client.fine_metrics(span=12345)
    still_works(client)


def test_memory_sampler_interval_is_seconds(client):
    with pytest.raises(ValueError, match=r"interval must be a positive number of seconds .*'1s'"):
        MemorySampler().sample(client=client, interval="1s")
    still_works(client)


def test_workers_must_be_addresses(client):
    with pytest.raises(TypeError, match=r"workers=5: give a worker's address"):
        client.submit(inc, 1, workers=5)
    with pytest.raises(TypeError, match=r"workers=\[1\]: give a worker's address"):
        client.map(inc, [1], workers=[1])
    address = sorted(client.scheduler_info()["workers"])[0]
    assert client.run(lambda: 1, workers=address) == {address: 1}  # one address, as submit
    with pytest.raises(ValueError, match=r"'tcp://nowhere:1' is not a worker of KernelCluster"):
        client.run(lambda: 1, workers=["tcp://nowhere:1"])
    still_works(client)


def test_code_frames_is_checked_at_client(cluster):
    with pytest.raises(ValueError, match=r"code_frames must be a whole number >= 0 .*got 'x'"):
        Client(cluster, code_frames="x")
    with Client(cluster) as c:
        still_works(c)


def test_views_of_a_closed_cluster_say_it_closed():
    from kernel_cluster.jupyter.widgets import FineMetrics

    client = Client()
    source = client.diagnostics
    client.close()
    for view in (source.fine_metrics, source.spans, lambda: FineMetrics(client)):
        with pytest.raises(RuntimeError, match=r"has stopped: its cluster was closed"):
            view()
    with Client() as fresh:
        still_works(fresh)


def test_a_lab_message_with_a_huge_integer_is_refused_by_the_check():
    with pytest.raises(ValueError, match=r"expected a finite number or null, got an integer"):
        lab.check_message({"type": "profile", "prefix": "", "start": 10**400, "stop": None})
