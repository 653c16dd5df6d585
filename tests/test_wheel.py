"""The wheel is all a user needs: in a fresh virtual environment, ``pip install`` of it
(and JupyterLab) gives the lab extension, enabled and OK, with no Node and no
``jupyter labextension install``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_fresh_venv_gets_the_lab_extension_from_the_wheel(tmp_path: Path) -> None:
    if not (ROOT / "kernel_cluster" / "labextension" / "package.json").exists():
        pytest.fail("the lab extension is not built: run `make bundles` first")
    # a checkout whose bundles are stale: the wheel must carry bundles built from
    # the sources it ships, not whatever lies in the build directories
    checkout = _copy_checkout(tmp_path / "checkout")
    stale = "/* stale: built from other sources */\n"
    (checkout / "kernel_cluster" / "jupyter" / "static" / "widget.js").write_text(stale)
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k != "SKIP_JUPYTER_BUILDER"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), "."],
        check=True,
        cwd=checkout,
        env=env,
        timeout=600,
    )
    (wheel,) = dist.glob("kernel_cluster-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = zf.read("kernel_cluster/jupyter/static/widget.js").decode()
        # type checkers read the package's annotations (PEP 561)
        assert "kernel_cluster/py.typed" in zf.namelist()
    assert shipped != stale
    assert shipped == (ROOT / "kernel_cluster" / "jupyter" / "static" / "widget.js").read_text()
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    py = fresh / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", str(wheel), "jupyterlab"],
        check=True,
        timeout=600,
    )
    listed = subprocess.run(
        [str(fresh / "bin" / "jupyter"), "labextension", "list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    out = listed.stdout + listed.stderr
    line = next((ln for ln in out.splitlines() if "@kernel-cluster/lab" in ln), "")
    assert "enabled" in line and "OK" in line, out
    # the package's own files came with it: the widget bundles the views load
    static = subprocess.run(
        [
            str(py),
            "-c",
            "import kernel_cluster, pathlib; print(pathlib.Path("
            "kernel_cluster.__file__).parent / 'jupyter' / 'static' / 'widget.js')",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=60,
    ).stdout.strip()
    assert Path(static).is_file() and str(fresh) in static


def _copy_checkout(dest: Path) -> Path:
    """The working tree without its environments and build caches; the Node packages
    are linked (installing them again is the slow part and not under test)."""
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "node_modules", "test-results", "artifacts", "__pycache__", "*.egg-info"
    )
    shutil.copytree(ROOT, dest, ignore=skip, symlinks=True)
    for modules in [ROOT / "node_modules", *ROOT.glob("*/node_modules")]:
        if modules.exists():
            (dest / modules.relative_to(ROOT)).symlink_to(modules)
    return dest
