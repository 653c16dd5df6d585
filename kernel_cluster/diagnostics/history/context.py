"""Where a run came from: the notebook or script, the machine, the versions, the commit.

Collected once per process, by the recorder's thread (never the user's), from what
is at hand without importing anything heavy: package versions from their
installed metadata (``importlib.metadata``, which does not import them), the
notebook's path from the kernel's environment (``JPY_SESSION_NAME``, which
jupyter_server sets for a notebook's kernel; VS Code's ``__vsc_ipynb_file__``),
else the script (``sys.argv[0]``); the git commit by reading ``.git`` (HEAD, the
ref it names, or ``packed-refs``), not by running git.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("numpy", "pandas", "dask", "distributed", "kernel-cluster")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def source_file() -> str | None:
    """The notebook this kernel runs, or the script this process runs (None in a
    plain interpreter)."""
    notebook = os.environ.get("JPY_SESSION_NAME")
    if notebook:
        return notebook
    main = sys.modules.get("__main__")
    vscode = getattr(main, "__vsc_ipynb_file__", None)
    if isinstance(vscode, str) and vscode:
        return vscode
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0 or argv0 == "-c" or "ipykernel" in argv0 or argv0.endswith("pytest"):
        return None
    return str(Path(argv0).resolve())


def git_commit(start: Path | None = None) -> str | None:
    """The commit checked out in the git repository holding ``start`` (the working
    directory), or None."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        git = directory / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = git.read_text(encoding="utf-8", errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            git = (directory / text[len("gitdir:") :].strip()).resolve()
        if git.is_dir():
            return _resolve_head(git)
    return None


def _resolve_head(git: Path) -> str | None:
    try:
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head or None
    ref = head[4:].strip()
    common = git
    commondir = git / "commondir"  # a worktree keeps its refs in the main repository
    if commondir.is_file():
        common = (git / commondir.read_text(encoding="utf-8").strip()).resolve()
    for base in (git, common):
        try:
            return (base / ref).read_text(encoding="utf-8").strip() or None
        except OSError:
            pass
    try:
        for line in (common / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except OSError:
        pass
    return None


_cached: dict[str, Any] | None = None


def process_context() -> dict[str, Any]:
    """This process's context (computed once)."""
    global _cached
    if _cached is None:
        _cached = {
            "source": source_file(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "versions": versions(),
            "git_commit": git_commit(),
        }
    return dict(_cached)
