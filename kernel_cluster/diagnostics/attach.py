"""Which source a view reads: ``attach()``, the default source, and ``source_of``.

Views are handed a Client, a ``distributed.Client``, a source, or nothing (the
default: the most recent Client, or what ``attach`` named). Resolving that is the
one place that knows every kind of source, so it lives apart from the protocol
(``source.py``), which the sources themselves implement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .source import _MEMBERS, Diagnosable, DiagnosticsSource, HasDiagnostics

logger = logging.getLogger(__name__)

_default_source: DiagnosticsSource | None = None
_watchers: list[Callable[[DiagnosticsSource | None], None]] = []


def set_default_source(source: DiagnosticsSource | None) -> None:
    """The source views use when given no client (the most recent Client sets itself)."""
    global _default_source
    _default_source = source
    for watcher in list(_watchers):
        try:
            watcher(source)
        except Exception:  # a view's failure must not break Client() or close()
            logger.exception("A default-source watcher failed")


def watch_default_source(
    watcher: Callable[[DiagnosticsSource | None], None],
) -> Callable[[], None]:
    """Call ``watcher(source)`` whenever the default source changes (a Client starts or
    closes), so that a view made before any cluster existed can follow one; returns
    the function that stops watching."""
    _watchers.append(watcher)

    def unwatch() -> None:
        if watcher in _watchers:
            _watchers.remove(watcher)

    return unwatch


def default_source() -> DiagnosticsSource:
    if _default_source is None:
        raise ValueError("No client is open; create one with kernel_cluster.Client().")
    return _default_source


def source_of(obj: Diagnosable | None) -> DiagnosticsSource:
    """The source behind a Client (its ``diagnostics``), ``obj`` itself if it is a
    source, the one ``DaskSource`` of a ``distributed.Client``, or the default source
    for None."""
    if obj is None:
        return default_source()
    if isinstance(obj, DiagnosticsSource):
        return obj
    if isinstance(obj, HasDiagnostics):
        return obj.diagnostics
    dask = _dask_source(obj)
    if dask is not None:
        return dask
    raise TypeError(
        "Expected a kernel_cluster Client, a distributed.Client or a DiagnosticsSource, "
        f"got {type(obj).__name__}: {_how_to_read(obj)}"
    )


def _how_to_read(obj: object) -> str:
    """What to hand over instead of ``obj``: the views read clients, not addresses or
    clusters."""
    name = type(obj).__name__
    if isinstance(obj, str):
        return (
            f"for a Dask scheduler at {obj!r}, connect to it first: "
            "kernel_cluster.attach(distributed.Client(address))."
        )
    if name == "KernelCluster":
        return "pass a client of it, kernel_cluster.Client(cluster)."
    if not isinstance(obj, type) and hasattr(obj, "scheduler_address"):  # LocalCluster, ...
        return f"pass a client of it, distributed.Client(cluster), not the {name}."
    missing = [m for m in _MEMBERS if not hasattr(obj, m)]
    return f"it has no {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}."


def _dask_source(obj: object) -> DiagnosticsSource | None:
    """A distributed.Client's DaskSource (one per client), or None for anything else;
    distributed is imported only for an object whose type comes from it."""
    if not type(obj).__module__.startswith("distributed"):
        return None
    from .sources.dask_source import is_dask_client, source_for

    return source_for(obj) if is_dask_client(obj) else None


def attach(client: object) -> DiagnosticsSource:
    """Make ``client`` (a ``distributed.Client``, a kernel_cluster Client, or a source)
    the default source: views made without a client read it, the JupyterLab panels
    follow it, and ``span()`` opens Dask spans while it is a Dask client's."""
    source = source_of(client)  # type: ignore[arg-type]  # checked at run time
    set_default_source(source)
    return source


def default_dask_client() -> object | None:
    """The ``distributed.Client`` behind the default source, if it is a Dask one."""
    client: object | None = getattr(_default_source, "client", None)
    if client is not None and type(_default_source).__name__ == "DaskSource":
        return client
    return None
