"""kernel-cluster: a task engine in the Jupyter kernel, instrumented end to end."""

from .client import Client, get_client
from .core.scheduler_state import KilledWorker
from .core.spec import GraphError
from .diagnostics.report import performance_report
from .diagnostics.spans import get_annotations, span
from .engine.cluster import KernelCluster
from .engine.config import WorkerConfig
from .engine.meter import context_meter
from .engine.plugins import SchedulerPlugin
from .futures import CancelledError, Future, as_completed, wait
from .jupyter.memory import MemorySampler
from .jupyter.notebook import progress

__version__ = "0.1.0"


def load_ipython_extension(ip) -> None:
    """``%load_ext kernel_cluster``: the ``%%span`` / ``%span`` magics."""
    from .jupyter.magics import register

    register(ip)


__all__ = [
    "CancelledError",
    "Client",
    "Future",
    "GraphError",
    "KernelCluster",
    "KilledWorker",
    "MemorySampler",
    "SchedulerPlugin",
    "WorkerConfig",
    "__version__",
    "as_completed",
    "context_meter",
    "get_annotations",
    "get_client",
    "performance_report",
    "progress",
    "span",
    "wait",
]
