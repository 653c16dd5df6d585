"""A worker process's pulse: proof of life that does not wait for its event loop.

Heartbeats travel on the worker's event loop, so a loop kept busy (a ``client.run``
function that sleeps, a large value being stored, a machine short of CPU) stops them,
and the scheduler used to take such a worker for dead and have it killed. A small
thread of the worker process writes the time into a file of its directory instead,
every ``interval`` seconds; the nanny, in the kernel, reads it (``read_pulse``) for a
worker that went silent, and vouches for a process whose pulse is fresh.

A pulse needs the GIL and a running process: a task that holds the GIL in a C loop,
or a process stopped by SIGSTOP, has none, and is replaced as before. So is a worker
whose loop stays blocked for ``stuck_seconds``: the thread then stops beating (and
says why in the worker's log). A loop blocked for a few seconds is named in the log
with the code it is in, so that a slow ``client.run`` function can be found.

The file holds two doubles, native order: the pulse, then the loop's last turn, both
``time.monotonic()`` readings, which are the same clock for every process of the
machine.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import threading
import time
import traceback

__all__ = ["FILE_NAME", "Pulse", "read_pulse"]

logger = logging.getLogger("kernel_cluster.engine.worker")

FILE_NAME = "pulse"
_LAYOUT = struct.Struct("=dd")
# a loop blocked this long is named in the log, with the code it runs
BLOCKED_WARNING = 3.0


class Pulse:
    """The writing side, in the worker process.

    ``loop_turned()`` is called from the event loop (with the heartbeats); ``start``
    starts the thread and ``stop`` ends it.
    """

    def __init__(
        self,
        directory: str,
        *,
        interval: float,
        stuck_seconds: float,
        name: str,
    ) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.interval = interval
        self.stuck_seconds = stuck_seconds
        self.name = name  # the worker's, in the log
        self.loop_seen = time.monotonic()
        self.loop_ident: int | None = None  # the loop's thread, to show what blocks it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._gave_up = False
        os.makedirs(directory, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        self._write(self.loop_seen)

    def loop_turned(self) -> None:
        """The event loop is free (call it on the loop, every heartbeat or so)."""
        self.loop_seen = time.monotonic()
        self.loop_ident = threading.get_ident()
        if self._warned:
            self._warned = False
            logger.warning("Worker %s: its event loop runs again", self.name)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kernel-cluster-pulse", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
            if thread.is_alive():
                return  # it may be writing: leave its file open
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            blocked = now - self.loop_seen
            if blocked > self.stuck_seconds:
                if not self._gave_up:
                    self._gave_up = True
                    logger.error(
                        "Worker %s: its event loop has been blocked for %.0f s (over "
                        "loop_stuck_seconds=%s)%s. It no longer vouches for itself: the "
                        "cluster will replace it.",
                        self.name,
                        blocked,
                        self.stuck_seconds,
                        self._where(),
                    )
                continue  # no pulse: the nanny lets the scheduler drop this worker
            if blocked > max(BLOCKED_WARNING, 4 * self.interval) and not self._warned:
                self._warned = True
                logger.warning(
                    "Worker %s: its event loop has been blocked for %.1f s%s; its heartbeats "
                    "wait, its pulse says it is alive",
                    self.name,
                    blocked,
                    self._where(),
                )
            self._write(now)

    def _where(self) -> str:
        """Where the loop's thread is now: the innermost frames, as text."""
        frame = sys._current_frames().get(self.loop_ident) if self.loop_ident else None
        if frame is None:
            return ""
        lines = traceback.format_stack(frame, limit=3)
        return ", in:\n" + "".join(lines).rstrip()

    def _write(self, now: float) -> None:
        fd = self._fd
        if fd is None:
            return
        try:  # one write of 16 bytes at offset 0: a reader sees the old or the new
            os.pwrite(fd, _LAYOUT.pack(now, self.loop_seen), 0)
        except OSError:  # closed meanwhile: nothing left to prove
            pass


def read_pulse(directory: str) -> tuple[float, float] | None:
    """(pulse, loop's last turn) as ``time.monotonic()`` readings, or None if the worker
    never wrote one (started by hand, or too old to have one)."""
    try:
        with open(os.path.join(directory, FILE_NAME), "rb") as f:
            raw = f.read(_LAYOUT.size)
    except OSError:
        return None
    if len(raw) != _LAYOUT.size:
        return None
    pulse, loop_seen = _LAYOUT.unpack(raw)
    return pulse, loop_seen
