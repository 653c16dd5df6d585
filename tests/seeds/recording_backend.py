"""A pandas plotting backend that records what it is asked to draw
(``pd.options.plotting.backend = "tests.seeds.recording_backend"``): what
``MemorySampler.plot()`` hands pandas, checked without matplotlib."""

from __future__ import annotations

from typing import Any

CALLS: list[tuple[Any, str, dict[str, Any]]] = []


def plot(data: Any, kind: str, **kwargs: Any) -> str:
    CALLS.append((data.copy(), kind, kwargs))
    return "drawn"
