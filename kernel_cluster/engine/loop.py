"""The one event-loop thread that drives the scheduler and worker control.

The kernel's own thread never blocks the engine: user calls hand work to this
thread (``call_soon``) and wait for answers (``run``) with a timeout. Nor does user
code called back by the engine (a future's done-callbacks): that runs on a thread of
its own (``callbacks``), in the order it was handed over.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import contextvars
import logging
import os
import selectors
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, TypeVarTuple, overload

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

logger = logging.getLogger(__name__)


class _WakeSelector(selectors.DefaultSelector):
    """Waits on a lock instead of the kernel's selector while nothing but the loop's own
    wake-up socket is registered (embedded workers: no sockets at all).

    Waking a thread blocked on a lock costs a fraction of a wake-up through a socket
    and epoll, and with embedded workers every finished task wakes the loop.
    """

    def __init__(self) -> None:
        super().__init__()
        self._signal = _thread.allocate_lock()
        self._signal.acquire()  # held = no wake-up pending
        self.lock_mode = True  # read by other threads: whether wake() alone suffices

    def wake(self) -> None:
        try:
            self._signal.release()
        except RuntimeError:  # a wake-up is pending already
            pass

    def select(self, timeout: float | None = None) -> list:
        if len(self.get_map()) <= 1:
            self.lock_mode = True
            if timeout is None:
                self._signal.acquire()
            elif timeout > 0:
                self._signal.acquire(True, timeout)
            else:
                self._signal.acquire(False)
            return []
        self.lock_mode = False
        if self._signal.acquire(False):  # woken while still in lock mode: don't sleep
            timeout = 0
        return super().select(timeout)


class _EngineLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._wake_selector = _WakeSelector()
        super().__init__(self._wake_selector)

    def _write_to_self(self) -> None:
        selector = self._wake_selector
        selector.wake()
        if not selector.lock_mode:  # waiting in epoll: it needs the byte on the socket
            super()._write_to_self()  # type: ignore[misc]  # private to asyncio: not in typeshed


def check_process(pid: int, what: str) -> None:
    """``what`` (a cluster, a client) was made in process ``pid``: refuse to use it in
    another, a child forked from it, where its threads do not exist and a wait would
    never end."""
    if os.getpid() != pid:
        raise RuntimeError(
            f"{what} belongs to process {pid}; this is a child forked from it (pid "
            f"{os.getpid()}), where the cluster's threads do not run, so nothing sent to it "
            "would ever be answered. Create a new Client() in the child (a cluster of its "
            "own), or start children with multiprocessing's 'spawn' or 'forkserver' method."
        )


class CallbackThread:
    """Runs user callbacks one after the other on a thread of its own, from ``start``
    until ``stop``.

    A callback that sleeps for a minute delays the callbacks after it, never the
    engine: on the loop it would stop the heartbeats from being read, and the
    scheduler would take every worker for dead (issue 32).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: deque[Callable[[], Any]] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        with self._wake:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def in_thread(self) -> bool:
        """Whether the caller runs on this thread (inside a callback)."""
        return self._thread is threading.current_thread()

    def submit(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` on the callback thread, after those submitted before it."""
        with self._wake:
            if self._stopping:
                return  # closing: nobody is left to be told
            self._queue.append(fn)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if not self._queue:
                    return
                fn = self._queue.popleft()
            try:
                fn()
            except Exception:
                logger.exception("A callback raised; the engine carries on")

    def stop(self, timeout: float = 10) -> None:
        """Run what was submitted, then end the thread (waiting ``timeout`` at most)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class LoopThread:
    def __init__(self, name: str = "kernel-cluster-loop"):
        self.pid = os.getpid()
        self.name = name
        self.loop = _EngineLoop()
        # user callbacks (futures' done-callbacks) run here, never on the loop
        self.callbacks = CallbackThread(f"{name}-callbacks")
        self.callbacks.start()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread; safe from any thread.

        In a context of its own: asyncio would run it in a copy of the caller's, and a
        caller inside a task would hand the engine that task's metrics listener.
        """
        check_process(self.pid, f"The engine loop {self.name}")
        self._check_running()
        self.loop.call_soon_threadsafe(fn, *args, context=contextvars.Context())

    # a coroutine function's result is what its coroutine returns, a function's its own
    @overload
    def run(
        self,
        fn: Callable[[*Ts], Coroutine[Any, Any, T]],
        *args: *Ts,
        timeout: float | None = None,
    ) -> T: ...

    @overload
    def run(self, fn: Callable[[*Ts], T], *args: *Ts, timeout: float | None = None) -> T: ...

    def run(self, fn: Callable[[*Ts], Any], *args: *Ts, timeout: float | None = None) -> Any:
        """Run ``fn(*args)`` (a function or coroutine function) on the loop and wait for it."""
        check_process(self.pid, f"The engine loop {self.name}")
        if self.in_loop_thread():
            raise RuntimeError(
                "This call blocks until the engine answers and cannot be made from the engine's "
                "own event loop; use the asynchronous API there."
            )
        future = self.submit(fn, *args)
        try:
            return future.result(timeout)
        except TimeoutError:  # concurrent.futures' is the builtin, as ``fn``'s own may be
            if future.done():
                raise  # ``fn`` itself raised it
            raise TimeoutError(f"The engine did not answer within {timeout} s.") from None

    def submit(self, fn: Callable[[*Ts], Any], *args: *Ts) -> concurrent.futures.Future[Any]:
        """Start ``fn(*args)`` (a function or coroutine function) on the loop; its outcome
        lands in the returned future (``asyncio.wrap_future`` awaits it in another
        event loop, without blocking that one)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:
                future.set_exception(exc)
                return
            if asyncio.iscoroutine(result):
                task = self.loop.create_task(result)

                def done(t: asyncio.Task[Any]) -> None:
                    if t.cancelled():
                        future.cancel()
                    elif t.exception() is not None:
                        future.set_exception(t.exception())
                    else:
                        future.set_result(t.result())

                task.add_done_callback(done)
            else:
                future.set_result(result)

        self._check_running()
        self.loop.call_soon_threadsafe(start, context=contextvars.Context())
        return future

    def _check_running(self) -> None:
        """A RuntimeError that says what happened, rather than asyncio's "Event loop is
        closed", for a call after the cluster closed (a view of a closed cluster)."""
        if self.loop.is_closed() or not self._thread.is_alive():
            raise RuntimeError(
                f"The engine ({self.name}) has stopped: its cluster was closed, and has "
                "nothing more to run or show. Start a new KernelCluster (or Client()) for "
                "more work; what the views showed before is gone with it."
            )

    def stop(self, timeout: float = 10) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        self.callbacks.stop(timeout)
