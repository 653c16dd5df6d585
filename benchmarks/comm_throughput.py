"""Round-trip throughput of 8 MB numpy arrays over a real TCP comm pair.

A client sends an array to an echo handler and waits for it to come back;
each run times ROUND_TRIPS such exchanges. The figure printed is the median
over RUNS of the payload moved per second, counting both directions
(2 x 8 MB per round trip). Everything runs in one process and one event
loop, so the two ends share a core: a lower bound on what two processes on
two cores would see.

    .venv/bin/python benchmarks/comm_throughput.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

from kernel_cluster.engine.comm import Comm, connect, listen, new_secret

ARRAY_BYTES = 8 * 1024 * 1024
ROUND_TRIPS = 20
RUNS = 7


async def echo(comm: Comm) -> None:
    while True:
        await comm.write(await comm.read())


async def one_run(comm: Comm, array: np.ndarray) -> float:
    start = time.perf_counter()
    for _ in range(ROUND_TRIPS):
        await comm.write(array)
        back = await comm.read()
    elapsed = time.perf_counter() - start
    assert back.nbytes == array.nbytes and back[-1] == array[-1]
    return 2 * ROUND_TRIPS * array.nbytes / elapsed / 1e6


async def main() -> None:
    secret = new_secret()
    listener = await listen("tcp://127.0.0.1:0", echo, secret=secret)
    comm = await connect(listener.address, secret=secret)
    array = np.random.default_rng(0).random(ARRAY_BYTES // 8)
    try:
        await one_run(comm, array)  # warm-up: buffers, allocator, imports
        rates = [await one_run(comm, array) for _ in range(RUNS)]
    finally:
        await comm.close()
        await listener.stop()
    print(
        f"TCP comm round trip, {ARRAY_BYTES / 2**20:.0f} MiB numpy arrays, "
        f"{ROUND_TRIPS} round trips x {RUNS} runs"
    )
    print(f"  median {statistics.median(rates):8.0f} MB/s  (both directions counted)")
    print(f"  range  {min(rates):8.0f} .. {max(rates):.0f} MB/s")
    rtt = 2 * array.nbytes / (statistics.median(rates) * 1e6) * 1e3
    print(f"  median round trip {rtt:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
