"""The house plan: the package's tree shows its layers, and the old import paths users
have in their code still work."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import kernel_cluster

PACKAGE = pathlib.Path(kernel_cluster.__file__).parent
# top to bottom: each imports only those below it (the contracts in pyproject.toml)
LAYERS = ["client", "local_diagnostics", "jupyter", "diagnostics", "engine", "core"]
# kept for code written against the old tree; each hands on to its new home
OLD_PATHS = {"worker_cli"}
# a module is read in one sitting; the two state machines, each one door over all its
# transitions, are the exceptions
MAX_MODULE_LINES = 600
LONGER_MODULES = {"core/scheduler_state.py", "core/worker_state.py"}


def test_the_package_root_holds_only_the_layers():
    entries = {
        p.name
        for p in PACKAGE.iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert entries == {"__init__.py", *LAYERS, *OLD_PATHS}


def test_every_module_is_under_600_lines_but_the_two_state_machines():
    sizes = {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert set(sizes) >= LONGER_MODULES  # the exceptions still exist under these names
    too_long = {
        name: n for name, n in sizes.items() if n >= MAX_MODULE_LINES and name not in LONGER_MODULES
    }
    assert not too_long, f"split these modules (lines): {too_long}"


def test_the_layer_contract_names_every_layer_in_order():
    text = (PACKAGE.parent / "pyproject.toml").read_text()
    start = text.index('type = "layers"')
    listed = [
        line.strip().strip('",').removeprefix("kernel_cluster.")
        for line in text[start:].split("]", 1)[0].splitlines()[2:]
        if line.strip().startswith('"')
    ]
    assert listed == LAYERS


def test_the_documented_old_paths_still_import():
    from kernel_cluster.diagnostics import Callback, Profiler, ProgressBar, visualize
    from kernel_cluster.diagnostics.local_plots import visualize as old_visualize
    from kernel_cluster.local_diagnostics import Callback as new_callback
    from kernel_cluster.local_diagnostics import Profiler as new_profiler
    from kernel_cluster.local_diagnostics import ProgressBar as new_bar

    assert (Callback, Profiler, ProgressBar) == (new_callback, new_profiler, new_bar)
    assert old_visualize is visualize is kernel_cluster.visualize


def test_the_worker_command_line_answers_at_its_old_and_new_paths():
    for module in ("kernel_cluster.worker_cli", "kernel_cluster.engine.cli"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert "--memory-limit" in out.stdout
    script = shutil.which("kernel-cluster-worker", path=str(pathlib.Path(sys.executable).parent))
    assert script is not None
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--memory-limit" in out.stdout


def test_importing_kernel_cluster_starts_no_thread():
    code = (
        "import threading, kernel_cluster, kernel_cluster.diagnostics, kernel_cluster.jupyter; "
        "print(threading.active_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "1"


# README's Layout is how a newcomer finds a module: every module is named there
def layout_block() -> str:
    text = (PACKAGE.parent / "README.md").read_text()
    section = text[text.index("## Layout") :]
    return section[: section.index("```", section.index("```") + 3)]


def test_every_module_is_named_in_readme_layout() -> None:
    block = layout_block()
    named = set(re.findall(r"[\w]+\.py", block))
    missing = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name not in {"__init__.py", "__main__.py"} and path.name not in named
    )
    assert not missing, f"name these in README's Layout, with what they hold: {missing}"
