"""The seed's story, for real: ``make_qr_profile.py OUT`` runs a QR decomposition of a
tall dask array on a KernelCluster with two worker processes under Profiler,
ResourceProfiler and CacheProfiler, and writes visualize()'s page of the three."""

import sys

import dask.array as da

from kernel_cluster import (
    CacheProfiler,
    Client,
    KernelCluster,
    Profiler,
    ResourceProfiler,
    visualize,
)


def main(filename: str) -> None:
    with (
        KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        a = da.random.random((200_000, 100), chunks=(10_000, 100))
        q, r = da.linalg.qr(a)
        a2 = q.dot(r)
        with Profiler() as prof, ResourceProfiler(dt=0.1) as rprof, CacheProfiler() as cprof:
            a2.compute(scheduler=client)
    visualize([prof, rprof, cprof], filename=filename, title="QR on kernel-cluster")


if __name__ == "__main__":
    main(sys.argv[1])
