"""The wheel's build step for the front-end: the widget and report bundles and the
prebuilt JupyterLab extension are rebuilt from the sources being packaged, every
time, so a wheel can never carry bundles left over from other sources.

hatch-jupyter-builder calls ``build`` (pyproject: ``build-function``). The one
exception is a wheel built from our own sdist: its bundles were made from the very
sources in it when the sdist was built, and the person installing it may have no
Node.js. ``make``'s editable installs (which build the bundles themselves, or need
none) turn the hook off with ``HATCH_BUILD_NO_HOOKS=true``, so that its dependencies
(JupyterLab) are not fetched either; ``SKIP_JUPYTER_BUILDER=1`` skips this step too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

BUNDLES = (
    "kernel_cluster/jupyter/static/widget.js",
    "kernel_cluster/jupyter/static/report.js",
    "kernel_cluster/jupyter/static/widget.css",
    "kernel_cluster/labextension/package.json",
)


def build(target_name: str, version: str, **_: object) -> None:
    root = Path.cwd()
    if (root / "PKG-INFO").exists() and all((root / b).exists() for b in BUNDLES):
        return  # an unpacked sdist: its bundles were built from its own sources
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "Building kernel-cluster's wheel builds its widget bundles and JupyterLab "
            "extension from widgets/ and labextension/, which needs Node.js (18 or "
            "newer) and npm on PATH. Install them, or install a released wheel instead."
        )
    if not (root / "node_modules" / ".package-lock.json").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=root, check=True)
    # labextension/build.mjs asks a Python with jupyterlab for JupyterLab's core
    # packages: the build environment has it (pyproject's build-system requires)
    env = {"KC_PYTHON": sys.executable, **os.environ}
    subprocess.run([npm, "run", "build"], cwd=root, check=True, env=env)
