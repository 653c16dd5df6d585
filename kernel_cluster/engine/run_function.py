"""``client.run`` on the engine's side: a function on each worker, each bounded by a
timeout that names it.

The function runs on the worker's event loop, as in Dask: one that blocks (sleeps,
waits on a lock) blocks that loop. The wait for it is bounded here, and what the
timeout means for the worker is said in the error: a worker process carries on once
the function returns (its pulse vouches for it meanwhile, engine/pulse.py), while
embedded workers share the engine's loop with the scheduler, which waits with them.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

__all__ = ["RUN_TIMEOUT", "RunTimeoutError", "run_on"]

# seconds ``client.run`` waits for its function on each worker, unless told otherwise
RUN_TIMEOUT = 60.0


class RunTimeoutError(TimeoutError):
    """``client.run``'s function did not return in time (``worker``: where; empty when
    it ran on the engine's own loop, as with embedded workers)."""

    def __init__(self, name: str, timeout: float, worker: str = "") -> None:
        self.name = name
        self.timeout = timeout
        self.worker = worker
        if worker:
            where = (
                f"on worker {worker}. It runs on the worker's event loop (as in Dask) and "
                "blocks it: the worker carries on once it returns (its process vouches for "
                "it meanwhile), and is replaced if its loop stays blocked for "
                "loop_stuck_seconds."
            )
        else:
            where = (
                "on the engine's event loop, which embedded workers share with the "
                "scheduler: nothing else happens on the cluster until it returns."
            )
        super().__init__(
            f"client.run: {name} did not return within {timeout:g} s {where} Pass a larger "
            "timeout= (None waits for ever), or run long work as a task with submit()."
        )

    def __reduce__(self) -> tuple:
        return (RunTimeoutError, (self.name, self.timeout, self.worker))


class _Runs(Protocol):
    async def run(self, peer: str, fn: Any) -> Any: ...


async def run_on(
    source: _Runs, addresses: list[str], fn: Any, timeout: float | None, name: str = ""
) -> dict:
    """``{address: fn()}`` run by ``source`` on each worker at once; the first error is
    raised, and a worker silent for ``timeout`` seconds raises RunTimeoutError."""

    async def on(address: str) -> Any:
        try:
            return await asyncio.wait_for(source.run(address, fn), timeout)
        except TimeoutError:
            raise RunTimeoutError(name or _name_of(fn), timeout or 0, address) from None

    results = await asyncio.gather(*(on(a) for a in addresses))
    return dict(zip(addresses, results, strict=True))


def _name_of(fn: Any) -> str:
    while True:
        inner = getattr(fn, "func", None) or getattr(fn, "fn", None)  # partial, wrappers
        if inner is None or inner is fn:
            break
        fn = inner
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
