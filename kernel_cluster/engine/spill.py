"""Worker data that outgrows memory: least recently used values go to disk.

``SpillBuffer`` is the worker's ``data`` mapping. Values live in memory until
the bytes held pass ``target``; then the least recently used ones are pickled,
lz4-compressed and written to files under the worker's directory, and read back
(and kept in memory again) when a task or a peer needs them. Every step is
recorded through ``context_meter`` (disk-write, disk-read, compress, decompress
in seconds, bytes and counts; memory-read bytes for values found in memory), so
the metrics say what spilling cost and which context caused it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

import cloudpickle
import lz4.frame

from ..core.keys import Key
from ..core.sizeof import sizeof
from .process_meter import context_meter

logger = logging.getLogger(__name__)


class SpillBuffer(MutableMapping):
    """Thread-safe: task threads read their inputs while the loop stores results."""

    def __init__(self, directory: str, target: int):
        """``target``: bytes in memory above which values are moved to disk (0: never)."""
        self.directory = directory
        self.target = target
        os.makedirs(directory, exist_ok=True)
        self.fast: OrderedDict[Key, Any] = OrderedDict()  # least recently used first
        self.fast_sizes: dict[Key, int] = {}
        self.slow: dict[Key, tuple[str, int]] = {}  # key -> (file, bytes in memory)
        self.fast_bytes = 0
        self.slow_bytes = 0  # sizes in memory of the values on disk
        self.disk_bytes = 0  # compressed, on disk
        self._lock = threading.RLock()
        self._write_failed = False  # warned once about a failed disk write
        # key -> why its value does not pickle: it stays in memory, and is not tried
        # again (a worker stuck over its limit names these, memory_monitor.py)
        self.unspillable: dict[Key, str] = {}
        self.storing: Key | None = None  # whose value is being stored (for attribution)
        # entered around a spill that storing a value causes where no metrics scope
        # listens (the worker storing a task's result): the worker charges that task
        self.store_scope: AbstractContextManager | None = None

    # -- the mapping ---------------------------------------------------------------------

    def __setitem__(self, key: Key, value: Any) -> None:
        size = sizeof(value)
        with self._lock:
            self.storing = key
            self._discard(key)
            self.fast[key] = value
            self.fast_sizes[key] = size
            self.fast_bytes += size
            if self.target and self.fast_bytes > self.target:
                if self.store_scope is not None and not context_meter.active:
                    with self.store_scope:
                        self.evict_until(self.target, keep=key)
                else:
                    self.evict_until(self.target, keep=key)
            self.storing = None

    def __getitem__(self, key: Key) -> Any:
        with self._lock:
            if key in self.fast:
                self.fast.move_to_end(key)
                context_meter.record("memory-read", self.fast_sizes[key], "bytes")
                return self.fast[key]
            if key not in self.slow:
                raise KeyError(key)
            value = self._read(key)
            # back in memory: it is being used, so it is the most recent
            path, size = self.slow.pop(key)
            self.slow_bytes -= size
            self._remove_file(path)
            self.fast[key] = value
            self.fast_sizes[key] = size
            self.fast_bytes += size
            if self.target and self.fast_bytes > self.target:
                self.evict_until(self.target, keep=key)
            return value

    def read_many(self, keys: list[Key]) -> dict:
        """The values of those ``keys`` held here. The bytes read from memory are one
        metric for all of them (a peer or the client may fetch thousands at once)."""
        out = {}
        on_disk = []
        from_memory = 0
        with self._lock:
            fast, sizes = self.fast, self.fast_sizes
            for key in keys:
                if key in fast:
                    fast.move_to_end(key)
                    from_memory += sizes[key]
                    out[key] = fast[key]
                elif key in self.slow:
                    on_disk.append(key)
        if from_memory:
            context_meter.record("memory-read", from_memory, "bytes")
        for key in on_disk:
            try:
                out[key] = self[key]
            except KeyError:  # dropped meanwhile
                pass
        return out

    def __delitem__(self, key: Key) -> None:
        with self._lock:
            if key not in self.fast and key not in self.slow:
                raise KeyError(key)
            self._discard(key)

    _MISSING = object()

    def pop(self, key: Key, default: Any = _MISSING) -> Any:
        """Drop ``key`` without reading it back from disk (the mixin's pop would)."""
        with self._lock:
            if key in self.fast:
                value = self.fast[key]
                self._discard(key)
                return value
            if key in self.slow:
                self._discard(key)
                return None
        if default is SpillBuffer._MISSING:
            raise KeyError(key)
        return default

    def __contains__(self, key: object) -> bool:
        return key in self.fast or key in self.slow

    def __iter__(self) -> Iterator[Key]:
        with self._lock:
            keys = [*self.fast, *self.slow]
        return iter(keys)

    def __len__(self) -> int:
        return len(self.fast) + len(self.slow)

    # -- spilling ---------------------------------------------------------------------------

    def evict_until(self, target: int, keep: Key | None = None) -> int:
        """Move least recently used values to disk until at most ``target`` bytes remain.

        Returns the bytes moved. A value that will not pickle stays in memory.
        """
        moved = 0
        with self._lock:
            for key in list(self.fast):
                if self.fast_bytes <= target:
                    break
                if key == keep or key in self.unspillable:
                    continue
                size = self.fast_sizes[key]
                if self._write(key, self.fast[key], size):
                    del self.fast[key]
                    del self.fast_sizes[key]
                    self.fast_bytes -= size
                    moved += size
        return moved

    def _write(self, key: Key, value: Any, size: int) -> bool:
        try:
            with context_meter.meter("serialize"):
                frames: list[pickle.PickleBuffer] = []
                header = cloudpickle.dumps(value, protocol=5, buffer_callback=frames.append)
        except Exception as exc:  # unpicklable values stay in memory
            self.unspillable[key] = f"{type(exc).__name__}: {exc}"
            return False
        with context_meter.meter("compress"):
            parts = [header, *(f.raw() for f in frames)]
            blob = [lz4.frame.compress(p) for p in parts]
        path = os.path.join(self.directory, uuid.uuid4().hex)
        try:
            with context_meter.meter("disk-write"), open(path, "wb") as f:
                f.write(len(blob).to_bytes(4, "little"))
                for b in blob:
                    f.write(len(b).to_bytes(8, "little"))
                for b in blob:
                    f.write(b)
        except OSError as exc:
            # A full disk or a spill directory removed under the worker: the value
            # stays in memory, and the worker goes on (its memory limit will pause it).
            # Raising would lose the other results being stored with this one.
            if not self._write_failed:
                logger.warning(
                    "Could not spill to %s (%s); values stay in memory. Free some disk "
                    "space, or set TMPDIR to a disk with room before starting the cluster.",
                    self.directory,
                    exc,
                )
            self._write_failed = True
            with contextlib.suppress(OSError):
                os.remove(path)
            return False
        written = 4 + 8 * len(blob) + sum(len(b) for b in blob)
        context_meter.record("disk-write", written, "bytes")
        context_meter.record("disk-write", 1, "count")
        self.slow[key] = (path, size)
        self.slow_bytes += size
        self.disk_bytes += written
        return True

    def _read(self, key: Key) -> Any:
        path, _ = self.slow[key]
        with context_meter.meter("disk-read"), open(path, "rb") as f:
            raw = f.read()
        context_meter.record("disk-read", len(raw), "bytes")
        context_meter.record("disk-read", 1, "count")
        n = int.from_bytes(raw[:4], "little")
        sizes = [int.from_bytes(raw[4 + 8 * i : 12 + 8 * i], "little") for i in range(n)]
        offset = 4 + 8 * n
        with context_meter.meter("decompress"):
            parts = []
            for size in sizes:
                parts.append(lz4.frame.decompress(raw[offset : offset + size]))
                offset += size
        with context_meter.meter("deserialize"):
            return pickle.loads(parts[0], buffers=[bytearray(p) for p in parts[1:]])

    def _discard(self, key: Key) -> None:
        self.unspillable.pop(key, None)
        if key in self.fast:
            del self.fast[key]
            self.fast_bytes -= self.fast_sizes.pop(key)
        elif key in self.slow:
            path, size = self.slow.pop(key)
            self.slow_bytes -= size
            self._remove_file(path)

    def _remove_file(self, path: str) -> None:
        try:
            self.disk_bytes -= os.path.getsize(path)
            os.remove(path)
        except FileNotFoundError:
            pass

    @property
    def memory(self) -> int:
        """Bytes of the values held in memory (what the worker manages)."""
        return self.fast_bytes

    @property
    def spilled(self) -> int:
        """In-memory size of the values that are on disk now."""
        return self.slow_bytes

    def close(self) -> None:
        with self._lock:
            self.fast.clear()
            self.fast_sizes.clear()
            self.slow.clear()
            self.unspillable.clear()
            self.fast_bytes = self.slow_bytes = self.disk_bytes = 0
            shutil.rmtree(self.directory, ignore_errors=True)
