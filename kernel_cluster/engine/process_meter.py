"""The process-wide ``context_meter``: core's ContextMeter on this process's clocks.

Task code uses it as ``from kernel_cluster import context_meter``; engine code
(serialisation, spilling, transfers) records through the same object. In a task that
a Dask worker runs (the views attached to a Dask cluster), nobody of ours listens,
and what it records goes to ``distributed.metrics.context_meter``: Dask's fine
metrics show it as they would Dask's own.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..core.metrics import ContextMeter


def process_context_meter() -> ContextMeter:
    """This process's ``context_meter``: what a pickled one becomes where it lands."""
    return context_meter


def dask_context_meter() -> Any:
    """Dask's ``context_meter`` while something listens to it (a Dask worker running a
    task in this context), else None; distributed is not imported here."""
    metrics = sys.modules.get("distributed.metrics")
    if metrics is None:
        return None
    meter = getattr(metrics, "context_meter", None)
    callbacks = getattr(meter, "_callbacks", None)
    if callbacks is not None and not callbacks.get():
        return None  # Dask's meter would drop it too
    return meter


context_meter = ContextMeter(
    wall=time.perf_counter,
    cpu=time.thread_time,
    pickle_as=process_context_meter,
    elsewhere=dask_context_meter,
)
