"""The settings a Dask user keeps in ``dask.config`` that this engine honours too.

Precedence, highest first:

1. ``KernelCluster`` keywords (``profile_interval=``, ``profile_cycle_interval=``,
   ``worker_saturation=``) and a ``worker_config=`` given whole;
2. ``dask.config``'s ``distributed.worker.profile.interval``,
   ``distributed.worker.profile.cycle`` and ``distributed.scheduler.worker-saturation``,
   where the user set them (``dask.config.set``, a YAML file, a ``DASK_...``
   environment variable), once dask is imported: the values distributed ships as its
   defaults, which ``import distributed`` puts in the config, do not count;
3. this engine's defaults (10 ms, 1 s, 1.5).

dask is never imported here: where the user's code has not imported it, there is no
setting of theirs to read (importing it would cost every cluster a second).
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["PROFILE_CYCLE", "PROFILE_INTERVAL", "WORKER_SATURATION", "dask_setting"]

PROFILE_INTERVAL = "distributed.worker.profile.interval"
PROFILE_CYCLE = "distributed.worker.profile.cycle"
WORKER_SATURATION = "distributed.scheduler.worker-saturation"


def dask_setting(key: str) -> float | None:
    """The user's value of ``key`` in dask.config, as a number (seconds for the
    profile settings), or None: dask not imported, not set, set to distributed's
    default, or unreadable (logged)."""
    if "dask" not in sys.modules:
        return None
    import dask.config

    value = dask.config.get(key, None)
    if value is None:
        return None
    shipped = dask.config.get(key, None, config=dask.config.merge(*dask.config.defaults))
    if shipped is not None and value == shipped:
        return None
    try:
        return _number(key, value)
    except (TypeError, ValueError) as exc:
        logger.warning("Ignoring dask.config %s = %r: %s", key, value, exc)
        return None


def _number(key: str, value: Any) -> float:
    if key == WORKER_SATURATION:
        number = float(value)  # "inf" too: no queueing
        if not number > 0:
            raise ValueError("worker-saturation must be above 0")
        return number
    from dask.utils import parse_timedelta

    seconds = parse_timedelta(value, default="ms")
    if seconds is None or not 0 < seconds < math.inf:
        raise ValueError("give a positive duration, such as '10ms'")
    return float(seconds)
