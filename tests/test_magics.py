"""The %%span magic, in a real IPython kernel started with jupyter_client."""

from __future__ import annotations

import os
import sys

import pytest
from jupyter_client.manager import start_new_kernel


@pytest.fixture(scope="module")
def kernel():
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=os.getcwd())
    # the kernel must be this environment's Python
    assert run(kc, "import sys; print(sys.executable)")["stdout"].strip() == sys.executable
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc, code: str) -> dict:
    """Execute ``code``; return its status, stdout, error name and result text."""
    out = {"stdout": "", "stderr": "", "result": None, "ename": None}

    def hook(msg):
        t = msg["msg_type"]
        if t == "stream":
            out[msg["content"]["name"]] += msg["content"]["text"]
        elif t == "execute_result":
            out["result"] = msg["content"]["data"]["text/plain"]
        elif t == "error":
            out["ename"] = msg["content"]["ename"]

    reply = kc.execute_interactive(code, output_hook=hook, timeout=60)
    out["status"] = reply["content"]["status"]
    return out


SETUP = """
%load_ext kernel_cluster
%load_ext kernel_cluster
from kernel_cluster import Client, span
client = Client()
def inc(x):
    return x + 1
def span_names():
    return sorted(s.name for s in client.spans())
"""


def test_cell_magic_puts_the_cells_tasks_in_a_span(kernel):
    assert run(kernel, SETUP)["status"] == "ok"  # loading twice is harmless
    r = run(kernel, '%%span "Alice\'s workflow" load\nf = client.submit(inc, 1)\nf.result()')
    assert r["status"] == "ok" and r["result"] == "2"
    r = run(kernel, "print(span_names())")
    assert "(\"Alice's workflow\", 'load')" in r["stdout"]
    r = run(
        kernel,
        "print([g.name for s in client.cluster.scheduler.extensions['spans']"
        ".spans_search_by_name[(\"Alice's workflow\", 'load')] for g in s.groups])",
    )
    assert "inc" in r["stdout"]


def test_cell_magic_nests_inside_an_outer_span(kernel):
    run(kernel, SETUP)
    r = run(
        kernel,
        'with span("outer"):\n    get_ipython().run_cell_magic("span", "inner", '
        '"client.submit(inc, 10).result()")\nprint(span_names())',
    )
    assert r["status"] == "ok"
    assert "('outer', 'inner')" in r["stdout"]


def test_exception_closes_the_span_and_reraises(kernel):
    run(kernel, SETUP)
    r = run(kernel, "%%span broken\nclient.submit(inc, 'a').result()")
    assert r["status"] == "error" and r["ename"] == "TypeError"
    r = run(kernel, "from kernel_cluster import get_annotations; print(get_annotations())")
    assert r["stdout"].strip() == "{}"  # the span is closed again
    assert run(kernel, "print(client.submit(inc, 1).result())")["stdout"].strip() == "2"


def test_line_magic_and_usage_errors(kernel):
    run(kernel, SETUP)
    r = run(kernel, "%span oneliner -- g = client.submit(inc, 5)\nprint(g.result())")
    assert r["stdout"].strip() == "6"
    assert "('oneliner',)" in run(kernel, "print(span_names())")["stdout"]
    # IPython reports usage errors on stderr, without a traceback
    assert "UsageError: %span needs a statement" in run(kernel, "%span no-separator")["stderr"]
    assert "UsageError: %%span needs at least one tag" in run(kernel, "%%span\nx = 1")["stderr"]


def test_cell_magic_labels_a_dask_compute(kernel):
    pytest.importorskip("dask.array")
    run(kernel, SETUP)
    r = run(
        kernel,
        "%%span dask-cell\nimport dask.array as da\n"
        "print(da.ones((100, 100), chunks=50).sum().compute(scheduler=client))",
    )
    assert r["status"] == "ok" and r["stdout"].strip() == "10000.0"
    r = run(
        kernel,
        "spans = client.cluster.scheduler.extensions['spans'].spans_search_by_name\n"
        "print(sorted({g.name.split('-')[0] for s in spans[('dask-cell',)] for g in s.groups}))",
    )
    assert "'sum'" in r["stdout"]  # ones_like is fused into the sum's chunks


def test_compare_to_prints_why_there_is_no_comparison(kernel):
    assert run(kernel, SETUP)["status"] == "ok"
    # the suite keeps the history off: a stored baseline cannot be found, and the cell
    # still runs and returns its result
    r = run(kernel, "%%span cmp --compare-to cmp@-1\nclient.submit(inc, 1).result()")
    assert r["status"] == "ok" and r["result"] == "2"
    assert r["stdout"].startswith("No comparison with cmp@-1: The run history is off"), r
    # a live baseline needs no history
    r = run(kernel, "%%span cmp2 --compare-to=cmp\nclient.submit(inc, 2).result()")
    assert r["stdout"].startswith("Against cmp (cmp (live "), r
    r = run(kernel, "%%span cmp --compare-to\nclient.submit(inc, 1).result()")
    assert "UsageError: --compare-to needs a run" in r["stderr"]
