"""The default cluster is shared: ``Client()`` twice, and closing one leaves the other
working. The last client to close stops it."""

from __future__ import annotations

from kernel_cluster.client.client import Client
from kernel_cluster.client.default import default_cluster
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
        leftover = default_cluster()
        if leftover is not None:
            leftover.close()
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


EXIT_SCRIPT = """
from kernel_cluster import Client

def inc(x):
    return x + 1

first, second = Client(), Client()
first.close()
print("RESULT", second.submit(inc, 1).result(timeout=10))
# exits with the second client (and the default cluster) still open
"""


def test_the_default_cluster_closes_at_exit_under_an_open_client(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "two_clients.py"
    script.write_text(EXIT_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=str(root),
        env=dict(os.environ, PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT 2" in proc.stdout
