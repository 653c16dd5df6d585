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
