"""The process-wide ``context_meter``: core's ContextMeter on this process's clocks.

Task code uses it as ``from kernel_cluster import context_meter``; engine code
(serialisation, spilling, transfers) records through the same object.
"""

from __future__ import annotations

import time

from ..core.metrics import ContextMeter

context_meter = ContextMeter(wall=time.perf_counter, cpu=time.thread_time)
