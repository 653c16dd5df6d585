"""The history survives the kernel: a run before a restart (a real kernel, started and
restarted with jupyter_client) is the baseline of the same run after it."""

from __future__ import annotations

import os
import sys

import pytest
from jupyter_client.manager import start_new_kernel

from tests.test_magics import run

SETUP = """
%load_ext kernel_cluster
import time
import kernel_cluster
from kernel_cluster import Client, span
client = Client()
def parse(x, slow=0.0):
    time.sleep(slow)
    return x + 1
"""

RUN = """
with span("etl") as etl_id:
    client.gather(client.map(parse, range(8), slow={slow}, pure=False))
print(etl_id)
"""


@pytest.fixture
def kernel(tmp_path):
    env = dict(
        os.environ, PYTHONPATH=os.getcwd(), KERNEL_CLUSTER_HISTORY=str(tmp_path / "h.sqlite")
    )
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=os.getcwd())
    assert run(kc, "import sys; print(sys.executable)")["stdout"].strip() == sys.executable
    box = {"kc": kc}
    try:
        yield km, box
    finally:
        box["kc"].stop_channels()
        km.shutdown_kernel(now=True)


def test_compare_against_the_run_before_the_restart(kernel):
    km, box = kernel
    kc = box["kc"]
    assert run(kc, SETUP)["status"] == "ok"
    before = run(kc, RUN.format(slow=0.0))
    assert before["status"] == "ok", before
    before_id = before["stdout"].strip()
    # at once: the kernel writes its last spans as it shuts down
    kc.stop_channels()
    km.restart_kernel(now=False)
    kc = box["kc"] = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    assert run(kc, SETUP)["status"] == "ok"
    r = run(
        kc,
        "print(kernel_cluster.history(name='etl').id.tolist())\n"
        "print(kernel_cluster.history.load('etl@-1').context['pid'] != __import__('os').getpid())",
    )
    assert r["stdout"].split("\n")[:2] == [str([before_id]), "True"], r
    after = run(kc, RUN.format(slow=0.05))
    assert after["status"] == "ok", after
    after_id = after["stdout"].strip()
    r = run(
        kc,
        "t = client.compare('etl@-1', 'etl')\n"
        "print(t.attrs['a']['id'], t.attrs['b']['id'])\n"
        "print(t.iloc[0].function, t.iloc[0].activity)",
    )
    lines = r["stdout"].split("\n")
    assert lines[0] == f"{before_id} {after_id}", r
    assert lines[1] == "parse thread-noncpu", r
    # and the magic prints the verdict under the cell
    r = run(
        kc, "%%span etl --compare-to etl@-1\nclient.gather(client.map(parse, range(8), pure=False))"
    )
    assert r["status"] == "ok", r
    assert r["stdout"].startswith("Against etl@-1 (etl (history ") and "wall " in r["stdout"], r
