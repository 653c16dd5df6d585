"""Giving freed memory back to the operating system.

Values freed in a worker process (spilled, released) return to the C allocator,
which keeps most of them: glibc serves large numpy buffers from its heap once it
has freed one such buffer, and the holes they leave stay resident. The process
then looks as big as before, and a worker paused for memory would stay paused
with nothing left to spill. ``malloc_trim`` hands those pages back.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
_loaded = False


def _load() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc only (not musl)
    except (OSError, AttributeError):
        return None


def trim_memory() -> bool:
    """Return the C heap's free pages to the OS, where the allocator can; True if it could.

    Costs about a millisecond per 100 MB of heap: call it per memory check, not per task.
    """
    global _trim, _loaded
    if not _loaded:
        _trim, _loaded = _load(), True
    if _trim is None:
        return False
    _trim(0)
    return True
