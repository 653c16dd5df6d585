"""The asynchronous client: ``Client(asynchronous=True)``, for a running event loop.

    async with Client(asynchronous=True) as client:      # or: client = await Client(...)
        future = client.submit(inc, 1)
        await future                                      # 2
        await client.gather(client.map(inc, range(10)))   # [1, ..., 10]
        await client.compute(collection)                  # its value

As distributed's: submitting (``submit``, ``map``, ``compute``, ``persist``) returns
at once, as it does synchronously; what waits returns an awaitable instead
(``gather``, ``get``, ``compute(sync=True)``, ``Future.result()``,
``scheduler_info``, ``run``, ``run_on_scheduler``, ``register_plugin``,
``unregister_plugin``, ``get_task_stream``, ``profile``, ``restart``, ``close``), and
none of them blocks the loop: futures wake it from the engine's thread, values come
through ``asyncio.wrap_future``, and the few blocking calls (starting a cluster of
worker processes, closing it, a plugin's registration) run in a thread. The views
(``fine_metrics``, ``spans``, the widgets, ``MemorySampler``) read the engine as for a
synchronous client; ``async with ms.sample(...)`` samples from a thread.

The submission code is the synchronous client's (submission.py, graph_packing.py):
this mixin only changes how waiting is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar, cast

from ..core.keys import Key
from .futures import FAILED, Future, FutureState, raise_if_failed, until_done
from .graph_packing import collect_futures, rebuild
from .results import Results
from .submission import Submission
from .timeouts import check_timeout, not_done_text, timeout_text
from .views import Views

T = TypeVar("T")
Self = TypeVar("Self", bound="Asynchronous")

__all__ = ["Asynchronous"]


def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Coroutine[Any, Any, T]:
    return asyncio.to_thread(fn, *args, **kwargs)


class Asynchronous(Submission, Results, Views):
    """What makes ``client.AsyncClient`` asynchronous; mixed in before ``Client``, whose
    methods (``_start``, ``run``, ``close``, ...) it reaches through ``super()``."""

    asynchronous = True

    # -- starting and stopping ----------------------------------------------------------

    def __await__(self: Self) -> Generator[Any, None, Self]:
        return self._started().__await__()

    async def _started(self: Self) -> Self:
        if self.status == "newly-created":  # the first await starts it; others wait on it
            self.status = "starting"
            self._starting = asyncio.ensure_future(asyncio.to_thread(cast(Any, self)._start))
        starting: asyncio.Future[None] | None = getattr(self, "_starting", None)
        if starting is not None:
            try:
                await asyncio.shield(starting)
            except BaseException:
                self.status = "closed"
                raise
        return self

    async def __aenter__(self: Self) -> Self:
        return await self._started()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def close(self) -> Coroutine[Any, Any, None]:
        return _in_thread(cast(Any, super()).close)

    def _check_running(self) -> None:
        if self.status in ("newly-created", "starting"):
            raise RuntimeError(
                f"{self.id} is not started: await it first, `client = await "
                "Client(asynchronous=True)` or `async with Client(asynchronous=True) as client:`."
            )
        super()._check_running()

    # -- waiting, without blocking the loop -------------------------------------------

    def gather(self, futures: Any, errors: str = "raise", timeout: float | None = None) -> Any:
        """An awaitable of what ``Client.gather`` returns."""
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors={errors!r}: use 'raise' or 'skip'.")
        return self._gather(futures, errors, check_timeout(timeout))

    async def _gather(self, futures: Any, errors: str, timeout: float | None) -> Any:
        flat: list[Future] = []
        collect_futures(futures, flat)
        states = [f._state for f in flat]
        try:
            await asyncio.wait_for(until_done(self, states, errors == "raise"), timeout)
        except TimeoutError:
            late = [f.key for f in flat if not f.done()]
            if late:  # else all done just now
                doing = await self._describe_task_async(late[0])
                raise TimeoutError(
                    f"{not_done_text(len(late), len(flat))} after the "
                    f"timeout of {timeout_text(timeout or 0.0)}; the first, {late[0]!r}: "
                    f"{doing}. The tasks go on; gather again, or cancel them."
                ) from None
        good: list[Key] = []
        failed: tuple[FutureState, Key] | None = None
        for f in flat:
            status = f._state.status
            if status == "finished":
                good.append(f.key)
            elif errors == "raise" and status in FAILED:
                failed = f._state, f.key
                break
        if failed is not None:
            del futures, flat  # the traceback keeps this frame (see Future.result)
            st, key = failed
            raise_if_failed([key], [st])
        data = await self._gather_keys_async(list(dict.fromkeys(good))) if good else {}
        return rebuild(futures, data)

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        """An awaitable of what ``Client.get`` returns (the graph runs as it would)."""
        return _in_thread(super().get, dsk, keys, **kwargs)

    def compute(
        self,
        collections: Any,
        optimize_graph: bool = True,
        sync: bool = False,
        workers: Any = None,
        allow_other_workers: bool = False,
        retries: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Futures at once, as ``Client.compute`` (``await`` each, or ``gather``); with
        ``sync=True`` an awaitable of the values."""
        futures = super().compute(
            collections, optimize_graph, False, workers, allow_other_workers, retries, **kwargs
        )
        if sync:
            return self.gather(futures)
        return futures

    # -- what waits on the engine: in a thread, which waits for its answer -----------------

    def scheduler_info(self) -> Any:
        return _in_thread(super().scheduler_info)

    def get_task_stream(self, *args: Any, **kwargs: Any) -> Any:
        return _in_thread(super().get_task_stream, *args, **kwargs)

    def profile(self, *args: Any, **kwargs: Any) -> Any:
        return _in_thread(super().profile, *args, **kwargs)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return _in_thread(cast(Any, super()).run, fn, *args, **kwargs)

    def run_on_scheduler(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return _in_thread(cast(Any, super()).run_on_scheduler, fn, *args, **kwargs)

    def register_plugin(self, plugin: Any, name: str | None = None) -> Any:
        return _in_thread(cast(Any, super()).register_plugin, plugin, name)

    def unregister_plugin(self, name: str) -> Any:
        return _in_thread(cast(Any, super()).unregister_plugin, name)

    def restart(self) -> Any:
        return _in_thread(cast(Any, super()).restart)

    def __repr__(self) -> str:
        return (
            f"<AsyncClient {self.id} {self.status}>"
            if self.status
            in (
                "newly-created",
                "starting",
            )
            else super().__repr__()
        )
