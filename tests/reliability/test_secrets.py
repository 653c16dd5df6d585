"""Issue 32.10: the cluster's token does not reach tasks or what they start.

Before: a worker process kept ``KERNEL_CLUSTER_TOKEN`` in its environment, so every
task could read it and every process a task started inherited it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from kernel_cluster.engine.comm import TOKEN_ENV


def token_seen() -> tuple[str | None, str]:
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ.get({TOKEN_ENV!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return os.environ.get(TOKEN_ENV), child.stdout.strip()


def test_tasks_and_their_subprocesses_do_not_see_the_token(client, cluster):
    here = os.environ.get(TOKEN_ENV)
    assert client.submit(token_seen, pure=False).result(timeout=60) == (here, str(here))
    if cluster.processes:
        assert here is None  # the kernel never had it; the workers had it and let go
        ran = client.run(lambda: os.environ.get(TOKEN_ENV))
        assert set(ran.values()) == {None}


def test_the_token_leaves_no_trace_in_proc_of_a_worker_process():
    """Removed from ``os.environ`` once read, the token still showed in
    /proc/<pid>/environ (a process's first environment cannot change), readable by
    every task for the life of the worker: it now comes on the worker's stdin."""
    from kernel_cluster import Client, KernelCluster

    with KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        with Client(cluster, set_as_default=False) as client:
            assert client.submit(sum, [1, 2]).result(timeout=60) == 3  # they work
        token = cluster.secret.hex().encode()
        pids = list(cluster.worker_pids().values())
        assert len(pids) == 2
        for pid in pids:
            for part in ("environ", "cmdline"):
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    assert token not in f.read(), f"the token is in /proc/{pid}/{part}"
