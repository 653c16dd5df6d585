"""What the code running now is annotated with: the current span.

One ContextVar serves client code (``with span(...)``) and task code (the worker
sets it around each task), so a task that submits tasks passes its span on.
"""

from __future__ import annotations

from contextvars import ContextVar

# (name, ids): the span's full tag tuple, and the id of each level from the root
current_span: ContextVar[tuple[tuple[str, ...], tuple[str, ...]] | None] = ContextVar(
    "kernel_cluster_current_span", default=None
)


def get_annotations() -> dict[str, dict[str, tuple[str, ...]]]:
    """``{"span": {"name": (...), "ids": (...)}}`` where a span is active, else ``{}``."""
    current = current_span.get()
    if current is None:
        return {}
    name, ids = current
    return {"span": {"name": name, "ids": ids}}
