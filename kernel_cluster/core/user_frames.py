"""Telling the user's frames from library frames: for a warning pointed at the user's
line, however deep inside this package and dask the call that warns came from, and for
the code a span remembers (``Span.code``), which must be the line that asked for the
work, not the library line that sent it (``x.compute(scheduler=client)`` reaches the
client from inside dask)."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

__all__ = ["is_library_frame", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # kernel_cluster/
_DASK = f"{os.sep}dask{os.sep}"

# top-level modules whose frames are never the user's, wherever they are installed (a
# source checkout of dask is not under site-packages); beside these, every frame of the
# standard library and of installed packages is a library frame
LIBRARY_MODULES = frozenset(
    {
        "kernel_cluster",
        "dask",
        "distributed",
        "dask_expr",
        "xarray",
        "asyncio",
        "concurrent",
        "threading",
        "functools",
        "contextlib",
        "runpy",
        "IPython",
        "ipykernel",
        "tornado",
        "_pytest",
        "pluggy",
    }
)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    return tuple(sorted(os.path.join(os.path.abspath(d), "") for d in dirs))


_LIBRARY_DIRS = _library_dirs()
_by_file: dict[str, bool] = {}


def is_library_frame(frame: FrameType) -> bool:
    """Whether ``frame`` runs library code (this package, dask, distributed, the
    standard library, an installed package), not the user's: scripts, notebook cells,
    modules of the user's own project."""
    filename = frame.f_code.co_filename
    known = _by_file.get(filename)
    if known is not None:
        return known
    module = frame.f_globals.get("__name__")
    root = module.partition(".")[0] if isinstance(module, str) else ""
    library = (
        root in LIBRARY_MODULES
        or filename.startswith(_PACKAGE)
        or filename.startswith("<frozen ")
        or filename.startswith(_LIBRARY_DIRS)
    )
    if len(_by_file) < 10_000:
        _by_file[filename] = library
    return library


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller of this function
    that names the first frame outside this package, dask and contextlib."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_PACKAGE) or _DASK in name or "contextlib" in name):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 1
