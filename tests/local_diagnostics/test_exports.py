"""Where users find the local diagnostics, and that importing kernel_cluster does not
load them until they are used."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import kernel_cluster
from kernel_cluster import diagnostics

NAMES = ["CacheProfiler", "Callback", "Profiler", "ProgressBar", "ResourceProfiler", "visualize"]


def test_the_names_dask_users_import():
    for name in NAMES:
        assert getattr(kernel_cluster, name) is getattr(diagnostics, name)
        assert name in kernel_cluster.__all__ and name in diagnostics.__all__
    from kernel_cluster import get_sync, sizeof  # noqa: F401
    from kernel_cluster.diagnostics import CacheData, ResourceData, TaskData  # noqa: F401


def test_visualize_is_the_plots_modules():
    plots = importlib.import_module("kernel_cluster.local_diagnostics.plots")
    assert diagnostics.visualize is plots.visualize is kernel_cluster.visualize


def test_importing_kernel_cluster_loads_no_profiler():
    code = (
        "import sys, kernel_cluster; "
        "print(sorted(m for m in ('kernel_cluster.local_diagnostics.profilers', "
        "'kernel_cluster.local_diagnostics.sync') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
