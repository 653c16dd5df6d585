"""The user's door: ``Client`` and the default cluster, futures, and what a
submission sends (graph packing, call keys, dask graphs).

A submission goes down the layers once: the client packs it; the local
diagnostics, if any are active, follow it; the engine runs it.
"""

from .client import Client, get_client
from .futures import CancelledError, Future, as_completed, wait

__all__ = ["CancelledError", "Client", "Future", "as_completed", "get_client", "wait"]
