"""Issue 32.4: clusters and child processes.

Before: a client used in a child forked after ``Client()`` hung in ``gather`` (the
cluster's threads do not exist in a forked child); a ``multiprocessing`` child started
with 'spawn' that made ``KernelCluster(processes=True)`` failed every task with "No
module named '__mp_main__'" (its functions were pickled by reference to a module the
workers cannot import). Each scenario runs as a script of its own, bounded.
"""

from __future__ import annotations

import subprocess
import sys

FORK = r"""
import os, sys, time
from kernel_cluster import Client, KernelCluster

def inc(x):
    return x + 1

cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=True)
client = Client(cluster)
f = client.submit(inc, 1)
assert f.result(timeout=30) == 2
workers = cluster.worker_pids()
pid = os.fork()
if pid == 0:
    import signal
    signal.alarm(60)  # a child that hangs (the bug) ends rather than outlive the test
    for attempt in (lambda: client.gather([f]), lambda: f.result(), lambda: client.submit(inc, 2)):
        try:
            attempt()
            print("child: no error", flush=True)
        except RuntimeError as exc:
            print("child:", "belongs to process" in str(exc) and "forked" in str(exc), flush=True)
    with Client() as own:  # a cluster of its own: embedded, in the child
        print("child own:", own.submit(inc, 41).result(timeout=30), flush=True)
    sys.exit(0)  # a normal exit: atexit must leave the parent's cluster alone
_, status = os.waitpid(pid, 0)
print("child status:", status, flush=True)
assert cluster.worker_pids() == workers and os.path.isdir(cluster.local_directory)
print("parent after:", client.submit(inc, 2).result(timeout=30), flush=True)
client.close()
cluster.close()
"""

SPAWN = r"""
import multiprocessing as mp

def inc(x):
    return x + 1

def child(q):
    from kernel_cluster import Client, KernelCluster
    try:
        with KernelCluster(n_workers=1, threads_per_worker=1, processes=True) as c, Client(c) as cl:
            q.put(cl.submit(inc, 1).result(timeout=60))
    except Exception as exc:
        q.put(f"{type(exc).__name__}: {exc}")

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("spawn child:", q.get(timeout=120), flush=True)
    p.join(30)
"""


def run_script(text: str, tmp_path) -> str:
    path = tmp_path / "script.py"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_forked_child_is_told_the_cluster_is_its_parents(tmp_path):
    out = run_script(FORK, tmp_path).splitlines()
    assert out[:3] == ["child: True"] * 3, out
    assert "child own: 42" in out
    assert "child status: 0" in out and "parent after: 3" in out


def test_a_spawned_child_runs_a_cluster_with_worker_processes(tmp_path):
    out = run_script(SPAWN, tmp_path)
    assert "spawn child: 2" in out, out
