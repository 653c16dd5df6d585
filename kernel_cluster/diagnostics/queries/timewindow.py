"""Time windows as users write them: timestamps, or durations ago ("10s", "2min")."""

from __future__ import annotations

import re
from typing import Any

_UNITS = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*$")


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.lower())
    if not m or m.group(2) not in _UNITS | {"": 1.0}:
        raise ValueError(
            f"Cannot read {text!r} as a duration; write e.g. '10s', '500ms', '2min', '1h'."
        )
    return float(m.group(1)) * _UNITS.get(m.group(2), 1.0)


def parse_time(value: Any, now: float) -> float | None:
    """A timestamp (seconds since the epoch), a duration ago ("10s"), or None."""
    if value is None:
        return None
    if isinstance(value, str):
        return now - parse_duration(value)
    if hasattr(value, "timestamp"):  # datetime, pandas.Timestamp
        return float(value.timestamp())
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(
        f"Cannot use {value!r} as a time: give a timestamp, a datetime or a duration ago "
        "such as '10s'."
    )


def resolve_window(start: Any, stop: Any, now: float) -> tuple[float | None, float | None]:
    return parse_time(start, now), parse_time(stop, now)
