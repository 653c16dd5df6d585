"""Results: ``gather`` (and each future's ``result()``) fetch values from the
workers; ``cancel`` stops what is not finished."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, TypeVar, overload

from ..core.keys import Key
from ..core.scheduler_messages import ClientCancelledKeys
from .base import ClientBase
from .futures import FAILED, Future, FutureState, raise_if_failed, run_callback, task_error
from .graph_packing import collect_futures, rebuild
from .timeouts import check_timeout

K = TypeVar("K")


class Results(ClientBase):
    """Values back from the cluster, and cancellation."""

    @overload
    def gather(
        self, futures: list[Any], errors: str = ..., timeout: float | None = ...
    ) -> list[Any]: ...
    @overload
    def gather(
        self, futures: tuple[Any, ...], errors: str = ..., timeout: float | None = ...
    ) -> tuple[Any, ...]: ...
    @overload
    def gather(
        self, futures: dict[K, Any], errors: str = ..., timeout: float | None = ...
    ) -> dict[K, Any]: ...
    @overload
    def gather(self, futures: Any, errors: str = ..., timeout: float | None = ...) -> Any: ...

    def gather(self, futures: Any, errors: str = "raise", timeout: float | None = None) -> Any:
        """Values for a future, or a (nested) list / tuple / dict of futures: the same
        structure with each future replaced by its value.

        ``errors="skip"`` leaves out failed and cancelled futures instead of raising.
        ``timeout``: seconds to wait for them (None: for ever), then a TimeoutError that
        says what the first one not done is doing; the tasks go on.
        """
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors={errors!r}: use 'raise' or 'skip'.")
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        flat: list[Future] = []
        collect_futures(futures, flat)
        states = [f._state for f in flat]
        self._wait_all(states, errors == "raise", timeout, [f.key for f in flat])
        good = []
        failed: tuple[FutureState, Key] | None = None
        for f in flat:
            status = f._state.status
            if status == "finished":
                good.append(f.key)
            elif errors == "raise" and status in FAILED:  # others may still be pending
                failed = f._state, f.key
                break
        if failed is not None:
            # the traceback keeps this frame: let go of the futures first (see Future.result)
            del futures, flat, f
            st, key = failed
            raise_if_failed([key], [st])
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        data = self._gather_keys(list(dict.fromkeys(good)), left) if good else {}
        return rebuild(futures, data)

    def _gather_keys(self, keys: list[Key], timeout: float | None = None) -> dict[Key, Any]:
        """The values of ``keys``; ``timeout``: seconds to wait for values being computed
        again (their worker died), then TimeoutError."""
        self._check_gather(keys)
        self._check_running()
        if timeout is None:
            data, missing = self._loop.run(self._scheduler.gather, keys)
        else:  # the engine's own answer says why; ours only if its loop is stalled
            deadline = time.monotonic() + timeout
            data, missing = self._loop.run(
                self._scheduler.gather, keys, deadline, timeout=timeout + 1.0
            )
        return self._fetched(data, missing)

    async def _gather_keys_async(self, keys: list[Key]) -> dict[Key, Any]:
        """``_gather_keys`` awaited in another event loop (an asynchronous client's)."""
        self._check_gather(keys)
        self._check_running()
        future = self._loop.submit(self._scheduler.gather, keys)
        data, missing = await asyncio.wrap_future(future)
        return self._fetched(data, missing)

    def _check_gather(self, keys: list[Key]) -> None:
        if self.status != "running":
            raise RuntimeError(
                f"Cannot fetch the result of {keys[0]!r}: {self.id} is closed, and the results "
                "it held were released with it. Gather what you need before client.close(), "
                "or compute it again with a new Client()."
            )

    def _fetched(self, data: dict[Key, Any], missing: list[Key]) -> dict[Key, Any]:
        """The values fetched; an error naming what is missing, if anything is."""
        if missing:
            with self._lock:
                erred = [self._futures.states.get(k) for k in missing]
            for st in erred:  # e.g. a result that turned out not to be serialisable
                if st is not None and st.status == "error" and st.exception is not None:
                    raise task_error(st)
            raise KeyError(
                f"{len(missing)} results are no longer on the cluster (first: {missing[0]!r}); "
                "they were released or their worker was lost."
            )
        return data

    def cancel(self, futures: Future | Iterable[Future]) -> None:
        """Stop these tasks (and whatever depends on them) if they have not finished."""
        fs: list[Any]  # checked below
        if isinstance(futures, Future):
            fs = [futures]
        else:
            try:
                fs = list(futures)
            except TypeError:
                fs = [futures]
        for f in fs:
            if not isinstance(f, Future):
                raise TypeError(
                    f"cancel() takes a Future or a list of Futures, got {type(f).__name__} "
                    f"{f!r}; to cancel by key, keep the future that submit() returned."
                )
        keys = [f.key for f in fs]
        if not keys or self.status != "running":
            return
        with self._lock:
            self._enqueue(ClientCancelledKeys(self.id, keys))
            callbacks = self._futures.detach_cancelled(fs)
        for cb in callbacks:
            run_callback(cb)
