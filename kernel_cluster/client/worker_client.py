"""``worker_client()``: Dask's way for a task to submit work and wait for it.

    def parent(n):
        with worker_client() as client:
            return sum(client.gather(client.map(inc, range(n))))

The task's thread slot goes to other tasks for the block (``secede``) and is taken
back after (``rejoin``). Waiting on futures inside a task does this by itself
(engine/secede.py); the block is for code written for Dask, or to hand the slot
over for more than the waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..engine.secede import rejoin, secede
from .client import Client, get_client


@contextmanager
def worker_client(separate_thread: bool = True) -> Iterator[Client]:
    """The client that submitted this task (embedded workers only: a task of a worker
    process has none), with the task seceded for the block unless ``separate_thread``
    is False."""
    client = get_client()
    if not separate_thread:
        yield client
        return
    secede()
    try:
        yield client
    finally:
        rejoin()
