"""``client.profile`` and ``client.profile_metadata``: the workers' statistical profiles.

Each worker keeps its own profile (see ``engine/stack_sampler.py``); these functions
ask the chosen workers, through the DiagnosticsSource, for their samples of a time
window and merge them here, on the client's side, with ``core.profile_tree.merge``.
"""

from __future__ import annotations

from typing import Any

from ...core.keys import key_split
from ...core.profile_tree import Tree, from_flat, merge_into, merge_metadata, new_tree
from ..source import DiagnosticsSource
from .timewindow import resolve_window


def profile(
    source: DiagnosticsSource,
    start: Any = None,
    stop: Any = None,
    key: Any = None,
    prefix: str | None = None,
    workers: Any = None,
) -> Tree:
    """The merged profile tree of ``workers`` (all by default) over ``[start, stop]``.

    ``start`` / ``stop``: timestamps on the scheduler's clock or durations ago
    (``"10s"``); None leaves that side open (both None: everything since the workers
    started, beyond the history's reach). ``key`` or ``prefix`` keeps the samples of
    one task prefix (a key stands for its prefix).
    """
    start_t, stop_t, prefix = resolve_profile_window(source, start, stop, key, prefix)
    rows = source.profiles(
        start=start_t, stop=stop_t, prefix=prefix, workers=_workers(source, workers)
    )
    return merge_into(new_tree(), *(from_flat(r) for r in rows.values()))


def resolve_profile_window(
    source: DiagnosticsSource, start: Any, stop: Any, key: Any, prefix: str | None
) -> tuple[float | None, float | None, str | None]:
    """``(start, stop, prefix)`` as ``profile`` reads them: times on the scheduler's
    clock now (a duration ago becomes a time), a key's prefix for ``key``."""
    start_t, stop_t = _window(source, start, stop)
    return start_t, stop_t, _prefix(key, prefix)


def profile_metadata(
    source: DiagnosticsSource, start: Any = None, stop: Any = None, workers: Any = None
) -> dict[str, Any]:
    """Samples over time, for a timeline under the flame graph: ``{"counts": [(time,
    n)], "keys": {prefix: [(time, n)]}}``, summed over workers per profile cycle
    (times are cycle ends rounded down to the cycle length)."""
    start_t, stop_t = _window(source, start, stop)
    metas = source.profile_metadata(start=start_t, stop=stop_t, workers=_workers(source, workers))
    cycles = [m.cycle_seconds for m in metas.values() if m.cycle_seconds]
    merged: dict[str, Any] = merge_metadata(
        [m.as_dict() for m in metas.values()], max(cycles, default=1.0)
    )
    return merged


def _window(source: DiagnosticsSource, start: Any, stop: Any) -> tuple[float | None, float | None]:
    start_t, stop_t = resolve_window(start, stop, source.now())
    if start_t is not None and stop_t is not None and stop_t < start_t:
        raise ValueError(f"stop={stop!r} is before start={start!r}.")
    return start_t, stop_t


def _prefix(key: Any, prefix: str | None) -> str | None:
    if key is None:
        return prefix
    from_key = key_split(getattr(key, "key", key))  # a Future stands for its key
    if prefix is not None and prefix != from_key:
        raise ValueError(
            f"key={key!r} has prefix {from_key!r}, which is not prefix={prefix!r}; give one."
        )
    return from_key


def _workers(source: DiagnosticsSource, workers: Any) -> list[str] | None:
    """Addresses for ``workers`` (addresses or names, one or a list); None: all."""
    if workers is None:
        return None
    wanted = [workers] if isinstance(workers, str) else list(workers)
    known = source.info().workers
    by_name = {info.name: address for address, info in known.items()}
    out = []
    for w in wanted:
        if w in known:
            out.append(w)
        elif w in by_name:
            out.append(by_name[w])
        else:
            raise ValueError(f"No worker is called {w!r}; the workers are {sorted(known)!r}.")
    return out
