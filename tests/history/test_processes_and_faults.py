"""Several kernels on one history file, and files that cannot be written: the
computations are never affected, one clear log line says what happened, and no row
is lost (each 'kernel' here is a Python process with its own cluster)."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import kernel_cluster
from kernel_cluster import Client, KernelCluster, span
from kernel_cluster.diagnostics.history import recorder as recorders

WRITER = """
import sys
import resource
limit = int(sys.argv[3])
if limit:  # the disk is full for this process past `limit` bytes (Python ignores SIGXFSZ)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from kernel_cluster import Client, span
from kernel_cluster.diagnostics.history import recorder
name, n = sys.argv[1], int(sys.argv[2])
client = Client()
ids = []
for i in range(n):
    with span(f"{name}-{i}") as span_id:
        assert client.submit(pow, i, 2, pure=False).result() == i * i
    ids.append(span_id)
    if i % 10 == 9:
        recorder.flush_all()  # many small transactions: the two writers meet often
client.close()
print("\\n".join(ids))
"""


def writer(tmp_path, name: str, n: int, fsize: int = 0) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(WRITER))
    env = dict(
        os.environ,
        KERNEL_CLUSTER_HISTORY=str(tmp_path / "history.sqlite"),
        PYTHONPATH=os.getcwd(),
    )
    return subprocess.Popen(
        [sys.executable, str(script), name, str(n), str(fsize)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[list[str], str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"a writer did not finish: {err[-2000:]}") from None
    assert proc.returncode == 0, err[-3000:]
    return out.split(), err


@pytest.mark.slow
def test_two_kernels_write_a_thousand_spans_each_into_one_file(tmp_path):
    procs = [writer(tmp_path, name, 1000) for name in ("first", "second")]
    results = [finish(p) for p in procs]
    ids = {i for out, _ in results for i in out}
    assert len(ids) == 2000
    for _, err in results:
        assert "Traceback" not in err and "kernel-cluster's history" not in err, err[-2000:]
    conn = sqlite3.connect(tmp_path / "history.sqlite")
    stored = {r[0] for r in conn.execute("SELECT id FROM spans WHERE parent IS NULL")}
    sessions = conn.execute("SELECT count(*), count(ended) FROM sessions").fetchone()
    conn.close()
    assert stored == ids  # no row lost
    assert sessions == (2, 2)


def test_a_full_disk_is_logged_once_and_the_computations_go_on(tmp_path):
    """RLIMIT_FSIZE: writes past 200 kB fail as on a full disk."""
    proc = writer(tmp_path, "full", 300, fsize=200_000)
    ids, err = finish(proc)
    assert len(ids) == 300  # every computation returned its result
    lines = [line for line in err.splitlines() if "kernel-cluster's history" in line]
    assert len(lines) == 1, err[-3000:]
    assert "disk is full" in lines[0] or "disk I/O error" in lines[0], lines
    assert "Computations are not affected" in lines[0]
    assert "Traceback" not in err
    # what was written before the limit is intact and readable
    conn = sqlite3.connect(tmp_path / "history.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    conn.close()
    assert 0 < n < 300


def _workload(client) -> list[int]:
    out = []
    for i in range(5):
        with span(f"fault-{i}"):
            out.append(client.submit(pow, i, 2, pure=False).result())
    return out


def test_an_unwritable_history_path_leaves_computations_alone(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    kernel_cluster.history.configure(path=blocker / "history.sqlite")
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    cluster = KernelCluster(n_workers=1, threads_per_worker=1)
    try:
        with Client(cluster, set_as_default=False) as client:
            assert _workload(client) == [0, 1, 4, 9, 16]
            recorder = recorders.recorder_of(cluster)
            assert recorder is not None
            recorder.flush()
            recorder.flush()
            assert _workload(client) == [0, 1, 4, 9, 16]
            recorder.flush()
    finally:
        cluster.close()
        kernel_cluster.history.configure(path=None)
    lines = [r.getMessage() for r in caplog.records if r.name == "kernel_cluster.history"]
    assert len(lines) == 1 and str(blocker) in lines[0] and "KERNEL_CLUSTER_HISTORY" in lines[0]


def test_a_corrupt_history_is_set_aside_and_a_new_one_started(history_file, caplog):
    history_file.write_bytes(b"not sqlite at all " * 500)
    caplog.set_level(logging.WARNING, logger="kernel_cluster.history")
    cluster = KernelCluster(n_workers=1, threads_per_worker=1)
    try:
        with Client(cluster, set_as_default=False) as client:
            assert _workload(client) == [0, 1, 4, 9, 16]
    finally:
        cluster.close()  # writes the last spans
    aside = [p for p in history_file.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == b"not sqlite at all " * 500
    lines = [r.getMessage() for r in caplog.records if r.name == "kernel_cluster.history"]
    assert len(lines) == 1 and str(aside[0]) in lines[0] and "not deleted" in lines[0]
    assert set(kernel_cluster.history().name) >= {f"fault-{i}" for i in range(5)}
