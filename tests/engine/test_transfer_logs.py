"""Transfer logs: each transfer between workers logged once by each end, in both modes."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_cluster import Client, KernelCluster


@pytest.fixture(params=[False, True], ids=["embedded", "processes"])
def two_workers(request: pytest.FixtureRequest):
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=request.param) as cluster,
        Client(cluster) as client,
    ):
        yield client


def logs(client: Client, direction: str) -> dict[str, list[dict]]:
    return client.run(lambda dask_worker: list(getattr(dask_worker, f"transfer_{direction}_log")))


def test_a_peer_transfer_is_logged_once_at_each_end(two_workers):
    client = two_workers
    a, b = sorted(client.scheduler_info()["workers"])
    x = client.submit(np.arange, 100_000, workers=[a], pure=False)
    y = client.submit(np.sum, x, workers=[b])
    assert y.result() == np.arange(100_000).sum()
    sent = [e for e in logs(client, "outgoing")[a] if x.key in e["keys"] and e["peer"] == b]
    got = [e for e in logs(client, "incoming")[b] if x.key in e["keys"]]
    assert len(sent) == 1 and len(got) == 1, (sent, got)
    assert sent[0]["total"] == got[0]["total"] >= 800_000
    assert sent[0]["start"] <= sent[0]["stop"]


def test_transfer_logs_are_bounded(two_workers):
    lengths = two_workers.run(
        lambda dask_worker: (
            dask_worker.transfer_incoming_log.maxlen,
            dask_worker.transfer_outgoing_log.maxlen,
        )
    )
    assert all(0 < n <= 100_000 for pair in lengths.values() for n in pair), lengths


def test_a_large_gather_keeps_a_bounded_number_of_keys_in_the_log(two_workers):
    """A million gathered results must not mean a million keys kept in transfer logs."""
    client = two_workers
    a, _ = sorted(client.scheduler_info()["workers"])
    futures = client.map(int, range(500), workers=[a], pure=False)
    assert client.gather(futures) == list(range(500))
    sent = [e for e in logs(client, "outgoing")[a] if e["peer"] == "scheduler"]
    assert sum(e["n_keys"] for e in sent) == 500
    assert all(len(e["keys"]) <= 100 for e in sent), [len(e["keys"]) for e in sent]
