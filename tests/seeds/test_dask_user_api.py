"""What a Dask user types first, as the seeds write it: ``Client(processes=True,
n_workers=2)``, an asynchronous client (``client = await Client(asynchronous=True)``,
``async with``, ``await client.submit(...)``, ``await client.gather(...)``, ``await
client.compute(...)``), ``client.run_on_scheduler``.
"""

from __future__ import annotations

import asyncio

import dask.array as da
import pytest

from kernel_cluster import Client, KernelCluster, MemorySampler, span
from kernel_cluster.client.client import AsyncClient
from kernel_cluster.engine.cluster import available_cores
from kernel_cluster.jupyter.widgets import FineMetrics
from tests.engine.helpers import FileEvent, wait_for_async
from tests.views.test_publisher import Browser


def inc(x: int) -> int:
    return x + 1


def wait_for_event(event: FileEvent) -> bool:
    """A task that ends once ``event`` is set (False if it is not within 30 s)."""
    return event.wait(30)


def fail(x: int) -> int:
    raise ValueError(f"bad input {x}")


def test_client_takes_the_clusters_keywords():
    """``Client(processes=True, n_workers=2)``: a cluster made from the keywords, the
    client's own, closed with it."""
    client = Client(processes=True, n_workers=2, threads_per_worker=1)
    try:
        cluster = client.cluster
        assert cluster.processes and cluster.n_workers == 2 and cluster.threads_per_worker == 1
        assert client.submit(inc, 1).result() == 2
    finally:
        client.close()
    assert cluster.status == "closed"
    with pytest.raises(TypeError, match="n_wrokers"):
        Client(n_wrokers=2)
    with (
        KernelCluster(n_workers=1) as cluster,
        pytest.raises(TypeError, match="a cluster and cluster keywords"),
    ):
        Client(cluster, n_workers=2)
    with pytest.raises(TypeError, match=r"distributed\.Client\(address\)"):
        Client(address="tcp://127.0.0.1:8786")


def test_the_default_threads_divide_the_cores_among_the_workers():
    cores = available_cores()
    with KernelCluster(n_workers=2) as cluster:
        assert cluster.threads_per_worker == max(1, cores // 2)
    with KernelCluster(n_workers=cores + 1) as cluster:
        assert cluster.threads_per_worker == 1
    with KernelCluster() as cluster:
        assert cluster.threads_per_worker == cores


def test_run_on_scheduler_passes_the_scheduler(client):
    with span("seen from the scheduler") as span_id:
        client.submit(inc, 1).result()

    def names(prefix, dask_scheduler=None):  # as distributed passes it: a keyword
        spans = dask_scheduler.extensions["spans"].spans.values()
        return [s.name for s in spans if s.name[0] == prefix]

    assert client.run_on_scheduler(names, "seen from the scheduler") == [
        ("seen from the scheduler",)
    ]

    async def coroutine(dask_scheduler):
        return dask_scheduler.extensions["spans"].spans[span_id].name

    assert client.run_on_scheduler(coroutine) == ("seen from the scheduler",)
    with pytest.raises(TypeError, match="needs a callable"):
        client.run_on_scheduler("names")


@pytest.mark.parametrize("processes", [False, True], ids=["embedded", "processes"])
def test_an_asynchronous_client_in_a_running_loop(processes, tmp_path):
    """``async with Client(asynchronous=True)``: submit, ``await`` futures, gather,
    compute; while a result is awaited the loop keeps running (here it has to: a
    coroutine on it sets the event the task waits for)."""
    event = FileEvent(tmp_path / "go")

    async def main() -> dict:
        out: dict = {}
        async with Client(
            asynchronous=True, processes=processes, n_workers=2, threads_per_worker=1
        ) as client:
            assert isinstance(client, AsyncClient) and client.asynchronous
            waiting = client.submit(wait_for_event, event)
            turns = 0

            async def other_work() -> None:
                nonlocal turns
                while turns < 20:
                    turns += 1
                    await asyncio.sleep(0)
                event.set()

            worker = asyncio.create_task(other_work())
            out["event"] = await waiting  # the loop ran other_work meanwhile
            await worker
            out["submit"] = await client.submit(inc, 10)
            out["result"] = await client.submit(inc, 20).result()
            out["gather"] = await client.gather(client.map(inc, range(5)))
            x = da.ones(100, chunks=10).sum()
            out["compute"] = await client.compute(x)
            out["compute sync"] = await client.compute(x, sync=True)
            out["info"] = len((await client.scheduler_info())["workers"])
            out["run"] = len(await client.run(lambda: 1))
            out["scheduler"] = await client.run_on_scheduler(
                lambda dask_scheduler: type(dask_scheduler).__name__
            )
            with pytest.raises(ValueError, match="bad input 3"):
                await client.submit(fail, 3)
            with pytest.raises(ValueError, match="bad input 4"):
                await client.gather([client.submit(fail, 4)])
            out["skip"] = await client.gather(
                [client.submit(fail, 5), client.submit(inc, 5)], errors="skip"
            )
        out["status"] = client.status
        return out

    out = asyncio.run(main())
    assert out == {
        "event": True,
        "submit": 11,
        "result": 21,
        "gather": [1, 2, 3, 4, 5],
        "compute": 100.0,
        "compute sync": 100.0,
        "info": 2,
        "run": 2,
        "scheduler": "Scheduler",
        "skip": [6],
        "status": "closed",
    }


def test_await_client_then_close():
    """``client = await Client(asynchronous=True)``: started by the await, which does
    not block the loop; used before it, it says to await it."""

    async def main() -> tuple[int, str]:
        client = Client(asynchronous=True, n_workers=1)
        with pytest.raises(RuntimeError, match="await it first"):
            client.submit(inc, 1)
        assert await client is client
        try:
            return await client.submit(inc, 1), client.status
        finally:
            await client.close()

    assert asyncio.run(main()) == (2, "running")


def test_views_accept_our_asynchronous_client(monkeypatch):
    """``async with ms.sample(..., client=client)`` and a widget on an asynchronous
    client of ours: the widget sends its whole state by itself (as it is made, or from
    the hub's thread), with no ``update()`` and no browser's refresh."""
    browser = Browser()
    # what the widget sends, from the moment it is made (no comm in a test)
    monkeypatch.setattr(FineMetrics, "_send_update", lambda _self, c, b: browser(c, b))

    async def main() -> tuple[list, dict]:
        async with Client(asynchronous=True, n_workers=1) as client:
            ms = MemorySampler()
            async with ms.sample("run 1", client=client, interval=0.05):
                await client.gather(client.map(inc, range(10)))
            widget = FineMetrics(client, interval=0.25)
            try:
                await wait_for_async(lambda: browser.messages, timeout=20, what="an update")
            finally:
                widget.close()
            return ms.samples["run 1"], browser.messages[0][0]

    samples, first = asyncio.run(main())
    assert len(samples) >= 2 and samples[-1][1] > 0 and first["type"] == "update"
    assert all(part["full"] for part in first["parts"]), first["parts"]


def test_an_asynchronous_client_started_twice_at_once_starts_once():
    async def main() -> tuple[bool, bool]:
        client = Client(asynchronous=True, n_workers=1)
        a, b = await asyncio.gather(client, client._started())
        try:
            return a is b is client, client.status == "running"
        finally:
            await client.close()

    assert asyncio.run(main()) == (True, True)


def test_an_unstarted_asynchronous_client_closes_quietly():
    client = Client(asynchronous=True)

    async def main() -> str:
        await client.close()
        return client.status

    assert asyncio.run(main()) == "closed"
