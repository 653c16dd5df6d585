"""Futures: the client's handle on a remote result, and the ways to wait on many.

All futures a client holds for one key share one ``FutureState``. The state is
changed by scheduler reports on the engine's loop thread and read by user
threads; one lock per client keeps the two in step. A ``threading.Event`` is only
made when somebody actually waits, which keeps 10,000 futures cheap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, NamedTuple, NoReturn, Protocol

from ..core.keys import Key
from ..engine.secede import while_waiting
from .timeouts import check_timeout, not_done_text, timeout_text


def task_error(state: Any) -> BaseException:
    """The erred task's exception to raise, with the task's traceback.

    A copy when it can be made: a raised exception collects every frame it crosses
    on its way to the user's ``except``, and those frames keep their locals (dask's
    ``compute`` holds the collection, a function holds its future). Raising the object
    the state keeps would make that state keep those futures, and so itself, for good.
    """
    exc: BaseException = state.exception
    try:
        raised = copy.copy(exc)
    except Exception:  # its __init__ takes other arguments than its args: bypass it
        try:
            raised = type(exc).__new__(type(exc), *exc.args)
            raised.args = exc.args
            raised.__dict__.update(getattr(exc, "__dict__", {}))
        except Exception:
            raised = exc
    if type(raised) is not type(exc):
        raised = exc
    elif raised is not exc:
        raised.__cause__ = exc.__cause__
        raised.__context__ = exc.__context__
        raised.__suppress_context__ = exc.__suppress_context__
    return raised.with_traceback(state.traceback)


class FutureOwner(Protocol):
    """What a future asks of its client (``client.Client``): the client imports this
    module, never the other way round."""

    def _inc_ref(self, key: Key) -> None: ...
    def _dec_ref(self, key: Key) -> None: ...
    def _wait_for(
        self, state: FutureState, key: Key, timeout: float | None, asked: float | None = None
    ) -> None: ...
    def _gather_keys(self, keys: list[Key], timeout: float | None = None) -> dict[Key, Any]: ...
    async def _gather_keys_async(self, keys: list[Key]) -> dict[Key, Any]: ...
    def _describe_task(self, key: Key) -> str: ...
    async def _describe_task_async(self, key: Key) -> str: ...
    def _on_done(self, state: FutureState, callback: Callable[[], None]) -> None: ...

    asynchronous: bool  # whether result() returns an awaitable

    def cancel(self, futures: Future | Iterable[Future]) -> None: ...


DONE = frozenset({"finished", "error", "cancelled"})
FAILED = frozenset({"error", "cancelled"})


class CancelledError(concurrent.futures.CancelledError):
    """The future was cancelled, or its client closed, before a result existed."""

    def __init__(self, key: Key, reason: str | None = None):
        self.key = key
        self.reason = reason
        super().__init__(f"Future {key!r} was cancelled" + (f": {reason}" if reason else "."))

    def __reduce__(self) -> tuple[type[CancelledError], tuple[Key, str | None]]:
        return (CancelledError, (self.key, self.reason))


def _cancelled(state: FutureState, key: Key) -> CancelledError:
    """The error to raise for a cancelled future: the one that says why, if known."""
    exc = state.exception
    return exc if isinstance(exc, CancelledError) else CancelledError(key)


def raise_if_failed(keys: Iterable[Key], states: Iterable[FutureState]) -> None:
    """Raise the first failure among ``states``: its task's own exception (a copy, see
    ``task_error``), with the traceback it had on the worker, or the cancellation
    (the reason, if known)."""
    for key, state in zip(keys, states):
        if state.status == "error":
            assert state.exception is not None
            raise task_error(state)
        if state.status == "cancelled":
            raise _cancelled(state, key)


class FutureState:
    __slots__ = ("callbacks", "event", "exception", "seq", "status", "traceback")

    def __init__(self, seq: int):
        self.status = "pending"
        self.exception: BaseException | None = None
        self.traceback: Any = None
        self.event: threading.Event | None = None
        self.callbacks: list[Callable[[], None]] | None = None
        self.seq = seq  # the client event that created it: older reports do not apply

    def done(self) -> bool:
        return self.status in DONE


class Latch:
    """Wakes a thread waiting on many futures once: when all are done, or (``fail_fast``)
    when one fails. ``count_down`` is their done-callback (engine thread, or the thread
    that cancels)."""

    __slots__ = ("_lock", "event", "fail_fast", "n", "on_set")

    def __init__(self, n: int, fail_fast: bool, on_set: Callable[[], None] | None = None):
        self.n = n
        self.fail_fast = fail_fast
        self.event = threading.Event()
        self._lock = threading.Lock()
        self.on_set = on_set  # called once, when the event is set

    def count_down(self, state: FutureState) -> None:
        with self._lock:
            self.n -= 1
            last = self.n == 0
        if last or (self.fail_fast and state.status in FAILED):
            with self._lock:
                first = not self.event.is_set()
                self.event.set()
            if first and self.on_set is not None:
                self.on_set()


class Future:
    """A result that will exist on a worker; ``result()`` brings it here."""

    __slots__ = ("__weakref__", "_state", "client", "key")

    # dask's protocol for other schedulers' futures: in a dask graph or a delayed call
    # a future stands for its key's value, as distributed's do
    __dask_future__ = True

    def __dask_tokenize__(self) -> tuple[str, Key]:
        return ("kernel_cluster.Future", self.key)

    def __init__(self, key: Key, client: FutureOwner, state: FutureState):
        self.key = key
        self.client = client
        self._state = state
        client._inc_ref(key)

    def __del__(self) -> None:
        try:
            self.client._dec_ref(self.key)
        except Exception:  # interpreter shutdown
            pass

    @property
    def status(self) -> str:
        return self._state.status

    def done(self) -> bool:
        return self._state.status in DONE

    def result(self, timeout: float | None = None) -> Any:
        """The value, or the task's exception re-raised with the user's traceback.

        A ``TimeoutError`` leaves the task running. A future of an asynchronous client
        returns an awaitable instead (``await future`` works for any future).
        """
        if self.client.asynchronous:
            return self._result_async(timeout)
        try:
            timeout = check_timeout(timeout)
            deadline = None if timeout is None else time.monotonic() + timeout
            self.client._wait_for(self._state, self.key, timeout)
            status = self._state.status
            if status == "error":
                raise task_error(self._state)
            if status == "cancelled":
                raise _cancelled(self._state, self.key)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self.client._gather_keys([self.key], left)[self.key]
        finally:
            # A raised task error keeps this frame in its traceback, and the error object
            # is shared with the scheduler: holding the future here would keep its key
            # wanted for good once the user lets go of it (concurrent.futures does this too).
            del self

    def __await__(self) -> Generator[Any, None, Any]:
        """``await future``: its value, waited for without blocking the event loop."""
        return self._result_async().__await__()

    async def _result_async(self, timeout: float | None = None) -> Any:
        timeout = check_timeout(timeout)  # an infinite one waits as None does
        state, key, client = self._state, self.key, self.client
        try:
            await asyncio.wait_for(until_done(client, [state], False), timeout)
        except TimeoutError:
            doing = await client._describe_task_async(key)
            raise TimeoutError(
                f"Future {key!r} is not done after the timeout of {timeout_text(timeout or 0.0)}: "
                f"{doing}. "
                "The task goes on; await it again, or cancel it."
            ) from None
        if state.status == "error":
            raise task_error(state)
        if state.status == "cancelled":
            raise _cancelled(state, key)
        return (await client._gather_keys_async([key]))[key]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.client._wait_for(self._state, self.key, timeout)
        if self._state.status == "cancelled":
            raise _cancelled(self._state, self.key)
        return self._state.exception

    def traceback(self, timeout: float | None = None) -> Any:
        self.client._wait_for(self._state, self.key, timeout)
        return self._state.traceback

    def cancel(self) -> None:
        self.client.cancel([self])

    def cancelled(self) -> bool:
        return self._state.status == "cancelled"

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call ``fn(future)`` once the future is done: now if it is, else on the
        cluster's callback thread (never on the engine's loop, which a slow callback
        would stall)."""
        self.client._on_done(self._state, UserCallback(fn, self))

    def __repr__(self) -> str:
        return f"<Future: {self._state.status}, key: {self.key!r}>"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"Future {self.key!r} cannot be pickled; pass it as an argument to submit() and "
            "the task receives its value."
        )


async def until_done(owner: FutureOwner, states: list[FutureState], fail_fast: bool) -> None:
    """In a running event loop, until every state is done (or, with ``fail_fast``, one
    has failed), without blocking the loop: the engine's thread wakes it."""
    pending = [st for st in states if not st.done()]
    if not pending or (fail_fast and any(st.status in FAILED for st in states)):
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    left = [len(pending)]
    lock = threading.Lock()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def one_done(st: FutureState) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last or (fail_fast and st.status in FAILED):
            try:
                loop.call_soon_threadsafe(wake)
            except RuntimeError:  # the waiting loop has closed: nobody to wake
                pass

    for st in pending:
        owner._on_done(st, functools.partial(one_done, st))
    await waiter


class DoneAndNotDone(NamedTuple):
    done: set[Future]
    not_done: set[Future]


def wait(
    fs: Future | Iterable[Future],
    timeout: float | None = None,
    return_when: str = "ALL_COMPLETED",
) -> DoneAndNotDone:
    """Block until all (or the first, with ``return_when="FIRST_COMPLETED"``) are done."""
    futures = [fs] if isinstance(fs, Future) else list(fs)
    for f in futures:
        if not isinstance(f, Future):
            raise TypeError(
                f"wait() takes a future or futures (what submit, map and compute return), "
                f"got {type(f).__name__} {f!r}."
            )
    if return_when not in ("ALL_COMPLETED", "FIRST_COMPLETED"):
        raise ValueError(f"return_when={return_when!r}: use 'ALL_COMPLETED' or 'FIRST_COMPLETED'.")
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    if return_when == "ALL_COMPLETED":
        try:
            for f in futures:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                f.client._wait_for(f._state, f.key, left, timeout)
        except TimeoutError as exc:
            late = [f for f in futures if not f.done()]
            if len(futures) == 1 or not late:
                raise
            one = late[0]
            raise TimeoutError(
                f"{not_done_text(len(late), len(futures))} after the timeout of "
                f"{timeout_text(timeout or 0.0)}; the first, {one.key!r}: "
                f"{one.client._describe_task(one.key)}. The tasks go on; wait again, "
                "or cancel them."
            ) from exc.__cause__
    elif futures and not any(f.done() for f in futures):
        first = as_completed(futures)
        try:
            next(first.iter(timeout, again="wait again"))
        except StopIteration:
            pass
    done = {f for f in futures if f.done()}
    return DoneAndNotDone(done, set(futures) - done)


class as_completed:
    """Iterate over futures in the order they finish; more can be ``add``-ed meanwhile."""

    def __init__(self, futures: Iterable[Future] = (), with_results: bool = False):
        self._queue: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self._pending = 0
        self._added: list[Future] = []  # to say what one not done is doing, on a timeout
        self._lock = threading.Lock()
        self.with_results = with_results
        for f in futures:
            self.add(f)

    def add(self, future: Future) -> None:
        if not isinstance(future, Future):
            raise TypeError(
                f"as_completed() takes futures (what submit, map and compute return), got "
                f"{type(future).__name__} {future!r}."
            )
        with self._lock:
            self._pending += 1
            self._added = [f for f in self._added if not f.done()]
            self._added.append(future)
        future.client._on_done(future._state, lambda: self._queue.put(future))

    def count(self) -> int:
        return self._pending

    def is_empty(self) -> bool:
        return self._pending == 0

    def iter(self, timeout: float | None = None, again: str = "iterate again") -> Iterator[Any]:
        """The futures as they finish (with ``with_results``: ``(future, result)``
        pairs); ``TimeoutError`` if none finishes within ``timeout`` seconds (its
        advice: ``again``, or cancel them)."""
        timeout = check_timeout(timeout)
        while True:
            with self._lock:
                if self._pending == 0:
                    return
            try:
                with while_waiting():  # a task waiting here lets others have its thread
                    future = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise self._timed_out(timeout, again) from None
            with self._lock:
                self._pending -= 1
            if self.with_results:
                yield future, future.result()
            else:
                yield future

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    def _timed_out(self, timeout: float | None, again: str) -> TimeoutError:
        """No future finished within ``timeout``: say so, and what the task of the
        first one not done is doing (as ``result`` and ``wait`` do)."""
        with self._lock:
            late = [f for f in self._added if not f.done()]
        given = timeout_text(timeout or 0.0)
        if not late:
            return TimeoutError(f"No future finished within the timeout of {given}.")
        first = late[0]
        doing = first.client._describe_task(first.key)
        if len(late) == 1:
            return TimeoutError(
                f"Future {first.key!r} did not finish within the timeout of {given}: "
                f"{doing}. The task goes on; {again}, or cancel it."
            )
        return TimeoutError(
            f"None of the {len(late)} futures left finished within the timeout of {given}; "
            f"the first, {first.key!r}: {doing}. The tasks go on; {again}, or cancel them."
        )


class UserCallback:
    """A done-callback the user added: the registry hands it to ``defer`` rather than
    run it on the engine's loop. (The engine's own callbacks, such as a ``Latch``'s,
    are quick and run where the outcome lands.)"""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[Future], Any], future: Future) -> None:
        self.fn = fn
        self.future = future

    def __call__(self) -> None:
        self.fn(self.future)


def run_callback(cb: Callable[[], None]) -> None:
    try:
        cb()
    except Exception:
        import logging

        logging.getLogger("kernel_cluster.client").exception("A future's done-callback raised")
