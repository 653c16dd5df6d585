"""Which task each task thread of a worker process is running, in a file the nanny reads.

When a worker process dies, the scheduler cannot tell which of the tasks it sent
there were executing (and may have killed it) and which merely waited beside them.
Asking the worker for every start and end would cost a message per task. Instead
each task thread writes the key it runs into its own fixed-size slot of a small
memory-mapped file in the worker's directory before the task, and clears it after
(about a microsecond). The file outlives the process: the nanny reads it after a
death, or while a hung process is being killed, and the scheduler blames only the
tasks found there.

A slot is ``SLOT_SIZE`` bytes: a 2-byte length, then the key's text
(``core.blame.key_text``), cut to fit. The length is written last and cleared
first, so a reader sees either a whole key or none.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from ..core.blame import SLOT_SIZE, key_text

FILE_NAME = "running-tasks"
_MAX = SLOT_SIZE - 2


class RunningSlots:
    """The writing side, in the worker process: one slot per task thread."""

    def __init__(self, directory: str, idents: list[int]) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, FILE_NAME)
        size = SLOT_SIZE * max(len(idents), 1)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._offsets = {ident: i * SLOT_SIZE for i, ident in enumerate(idents)}

    def enter(self, ident: int, key: Any) -> None:
        offset = self._offsets.get(ident)
        if offset is None:  # not a task thread of the pool (run_function): no slot
            return
        data = key_text(key)[:_MAX]
        m = self._map
        m[offset + 2 : offset + 2 + len(data)] = data
        m[offset : offset + 2] = len(data).to_bytes(2, "little")

    def leave(self, ident: int) -> None:
        offset = self._offsets.get(ident)
        if offset is not None:
            self._map[offset : offset + 2] = b"\0\0"


def read_running(directory: str) -> list[bytes] | None:
    """The key texts in the slots of a worker's directory; None if the file cannot be
    read (the worker never wrote it, or it is damaged): then nobody knows."""
    try:
        with open(os.path.join(directory, FILE_NAME), "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if not raw or len(raw) % SLOT_SIZE:
        return None
    found = []
    for offset in range(0, len(raw), SLOT_SIZE):
        n = int.from_bytes(raw[offset : offset + 2], "little")
        if n > _MAX:
            return None
        if n:
            found.append(raw[offset + 2 : offset + 2 + n])
    return found
