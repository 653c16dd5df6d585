"""Functions defined in a notebook cell, run by worker processes: their profile shows
the cell and its lines as an embedded cluster's does (a real kernel, jupyter_client).

A cell's code travels to worker processes by value; cloudpickle (3.1) renames its file
``<dynamic-code>``, and the cell's lines live in the kernel's line cache, which worker
processes do not have (kernel_cluster/engine/code_sources.py).
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from jupyter_client.manager import start_new_kernel


@pytest.fixture(scope="module")
def kernel():
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=os.getcwd())
    try:
        assert run(kc, "import sys; print(sys.executable)").strip() == sys.executable
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc, code: str) -> str:
    """Execute a cell; returns what it printed, fails with the cell's error."""
    out: list[str] = []
    errors: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            errors.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, output_hook=hook, timeout=120)
    assert reply["content"]["status"] == "ok", errors
    return "".join(out)


SETUP = """
import json, time
from kernel_cluster import Client, KernelCluster

def profile_frames(processes, fn, n):
    '''The frames of ``fn``'s tasks' profile: (file, function, line number, line).'''
    with KernelCluster(n_workers=n, threads_per_worker=1, processes=processes) as cluster:
        with Client(cluster, set_as_default=False) as client:
            t0 = time.time()
            client.gather(client.map(fn, range(n)))
            tree = client.profile(start=t0, prefix=fn.__name__)
    frames, work = set(), [tree]
    while work:
        node = work.pop()
        work.extend(node["children"].values())
        if node is not tree:
            d = node["description"]
            frames.add((d["filename"], d["name"], d["line_number"], d["line"]))
    return sorted(frames)
"""

# a function of its own cell, calling another of the same cell
CELL = """def nap(seconds):
    time.sleep(seconds)  # nap's line

def napping(i):
    nap(0.4)  # napping's line
    return i
"""


def test_a_cells_functions_profile_alike_in_worker_processes(kernel):
    run(kernel, SETUP)
    run(kernel, CELL)
    cell_file = run(kernel, "print(napping.__code__.co_filename)").strip()
    assert not os.path.exists(cell_file)  # the cell's lines are in the kernel alone
    result = run(
        kernel,
        "print(json.dumps({'embedded': profile_frames(False, napping, 1),"
        " 'processes': profile_frames(True, napping, 2)}))",
    )
    frames = {how: [tuple(f) for f in fs] for how, fs in json.loads(result).items()}
    expected = [
        (cell_file, "nap", 2, "time.sleep(seconds)  # nap's line"),
        (cell_file, "napping", 5, "nap(0.4)  # napping's line"),
    ]
    assert frames["embedded"] == expected
    assert frames["processes"] == expected
