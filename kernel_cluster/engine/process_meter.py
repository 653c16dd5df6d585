"""The process-wide ``context_meter``: core's ContextMeter on this process's clocks.

Task code uses it as ``from kernel_cluster import context_meter``; engine code
(serialisation, spilling, transfers) records through the same object.
"""

from __future__ import annotations

import time

from ..core.metrics import ContextMeter


def process_context_meter() -> ContextMeter:
    """This process's ``context_meter``: what a pickled one becomes where it lands."""
    return context_meter


context_meter = ContextMeter(
    wall=time.perf_counter, cpu=time.thread_time, pickle_as=process_context_meter
)
