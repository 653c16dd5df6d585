"""The wheel is all a user needs: in a fresh virtual environment, ``pip install`` of it
(and JupyterLab) gives the lab extension, enabled and OK, with no Node and no
``jupyter labextension install``.

Building the wheel (the bundles with npm, JupyterLab in pip's build environment) and
installing it with JupyterLab take minutes. ``make test`` sets ``KC_WHEEL_CACHE`` to a
directory where the wheel and its environment are kept for one source state (a hash
of the files git tracks or would track, but the tests): a second run on the same
sources checks the same wheel again in seconds. Without it (pytest run by hand), and
in a fresh clone (CI), they are made anew.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "KC_WHEEL_CACHE"
# what the wheel is not made of (but this file, which says how it is checked)
NOT_IN_THE_WHEEL = ("tests/", "ui-tests/", "benchmarks/", "examples/")
STALE = "/* stale: built from other sources */\n"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # minutes on a busy machine: pip, npm, JupyterLab
def test_a_fresh_venv_gets_the_lab_extension_from_the_wheel(tmp_path: Path) -> None:
    if not (ROOT / "kernel_cluster" / "labextension" / "package.json").exists():
        pytest.fail("the lab extension is not built: run `make bundles` first")
    with _place(tmp_path) as place:
        wheel = _wheel(place / "dist", tmp_path)
        with zipfile.ZipFile(wheel) as zf:
            shipped = zf.read("kernel_cluster/jupyter/static/widget.js").decode()
            # type checkers read the package's annotations (PEP 561)
            assert "kernel_cluster/py.typed" in zf.namelist()
        assert shipped != STALE
        assert shipped == (ROOT / "kernel_cluster" / "jupyter" / "static" / "widget.js").read_text()
        fresh = _installed(place / "fresh", wheel)
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
            str(fresh / "bin" / "python"),
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


@contextlib.contextmanager
def _place(tmp_path: Path) -> Iterator[Path]:
    """Where the wheel and its environment go: ``tmp_path``, or the cache's entry for
    the current sources (the only one kept), locked against another run meanwhile."""
    cache = os.environ.get(CACHE_ENV)
    key = _source_state() if cache else None
    if not cache or key is None:
        yield tmp_path
        return
    root = Path(cache)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in root.iterdir():  # other source states: not needed again
            if old.is_dir() and old.name != key:
                shutil.rmtree(old, ignore_errors=True)
        yield root / key


def _source_state() -> str | None:
    """A hash of what the wheel is built from (None outside a git checkout)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(sys.version.encode())
    for name in sorted(n.decode() for n in listed.split(b"\0") if n):
        if name.startswith(NOT_IN_THE_WHEEL) and name != "tests/test_wheel.py":
            continue
        path = ROOT / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _wheel(dist: Path, tmp_path: Path) -> Path:
    """The wheel built from a copy of the checkout whose bundles are stale: it must
    carry bundles built from the sources it ships, not whatever lies in the build
    directories. Made once per place."""
    built = sorted(dist.glob("kernel_cluster-*.whl"))
    if built:
        return built[0]
    checkout = _copy_checkout(tmp_path / "checkout")
    (checkout / "kernel_cluster" / "jupyter" / "static" / "widget.js").write_text(STALE)
    off = ("SKIP_JUPYTER_BUILDER", "HATCH_BUILD_NO_HOOKS")  # the build hook must run
    env = {k: v for k, v in os.environ.items() if k not in off}
    building = tmp_path / "dist-building"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(building), "."],
        check=True,
        cwd=checkout,
        env=env,
        timeout=1200,
    )
    (wheel,) = building.glob("kernel_cluster-*.whl")
    dist.mkdir(parents=True, exist_ok=True)
    part = dist / (wheel.name + ".part")
    shutil.copyfile(wheel, part)
    return part.replace(dist / wheel.name)  # whole, or not there at all


def _installed(fresh: Path, wheel: Path) -> Path:
    """A fresh virtual environment with the wheel and JupyterLab, made once per place
    (its marker file says it was completed)."""
    done = fresh / "installed-from"
    if done.exists() and done.read_text() == wheel.name:
        return fresh
    shutil.rmtree(fresh, ignore_errors=True)
    venv.create(fresh, with_pip=True)
    subprocess.run(
        [
            str(fresh / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            str(wheel),
            "jupyterlab",
        ],
        check=True,
        timeout=1200,
    )
    done.write_text(wheel.name)
    return fresh


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
