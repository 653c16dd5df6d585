"""Write a performance report of a small workload with spans: ``make_report.py OUT``."""

import sys
import time

from kernel_cluster import Client, KernelCluster, performance_report, span


def load(i):
    time.sleep(0.02)  # waiting, as on I/O: thread-noncpu
    return bytes(range(256)) * 200 + bytes(i)


def crunch(data):
    total = 0
    for _ in range(30):  # pure Python: thread-cpu, long enough for the profiler
        for b in data[::7]:
            total += b * b
    return total


def combine(*parts):
    return sum(parts)


def main(filename: str) -> None:
    cluster = KernelCluster(n_workers=2, threads_per_worker=2)
    client = Client(cluster)
    try:
        with performance_report(filename=filename, client=client):
            with span("etl"):
                with span("load"):
                    raw = client.map(load, range(24))
                with span("crunch"):
                    done = client.map(crunch, raw)
                    total = client.submit(combine, *done)
            print(total.result())
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main(sys.argv[1])
