"""Write a performance report compared with an earlier run (``compare_to``) and with
the progress of its work: ``make_compare_report.py OUT``."""

import sys
import tempfile
import time

import kernel_cluster
from kernel_cluster import Client, KernelCluster, performance_report, span


def parse(i, slow=0.0):
    time.sleep(slow)  # waiting, as on I/O: thread-noncpu
    return i


def total(xs):
    return sum(xs)


def main(filename: str) -> None:
    kernel_cluster.history.configure(path=tempfile.mkdtemp() + "/history.sqlite")
    client = Client(KernelCluster(n_workers=1, threads_per_worker=2))
    try:
        with span("etl"):
            client.submit(total, client.map(parse, range(12), pure=False)).result()
        with performance_report(filename=filename, client=client, compare_to="etl"):
            client.submit(total, client.map(parse, range(12), slow=0.05, pure=False)).result()
    finally:
        client.close()


if __name__ == "__main__":
    main(sys.argv[1])
