"""The history costs nothing to import: ``import kernel_cluster`` (in a kernel, and in
every worker process, whose memory counts against its limit) must not bring pandas and
numpy with it; the reading and comparing modules load when first used."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = """
import sys
import kernel_cluster
import kernel_cluster.engine.cli  # what a worker process runs
print(sorted(m for m in ("pandas", "numpy") if m in sys.modules))
from kernel_cluster.diagnostics import history
assert history.StoredRun.__name__ == "StoredRun" and history.Comparison.__name__ == "Comparison"
assert issubclass(history.HistoryOff, ValueError)
print("pandas" in sys.modules)
"""


def test_importing_the_package_or_a_worker_imports_no_pandas_or_numpy():
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stdout  # loaded when used
