"""The old path of ``visualize`` (``from kernel_cluster.diagnostics.local_plots import
visualize``), kept for code that uses it; it lives in ``kernel_cluster.local_diagnostics``."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from ..local_diagnostics import plots

    return getattr(plots, name)
