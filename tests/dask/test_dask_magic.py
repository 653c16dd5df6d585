"""``%%span`` in a real IPython kernel whose default source is a Dask cluster's: the
cell's tasks land in a Dask span, seen by Dask's scheduler and by our views."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from tests.test_magics import kernel, run  # noqa: F401  (the kernel fixture)

SETUP = """
%load_ext kernel_cluster
import kernel_cluster
from distributed import Client, LocalCluster
cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
client = Client(cluster)
source = kernel_cluster.attach(client)
"""


def test_cell_magic_opens_a_dask_span(kernel):  # noqa: F811
    assert run(kernel, SETUP)["status"] == "ok"
    r = run(kernel, "%%span etl load\nf = client.submit(sum, [1, 2])\nf.result()")
    assert r["status"] == "ok" and r["result"] == "3"
    r = run(
        kernel,
        "names = client.run_on_scheduler(lambda dask_scheduler: sorted("
        "s.name for s in dask_scheduler.extensions['spans'].spans.values()))\n"
        "print(names, sorted(s.name for s in source.spans()), source.kind)",
    )
    assert r["stdout"].count("('etl', 'load')") == 2, r
    assert "embedded" in r["stdout"]  # LocalCluster(processes=False): workers in the kernel
    assert run(kernel, "client.close(); cluster.close()")["status"] == "ok"
