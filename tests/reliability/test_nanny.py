"""The nanny: worker processes that hang, die, fail to start, or outlive their kernel.

Every test starts its own process cluster (they kill, hang or break its workers),
with short heartbeat and death timeouts so that each runs in seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kernel_cluster import Client, KilledWorker
from kernel_cluster.engine.cluster import KernelCluster
from tests.engine.helpers import FileEvent, on_loop, pickled_by_value, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _by_value() -> Iterator[None]:
    with pickled_by_value(sys.modules[__name__]):
        yield


def hold_the_gil() -> int:
    return sum(itertools.count())  # a C loop: never lets go of the GIL, never ends


def die() -> None:
    os._exit(1)


def innocent(started: FileEvent) -> int:
    started.set()
    time.sleep(1.0)
    return 42


def scheduler_workers(cluster: KernelCluster) -> int:
    return on_loop(cluster, lambda: len(cluster.scheduler.state.workers))


def recovered(cluster: KernelCluster, n: int) -> bool:
    return (
        cluster.n_workers == n
        and len(cluster.worker_pids()) == n
        and scheduler_workers(cluster) == n
    )


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# -- 1. a worker the scheduler dropped is killed and replaced ----------------------------


def test_worker_holding_the_gil_is_killed_replaced_and_its_task_fails() -> None:
    with (
        KernelCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            heartbeat_interval=0.1,
            death_timeout=1.0,
            allowed_failures=2,  # 3 deaths: more than the 2 workers it starts with
        ) as cluster,
        Client(cluster) as client,
    ):
        first = set(cluster.worker_pids().values())
        future = client.submit(hold_the_gil)
        with pytest.raises(KilledWorker, match="hold_the_gil"):
            future.result(timeout=25)
        wait_for(lambda: recovered(cluster, 2), 15, "the cluster to be back to 2 workers")
        wait_for(lambda: all(gone(pid) for pid in first), 10, "the hung processes to end")
        assert client.submit(sum, [1, 2]).result(timeout=10) == 3


# -- 2. only the tasks running at a death are blamed for it ------------------------------


def test_task_beside_a_killer_is_not_blamed(tmp_path: Path) -> None:
    with (
        # 0: a killer fails at its first death of its own; the death beside it is not
        # its own, nor the innocent's
        KernelCluster(
            n_workers=1, threads_per_worker=2, processes=True, allowed_failures=0
        ) as cluster,
        Client(cluster) as client,
    ):
        started = FileEvent(tmp_path / "started")
        good = client.submit(innocent, started)
        wait_for(lambda: os.path.exists(started.path), 10, "the innocent task to start")
        killer = client.submit(die)
        with pytest.raises(KilledWorker):
            killer.result(timeout=30)
        assert good.result(timeout=30) == 42
        wait_for(lambda: recovered(cluster, 1), 15, "the cluster to be back to 1 worker")
        assert client.submit(sum, [1, 2]).result(timeout=10) == 3


def spill(i: int) -> bytes:
    return bytes(30_000_000)


def spilled(directory: str) -> bool:
    return any(files for root, _, files in os.walk(directory) if "spill" in root)


def test_crashed_worker_leaves_no_spill_files() -> None:
    with (
        KernelCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="400 MiB",
            memory_target_fraction=0.1,
            memory_spill_fraction=0.95,
            memory_pause_fraction=0.99,
            allowed_failures=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        data = client.map(spill, range(3))
        client.gather(data)
        (first,) = [d for d in os.listdir(cluster.local_directory) if d.startswith("worker")]
        wait_for(lambda: spilled(os.path.join(cluster.local_directory, first)), 10, "a spill")
        with pytest.raises(KilledWorker):
            client.submit(die).result(timeout=20)
        wait_for(lambda: recovered(cluster, 1), 15, "the cluster to be back to 1 worker")
        wait_for(
            lambda: not os.path.exists(os.path.join(cluster.local_directory, first)),
            10,
            "the dead worker's directory to go",
        )


# -- 3. a killed kernel leaves no directory behind ---------------------------------------

KERNEL = """
import json, os, sys, time
from kernel_cluster import Client, KernelCluster

def big(i):
    return bytes(30_000_000)

cluster = KernelCluster(
    n_workers=2, threads_per_worker=1, processes=True, memory_limit="400 MiB",
    memory_target_fraction=0.1, memory_spill_fraction=0.95, memory_pause_fraction=0.99,
)
client = Client(cluster)
futures = client.map(big, range(4))
client.gather(futures)
deadline = time.monotonic() + 20
def spilled():
    for root, _, files in os.walk(cluster.local_directory):
        if "spill" in root and files:
            return True
while not spilled() and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"dir": cluster.local_directory, "pids": list(cluster.worker_pids().values()),
                  "spilled": bool(spilled())}), flush=True)
time.sleep(600)
"""


def test_killed_kernel_leaves_no_worker_or_directory(tmp_path: Path) -> None:
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    child = subprocess.Popen(
        [sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # bounded: pytest's timeout ends a hang here
        info = json.loads(line)
        assert info["spilled"] and os.path.isdir(info["dir"])
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        wait_for(lambda: all(gone(p) for p in info["pids"]), 15, "the workers to exit")
        wait_for(lambda: not os.path.exists(info["dir"]), 10, "the directory to go")
    finally:
        child.kill()
        child.wait(10)


HUNG_KERNEL = """
import itertools, json, os, sys, time
from kernel_cluster import Client, KernelCluster

def hold_the_gil(flag):
    open(flag, "w").close()
    return sum(itertools.count())

cluster = KernelCluster(n_workers=1, threads_per_worker=1, processes=True)
client = Client(cluster)
future = client.submit(hold_the_gil, sys.argv[1])
deadline = time.monotonic() + 20
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"dir": cluster.local_directory, "pids": list(cluster.worker_pids().values()),
                  "running": os.path.exists(sys.argv[1])}), flush=True)
time.sleep(600)
"""


def test_new_cluster_kills_a_hung_worker_its_dead_kernel_left(tmp_path: Path) -> None:
    script = tmp_path / "kernel.py"
    script.write_text(HUNG_KERNEL)
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "running")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        info = json.loads(child.stdout.readline())
        assert info["running"]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        # stuck in a task that holds the GIL, the worker cannot act on its owner's death
        assert not any(gone(p) for p in info["pids"])
        with KernelCluster(n_workers=0):
            pass
        wait_for(lambda: all(gone(p) for p in info["pids"]), 10, "the hung worker to end")
        assert not os.path.exists(info["dir"])
    finally:
        child.kill()
        child.wait(10)
        for pid in info["pids"] if "info" in locals() else ():
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


def _owner_file(directory: str, pid: int, create_time: float) -> None:
    with open(os.path.join(directory, "owner.json"), "w") as f:
        json.dump({"pid": pid, "create_time": create_time}, f)


def test_new_cluster_sweeps_directories_of_dead_kernels() -> None:
    dead = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    dead_created = psutil.Process(dead.pid).create_time()
    dead.communicate(b"")
    me = psutil.Process()
    stale = tempfile.mkdtemp(prefix=f"kernel-cluster-{dead.pid}-")
    _owner_file(stale, dead.pid, dead_created)
    os.makedirs(os.path.join(stale, "worker-0", "spill"))
    Path(stale, "worker-0", "spill", "x").write_bytes(b"0" * 1000)
    Path(stale, "token").write_text("secret")
    # a reused pid: this live process's pid, but not its start time
    reused = tempfile.mkdtemp(prefix=f"kernel-cluster-{os.getpid()}-")
    _owner_file(reused, os.getpid(), me.create_time() - 1000)
    live = tempfile.mkdtemp(prefix=f"kernel-cluster-{os.getpid()}-")
    _owner_file(live, os.getpid(), me.create_time())
    try:
        with KernelCluster(n_workers=0) as cluster:
            assert os.path.isdir(cluster.local_directory)
            assert not os.path.exists(stale)
            assert not os.path.exists(reused)
            assert os.path.isdir(live)
    finally:
        for d in (stale, reused, live):
            subprocess.run(["rm", "-rf", d], check=False)


# -- 4. a failed restart is retried ------------------------------------------------------

SITECUSTOMIZE = """
import os, sys
path = os.environ.get("KC_TEST_FAILING_STARTS")
if path:
    with open(path) as f:
        left = int(f.read())
    if left > 0:
        with open(path, "w") as f:
            f.write(str(left - 1))
        sys.stderr.write("sitecustomize: failing this start on purpose\\n")
        if left == 2:
            sys.exit(3)  # a start that fails at once
        import time
        time.sleep(60)  # a start that never registers: ended at worker_start_timeout
"""


def test_failed_restarts_are_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with KernelCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        # the first starts may be slow on a busy machine; the failing ones end after 2 s
        assert cluster.nanny is not None
        usual = cluster.nanny.start_timeout
        cluster.nanny.start_timeout = 2
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        counter = tmp_path / "failing-starts"
        counter.write_text("2")
        # worker processes start with the kernel's environment: the next two fail
        path = os.environ.get("PYTHONPATH")
        monkeypatch.setenv("PYTHONPATH", str(site) + (os.pathsep + path if path else ""))
        monkeypatch.setenv("KC_TEST_FAILING_STARTS", str(counter))
        victim = next(iter(cluster.worker_pids().values()))
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: counter.read_text() == "0", 20, "two failed starts")
        # the second failing start is under way, its 2 s running; the next one is a real
        # start, which a busy machine may need more than 2 s for
        cluster.nanny.start_timeout = usual
        wait_for(lambda: recovered(cluster, 2), 60, "the cluster to be back to 2 workers")
        with Client(cluster) as client:
            assert client.submit(sum, [1, 2]).result(timeout=10) == 3
