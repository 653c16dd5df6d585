"""PeriodicThread: a daemon thread calling a function every ``interval`` seconds.

One helper for the views' background loops (``memory_sampler.Periodic``,
``jupyter.publisher.Poller``). It lives in diagnostics so that jupyter may import it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Pause", "PeriodicThread"]

# pause(stop, seconds): wait until ``seconds`` have passed or ``stop`` is set; True if set
Pause = Callable[[threading.Event, float], bool]


class PeriodicThread:
    """Calls ``step()`` every ``interval`` seconds until ``stop()``, or until ``step``
    returns False. ``pause`` is how it waits between calls (None: ``stop.wait``);
    tests pass one driven by their clock instead of sleeping."""

    def __init__(
        self,
        step: Callable[[], object],
        interval: float,
        name: str,
        pause: Pause | None = None,
    ) -> None:
        self.step = step
        self.interval = interval
        self._pause: Pause = pause or threading.Event.wait
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self._pause(self._stop, self.interval):
            if self.step() is False:
                return

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def request_stop(self) -> None:
        """Ask the thread to end after its current call; ``join`` waits for that."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (not from the thread itself, which cannot)."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def stop(self, timeout: float | None = None) -> None:
        self.request_stop()
        self.join(timeout)
