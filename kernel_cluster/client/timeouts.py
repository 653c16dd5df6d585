"""What a wait's ``timeout`` may be, checked at the call that gives it.

Every wait of the client (``result``, ``gather``, ``wait``, ``as_completed``) takes
None (for ever) or a number of seconds; an infinite number waits as None does (the
clocks and queues underneath take no infinite timeout: it raised OverflowError).
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def check_timeout(timeout: Any) -> float | None:
    """A timeout is None (wait for ever) or a number of seconds, not negative; the
    seconds as a float, and None for an infinite number (waits cannot take one)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"timeout={timeout!r} ({type(timeout).__name__}): give a number of seconds, "
            "e.g. timeout=10, or None to wait until the future is done."
        )
    seconds = float(timeout)
    if not seconds >= 0:  # negative or NaN
        raise ValueError(f"timeout={timeout!r}: give a number of seconds >= 0, or None.")
    return None if seconds == math.inf else seconds


def timeout_text(seconds: float) -> str:
    """A timeout as every wait's error names it: "0.2 s", "3 s", "1.5 s"."""
    return f"{seconds:g} s"


def not_done_text(late: int, total: int) -> str:
    """How many futures a timeout left not done, in words: "2 of the 3 futures are
    not done", "1 of the 3 futures is not done", "the future is not done"."""
    if total == 1:
        return "the future is not done"
    return f"{late} of the {total} futures {'is' if late == 1 else 'are'} not done"
