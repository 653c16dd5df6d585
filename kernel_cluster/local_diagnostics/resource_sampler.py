"""The ResourceProfiler's sampler: a process of its own, reading ``psutil``.

Started by ``ResourceProfiler`` as ``python <this file> <pid> <dt>`` (a script, so
it imports psutil alone, not the package): every ``dt`` seconds it writes one line,
``time memory_MB cpu_percent``, for process ``pid`` and all its descendants (the
worker processes) but itself. Being another process, it samples on time even
while the computing process holds the GIL.

It ends when its standard input reaches end of file: the profiler closes it when
done, and the system closes it when the profiler's process dies, however it dies.
It also ends if ``pid`` is gone. It ignores SIGINT: a Ctrl-C in the terminal is
for the computation; the profiler then stops it.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

import psutil


def _family(root: psutil.Process, cache: dict[int, psutil.Process]) -> list[psutil.Process]:
    """``root`` and its descendants but this process, reusing the Process objects
    (their CPU percent is measured since the previous call on the same object)."""
    me = os.getpid()
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = [root]
    out = []
    for p in procs:
        if p.pid == me:
            continue
        out.append(cache.setdefault(p.pid, p))
    return out


def sample(root: psutil.Process, cache: dict[int, psutil.Process]) -> tuple[float, float, float]:
    """(time, memory in MB, CPU percent) of ``root``'s family now."""
    mem = 0.0
    cpu = 0.0
    for p in _family(root, cache):
        try:
            with p.oneshot():
                mem += p.memory_info().rss
                cpu += p.cpu_percent()
        except psutil.Error:  # it ended meanwhile
            cache.pop(p.pid, None)
    return time.time(), mem / 1e6, cpu


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pid, dt = int(argv[1]), float(argv[2])
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return 0
    cache: dict[int, psutil.Process] = {}
    stdin = sys.stdin.fileno()
    out = sys.stdout
    while True:
        t, mem, cpu = sample(root, cache)
        try:
            out.write(f"{t!r} {mem!r} {cpu!r}\n")
            out.flush()
        except (BrokenPipeError, OSError):
            return 0
        ready, _, _ = select.select([stdin], [], [], dt)
        if ready and not os.read(stdin, 4096):  # end of file: stop
            t, mem, cpu = sample(root, cache)
            try:
                out.write(f"{t!r} {mem!r} {cpu!r}\n")
                out.flush()
            except (BrokenPipeError, OSError):
                pass
            return 0
        if not root.is_running():
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
