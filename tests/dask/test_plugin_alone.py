"""The Dask scheduler plugin stands alone: on a scheduler (and workers) that cannot
import kernel_cluster, it arrives pickled by value with the pure modules it shares
with the engine (core/span_folding.py, core/profile_tree.py), folds old default
spans and flattens profiles there with the very code the engine uses."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from distributed import Client as DaskClient

from kernel_cluster.core import profile_tree
from kernel_cluster.core.span_folding import FOLDED_ID
from kernel_cluster.diagnostics.attach import source_of
from kernel_cluster.diagnostics.sources import dask_plugin
from tests.dask.alone_tasks import crunch, fold_soon, imports_kernel_cluster
from tests.dask.test_cli import START_TIMEOUT, CliCluster

# A Dask command whose process cannot import kernel_cluster (installed in this
# environment, so a plain `dask scheduler` could): the plugin must bring what it needs.
STAND_ALONE = """
import sys

class NoKernelCluster:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "kernel_cluster":
            raise ModuleNotFoundError(f"No module named {name!r} (this process stands alone)")
        return None

sys.meta_path.insert(0, NoKernelCluster)
if sys.argv.pop(1) == "scheduler":
    from distributed.cli.dask_scheduler import main
else:
    from distributed.cli.dask_worker import main
main()
"""


class StandAloneCluster(CliCluster):
    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        # task graphs name tests.dask.alone_tasks' functions: the checkout is on the path
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        proc = subprocess.Popen(
            [sys.executable, "-c", STAND_ALONE, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            env=env,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc


@pytest.fixture
def alone(tmp_path: Path) -> Iterator[DaskClient]:
    cluster = StandAloneCluster(tmp_path)
    client = None
    try:
        cluster.start()
        client = DaskClient(cluster.address, timeout=START_TIMEOUT)
        client.wait_for_workers(2, timeout=START_TIMEOUT)
        yield client
    finally:
        if client is not None:
            client.close(timeout=5)
        cluster.stop()


def test_the_plugin_folds_spans_and_flattens_profiles_on_a_scheduler_without_the_package(
    alone,
) -> None:
    assert "stands alone" in alone.run_on_scheduler(imports_kernel_cluster)
    assert all("stands alone" in r for r in alone.run(imports_kernel_cluster).values())
    source = source_of(alone)  # installs the plugin, pickled by value
    alone.run_on_scheduler(fold_soon)
    before = source.fine_metrics()
    for i in range(6):  # outside any span, each its own TaskGroup: a default span each
        future = alone.submit(crunch, i, key=f"alone{'abcdef'[i]}-{i}")
        assert future.result(timeout=60) is not None

    def folded():
        spans = {s.id: s for s in source.spans(refresh=False)}
        return spans.get(FOLDED_ID)

    deadline = time.monotonic() + 30
    while folded() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # a read folds, once the spans are finished
    fold = folded()
    assert fold is not None, "no default span folded on the scheduler"
    assert fold.done and fold.name == ("default",)
    assert fold.active_cpu_seconds > 0 and fold.states["memory"] + fold.states["forgotten"] >= 4
    after = source.fine_metrics(refresh=True)

    def tasks(metrics, span_id=None) -> float:
        return sum(
            v
            for k, v in metrics.items()
            if str(k[-3]).startswith("alone") and k[-2] == "tasks" and span_id in (None, k[1])
        )

    assert tasks(after) - tasks(before) == 6  # folding moves numbers, loses none
    assert tasks(after, FOLDED_ID) >= 4
    metrics, _ = source.span_metrics(FOLDED_ID)
    assert metrics == folded().metrics
    # profiles: flattened on the scheduler by core's to_flat, `own` worked out there
    profiles = source.profiles()
    assert profiles, "no worker sent a profile"
    for rows in profiles.values():
        tree = profile_tree.from_flat(rows)
        profile_tree.validate(tree)  # every count is its own samples plus its children's
    merged = profile_tree.merge(*(profile_tree.from_flat(r) for r in profiles.values()))
    assert "crunch" in {node["description"]["name"] for _, node in profile_tree.iter_nodes(merged)}


@pytest.mark.parametrize("module", dask_plugin.PICKLED_WITH, ids=lambda m: m.__name__)
def test_what_travels_with_the_plugin_imports_the_standard_library_alone(module) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module.__name__} imports from its package"
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top == "__future__", (module, name)
