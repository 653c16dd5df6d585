"""A client's futures by key (``FutureRegistry``): the shared state of each key, the
reference counts, the scheduler's reports applied, and the waits on them.

Split from futures.py, which keeps the ``Future`` users hold and the functions that
wait on many (``wait``, ``as_completed``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from ..core.keys import Key
from ..core.scheduler_messages import ReportKey
from ..engine.loop import check_process
from ..engine.secede import while_waiting
from .futures import (
    FAILED,
    CancelledError,
    Future,
    FutureOwner,
    FutureState,
    Latch,
    UserCallback,
    run_callback,
)
from .timeouts import check_timeout, not_done_text, timeout_text


def _wait(event: threading.Event, timeout: float | None) -> bool:
    """``event.wait(timeout)``; a task thread (embedded) gives its slot to other tasks
    meanwhile (engine/secede.py): the ones it waits for may need it."""
    if event.is_set():
        return True
    with while_waiting():
        return event.wait(timeout)


def mark_cancelled(
    st: FutureState, key: Key, reason: str | None = None
) -> list[Callable[[], None]]:
    """Finish ``st`` as cancelled (registry lock held); returns the callbacks to run."""
    st.status = "cancelled"
    st.exception = CancelledError(key, reason)
    st.traceback = None
    if st.event is not None:
        st.event.set()
    callbacks = st.callbacks or []
    st.callbacks = None
    return callbacks


class FutureRegistry:
    """A client's futures by key: one shared state per key, reference counts, and the
    keys whose last future went, for the client to release on the scheduler.

    The client composes one and shares its lock with it; ``schedule_flush()`` (lock
    held) asks the client to send ``releases``. ``tracking`` is False once the client
    stops running: released keys are then nobody's business.
    """

    def __init__(
        self,
        lock: threading.RLock,
        schedule_flush: Callable[[], None],
        unpack: Callable[[Any, Any], tuple[BaseException, Any]],
        defer: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """``unpack(exception, traceback)``: an exception reported as bytes, rebuilt;
        ``defer(fn)``: where the user's done-callbacks run when an outcome arrives from
        the engine (its callback thread); None: right away."""
        self.lock = lock
        self._defer = defer
        # what a task is doing, in words, for a wait that timed out (the client sets it)
        self.describe: Callable[[Key], str] = lambda key: "the task's state is unknown"
        self.states: dict[Key, FutureState] = {}
        self.refcount: dict[Key, int] = {}
        self.releases: list[Key] = []
        self.tracking = True
        self.pid = os.getpid()  # a forked child must not wait on these (check_process)
        self._schedule_flush = schedule_flush
        self._unpack = unpack
        # client.compute's runs of local callbacks still calling hooks, by future
        # state: waiting for such a future waits for its finish hooks too
        self.hook_runs: dict[FutureState, tuple[threading.Event, threading.Thread]] = {}

    # -- reference counting ------------------------------------------------------------

    def inc_ref(self, key: Key) -> None:
        with self.lock:
            self.refcount[key] = self.refcount.get(key, 0) + 1

    def dec_ref(self, key: Key) -> None:
        with self.lock:
            n = self.refcount.get(key, 0) - 1
            if n > 0:
                self.refcount[key] = n
                return
            self.refcount.pop(key, None)
            self.states.pop(key, None)
            if self.tracking:
                self.releases.append(key)
                self._schedule_flush()

    def release_keys(self, keys: list[Key]) -> None:
        with self.lock:
            refcount = self.refcount
            for key in keys:
                n = refcount.get(key, 0) - 1
                if n > 0:
                    refcount[key] = n
                    continue
                refcount.pop(key, None)
                self.states.pop(key, None)
                if self.tracking:
                    self.releases.append(key)
            if self.releases:
                self._schedule_flush()

    def future(self, key: Key, seq: int, client: FutureOwner) -> Future:
        """A future for ``key`` sharing the state of any other future for it (lock held)."""
        state = self.states.get(key)
        if state is None or state.status == "cancelled":
            state = self.states[key] = FutureState(seq)
        return Future(key, client, state)

    def want(self, keys: list[Key], seq: int) -> list[FutureState]:
        """States for ``keys``, each referenced once, without Future objects (lock held):
        ``release_keys`` lets go of them in one go."""
        states = []
        for k in keys:
            st = self.states.get(k)
            if st is None or st.status == "cancelled":
                st = self.states[k] = FutureState(seq)
            self.refcount[k] = self.refcount.get(k, 0) + 1
            states.append(st)
        return states

    # -- outcomes ----------------------------------------------------------------------

    def apply_reports(self, reports: list[ReportKey], seq: int) -> None:
        """The scheduler's ReportKey messages, sent after client event ``seq``."""
        callbacks: list[Callable[[], None]] = []
        with self.lock:
            for r in reports:
                st = self.states.get(r.key)
                if st is None or st.seq > seq:
                    continue  # about a future released (or re-made) since
                if r.status == "lost":
                    st.status = "pending"
                    if st.event is not None:
                        st.event.clear()
                    continue
                st.status = r.status
                if r.exception is not None and not isinstance(r.exception, BaseException):
                    st.exception, st.traceback = self._unpack(r.exception, r.traceback)
                else:
                    st.exception, st.traceback = r.exception, r.traceback
                if st.event is not None:
                    st.event.set()
                if st.callbacks:
                    callbacks.extend(st.callbacks)
                    st.callbacks = None
        defer = self._defer
        for cb in callbacks:
            if defer is not None and type(cb) is UserCallback:
                defer(functools.partial(run_callback, cb))
            else:
                run_callback(cb)

    def detach_cancelled(self, futures: list[Future]) -> list[Callable[[], None]]:
        """Cancel these futures now and detach them from their keys (lock held):
        submitting the same key again makes a fresh state, which the scheduler's (older)
        answer does not touch. Returns the callbacks to run."""
        callbacks: list[Callable[[], None]] = []
        for f in futures:
            if self.states.get(f.key) is f._state:
                del self.states[f.key]
            callbacks.extend(mark_cancelled(f._state, f.key))
        return callbacks

    def cancel_pending(self, reason: str) -> list[Callable[[], None]]:
        """Cancel every future not done (lock held); returns the callbacks to run."""
        callbacks: list[Callable[[], None]] = []
        for key, st in self.states.items():
            if not st.done():
                callbacks.extend(mark_cancelled(st, key, reason))
        return callbacks

    # -- waiting -----------------------------------------------------------------------

    def on_done(self, state: FutureState, callback: Callable[[], None]) -> None:
        with self.lock:
            if not state.done():
                if state.callbacks is None:
                    state.callbacks = []
                state.callbacks.append(callback)
                return
        run_callback(callback)

    def wait_for(
        self, state: FutureState, key: Key, timeout: float | None, asked: float | None = None
    ) -> None:
        """Until the future of ``key`` is done, or ``timeout`` passed: then a
        TimeoutError naming the timeout the user gave (``asked``, where ``timeout`` is
        what is left of it) and what the task is doing."""
        timeout = check_timeout(timeout)
        check_process(self.pid, f"The client of future {key!r}")
        with self.lock:
            if state.done():
                event = None
            else:
                if state.event is None:
                    state.event = threading.Event()
                event = state.event
        if event is not None and not _wait(event, timeout):
            given = timeout if asked is None else asked
            raise TimeoutError(
                f"Future {key!r} is not done after the timeout of {timeout_text(given or 0.0)}: "
                f"{self.describe(key)}. The task goes on; wait again, or cancel it."
            )
        if self.hook_runs:
            self.wait_hooks([state])

    def wait_hooks(self, states: list[FutureState]) -> None:
        """Until the local callbacks following these futures (``client.compute`` in a
        ``with Profiler():``) have run their finish hooks: a profiler's ``results``
        are complete once ``result()`` returns. Not from a hook's own thread."""
        me = threading.current_thread()
        for st in states:
            run = self.hook_runs.get(st)
            if run is not None and run[1] is not me:
                run[0].wait()

    def wait_all(
        self,
        states: list[FutureState],
        fail_fast: bool,
        timeout: float | None = None,
        keys: list[Key] | None = None,
    ) -> None:
        """Until every state is done (or, with ``fail_fast``, one is not "finished");
        past ``timeout`` seconds (checked by the caller), a TimeoutError naming it and
        what the task of the first state not done (``keys``: theirs) is doing.

        One wake-up for the lot: waiting on each in turn costs the engine an event to
        set and this thread a wake-up per result that lands while it sleeps.
        """
        check_process(self.pid, "The client of these futures")
        latch = self.latch(states, fail_fast)
        if latch is not None and not _wait(latch.event, timeout):
            late = [i for i, st in enumerate(states) if not st.done()]
            if late:  # else all done just now
                what = ""
                if keys is not None:
                    what = f"; the first, {keys[late[0]]!r}: {self.describe(keys[late[0]])}"
                raise TimeoutError(
                    f"{not_done_text(len(late), len(states))} after the "
                    f"timeout of {timeout_text(timeout or 0.0)}{what}. The tasks go on; "
                    "gather again, or cancel them."
                )
        if self.hook_runs:
            self.wait_hooks([st for st in states if st.done()])

    def latch(
        self,
        states: list[FutureState],
        fail_fast: bool,
        on_set: Callable[[], None] | None = None,
    ) -> Latch | None:
        """A latch whose event is set (and ``on_set`` called) once every state is done
        (or, with ``fail_fast``, one is not "finished"); None if that is so already."""
        with self.lock:
            pending = [st for st in states if not st.done()]
            if not pending or (fail_fast and any(st.status in FAILED for st in states)):
                return None
            latch = Latch(len(pending), fail_fast, on_set)
            for st in pending:
                if st.callbacks is None:
                    st.callbacks = []
                st.callbacks.append(functools.partial(latch.count_down, st))
        return latch
