"""Pointing a warning at the user's line, however deep inside this package and dask
the call that warns came from."""

from __future__ import annotations

import os
import sys

__all__ = ["user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # kernel_cluster/
_DASK = f"{os.sep}dask{os.sep}"


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
