"""kernel-cluster: a task engine in the Jupyter kernel, instrumented end to end."""

from .client.client import Client, get_client
from .client.futures import CancelledError, Future, as_completed, wait
from .client.runs import attach, compare
from .client.worker_client import worker_client
from .core.scheduler_state import KilledWorker
from .core.spec import GraphError
from .diagnostics.history import history
from .diagnostics.pages.report import performance_report
from .diagnostics.pages.task_stream_page import get_task_stream
from .diagnostics.spans import get_annotations, span
from .engine.cluster import KernelCluster
from .engine.config import WorkerConfig
from .engine.plugins import SchedulerPlugin
from .engine.process_meter import context_meter
from .engine.secede import rejoin, secede
from .jupyter import lab as _lab
from .jupyter.lab import show
from .jupyter.memory_chart import MemorySampler
from .jupyter.notebook import progress

__version__ = "0.1.0"

# the local diagnostics (issue 21), imported on first use
_LAZY = {
    "Callback": "kernel_cluster.local_diagnostics.callbacks",
    "CacheProfiler": "kernel_cluster.local_diagnostics.profilers",
    "Profiler": "kernel_cluster.local_diagnostics.profilers",
    "ProgressBar": "kernel_cluster.local_diagnostics.progress_bar",
    "ResourceProfiler": "kernel_cluster.local_diagnostics.profilers",
    "fine_metrics": "kernel_cluster.diagnostics.queries.fine_metrics",  # pandas
    "get_sync": "kernel_cluster.local_diagnostics.sync",
    "sizeof": "kernel_cluster.core.sizeof",
    "visualize": "kernel_cluster.local_diagnostics.plots",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def load_ipython_extension(ip) -> None:
    """``%load_ext kernel_cluster``: the ``%%span`` / ``%span`` magics."""
    from .jupyter.magics import register

    register(ip)
    _lab.register(_lab_controls())


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the prebuilt JupyterLab extension lies (for ``jupyter labextension develop``)."""
    return [{"src": "labextension", "dest": "@kernel-cluster/lab"}]


def _lab_controls():
    """What the JupyterLab sidebar's cluster controls call (jupyter/ cannot make clients)."""
    from .client.lab_controls import LabControls

    return LabControls()


# in a Jupyter kernel: answer the JupyterLab panels when they ask (elsewhere: nothing).
# No thread and no comm here: the channel starts when the browser opens it, on
# %load_ext kernel_cluster, on the first view or on show()
_lab.set_controls(_lab_controls)
_lab.register_target()


__all__ = [
    "CacheProfiler",
    "Callback",
    "CancelledError",
    "Client",
    "Future",
    "GraphError",
    "KernelCluster",
    "KilledWorker",
    "MemorySampler",
    "Profiler",
    "ProgressBar",
    "ResourceProfiler",
    "SchedulerPlugin",
    "WorkerConfig",
    "__version__",
    "as_completed",
    "attach",
    "compare",
    "context_meter",
    "fine_metrics",
    "get_annotations",
    "get_client",
    "get_sync",
    "get_task_stream",
    "history",
    "performance_report",
    "progress",
    "rejoin",
    "secede",
    "show",
    "sizeof",
    "span",
    "visualize",
    "wait",
    "worker_client",
]
