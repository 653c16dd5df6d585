"""The old path of the worker's command line (``python -m kernel_cluster.worker_cli``),
kept for scripts that use it; the code is ``kernel_cluster.engine.cli``."""

from ..engine.cli import main

__all__ = ["main"]
