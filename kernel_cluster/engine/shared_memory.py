"""Values through shared memory between the processes of one machine.

A worker process sending a large value to a reader on the same machine (a peer
fetching a dependency, the kernel gathering a result) writes the value's bytes once
into a file of ``/dev/shm`` and sends, instead of the value, a small ``SharedValue``:
the file's name, the pickle (protocol 5) and where each out-of-band buffer lies. The
reader maps the file and rebuilds the value on the mapping: a numpy array or a pandas
block reads the sender's bytes where they are, with no copy; a value that cannot live
on a buffer (bytes) is copied out once.

Who owns a segment, and when it goes:

- The sender (``SharedMemory.export``) owns it from its making until the reader
  claims it, and counts it in ``held`` (``shared_memory_limit`` caps that). It tracks
  the segments of each reply by the connection it went on (``sent``): a reader claims
  a reply's segments before it asks anything else on that connection, so those still
  there when the next request arrives, or when the connection ends (the reader died),
  are removed (``release``). The sender's ``close`` removes whatever it still owns.
- The reader (``claim``) maps the file and unlinks it at once: from then on the
  segment has no name, and the system frees its memory when the last view of the
  mapping goes: the value was released, spilled or copied, or the process ended,
  however it ended. ``claimed`` counts the bytes mapped meanwhile.
- A sender killed with segments not yet claimed cannot remove them: its nanny
  removes the segments named after its pid (``remove_segments_of``), and the next
  cluster on the machine those of any process that is gone (``sweep_stale_segments``),
  as with directories (leftovers.py). Names carry the creator's pid and start time.

The socket stays the way for everything else: values under ``THRESHOLD`` bytes, a
reader on another machine (its ``identity`` differs), shared memory unavailable,
over the limit or full (``export`` returns None and says why in ``fallbacks``).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import mmap
import os
import pickle
import re
import secrets
import threading
import weakref
from collections.abc import Hashable
from typing import Any

import cloudpickle
import psutil

from .leftovers import alive
from .process_meter import context_meter

__all__ = [
    "DIRECTORY",
    "PREFIX",
    "THRESHOLD",
    "Claimed",
    "SharedMemory",
    "SharedValue",
    "remove_segments_of",
    "sweep_stale_segments",
]

logger = logging.getLogger(__name__)

DIRECTORY = "/dev/shm"
PREFIX = "kc-shm-"
# values whose bytes to move are fewer go over the socket: making and mapping a file
# costs about what a loopback socket moves in a few hundred microseconds
THRESHOLD = 1 << 20
# buffers at least this big leave the pickle (as the comm layer's out-of-band frames)
_BUFFER_MIN = 64 * 1024
_ALIGN = 64  # each buffer starts on a cache line: numpy's alignment, and SIMD's
# a segment is made only if the file system keeps this share of its size free after it
_RESERVE = 0.05
_NAME = re.compile(rf"^{PREFIX}(\d+)-([0-9a-f]+)-([0-9a-f]+)$")
_CHUNK = 1 << 30  # bytes per pwrite call (Linux moves at most about 2 GiB per call)


class SharedValue:
    """A value on its way through shared memory (or pickled already, ``segment`` None).

    ``data``: the pickle, or None when it lies in the segment at ``data_span``;
    ``buffers``: (offset, size, read-only) of each out-of-band buffer in the segment,
    or, without a segment, the buffers themselves (bytes).
    """

    __slots__ = ("buffers", "data", "data_span", "segment", "size")

    def __init__(
        self,
        segment: str | None,
        size: int,
        data: bytes | None,
        data_span: tuple[int, int] | None,
        buffers: list,
    ) -> None:
        self.segment = segment
        self.size = size
        self.data = data
        self.data_span = data_span
        self.buffers = buffers

    def __reduce__(self) -> tuple:
        return (SharedValue, (self.segment, self.size, self.data, self.data_span, self.buffers))

    @property
    def nbytes(self) -> int:
        """Bytes it takes in a message (the segment's are not sent)."""
        inline = 0 if self.segment else sum(len(b) for b in self.buffers)
        return len(self.data or b"") + inline + 64


class Claimed:
    """A reader's SharedValue with its segment mapped: ``value()`` rebuilds it."""

    __slots__ = ("mapping", "shared")

    def __init__(self, shared: SharedValue, mapping: mmap.mmap | None) -> None:
        self.shared = shared
        self.mapping = mapping

    def value(self) -> Any:
        """The value (on the mapping: the mapping lives as long as what uses it)."""
        sv, mapping = self.shared, self.mapping
        self.mapping = None  # the value's buffers hold it from now on
        with context_meter.meter("deserialize"):
            if mapping is None:
                return pickle.loads(sv.data or b"", buffers=sv.buffers)
            view = memoryview(mapping)
            buffers = [
                view[at : at + n].toreadonly() if readonly else view[at : at + n]
                for at, n, readonly in sv.buffers
            ]
            if sv.data is not None:
                return pickle.loads(sv.data, buffers=buffers)
            at, n = sv.data_span or (0, 0)
            return pickle.loads(view[at : at + n], buffers=buffers)


def _identity(directory: str) -> str:
    """Who shares this directory's files: readers with the same identity do (same
    boot, same mount); an empty string when it cannot be used."""
    try:
        st = os.stat(directory)
        if not os.access(directory, os.W_OK | os.X_OK):
            return ""
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return ""
    return f"{boot}:{st.st_dev}:{st.st_ino}:{os.getuid()}"


def _me() -> str:
    p = psutil.Process()
    return f"{PREFIX}{p.pid}-{int(p.create_time() * 100):x}-"


class SharedMemory:
    """One process's segments: those it made and sends (``export``), those it maps
    as a reader (``claim``). Thread-safe: values may be exported off the loop."""

    def __init__(
        self,
        limit: int | None = None,
        *,
        directory: str = DIRECTORY,
        threshold: int = THRESHOLD,
    ) -> None:
        """``limit``: bytes of segments this process may own at once as a sender
        (None: as much as ``directory`` has free; 0: it sends none)."""
        self.directory = directory
        self.limit = limit
        self.threshold = threshold
        self.identity = _identity(directory)
        self._names = _me()
        self._lock = threading.Lock()
        self._owned: dict[str, int] = {}  # made here, not claimed yet: name -> bytes
        self._by_channel: dict[Hashable, list[str]] = {}
        self.held = 0  # bytes of the segments in ``_owned``
        self.claimed = 0  # bytes of the segments mapped here as a reader, still alive
        self.fallbacks: dict[str, int] = {}  # why values went over the socket instead
        self._closed = False

    @property
    def can_send(self) -> bool:
        return bool(self.identity) and self.limit != 0 and not self._closed

    # -- the sender ---------------------------------------------------------------------

    def export(self, value: Any, reader: str, nbytes: int) -> SharedValue | None:
        """``value`` as a SharedValue for ``reader`` (its ``identity``), or None: send
        it over the socket. ``nbytes``: its size as measured (sizeof), which spares
        pickling small values. Raises what pickling raises."""
        if nbytes < self.threshold or not reader or reader != self.identity or not self.can_send:
            return None
        with context_meter.meter("serialize"):
            buffers: list[memoryview] = []

            def out_of_band(buffer: pickle.PickleBuffer) -> bool:
                try:
                    raw = buffer.raw()
                except BufferError:  # not contiguous: stays in the pickle
                    return True
                if raw.nbytes < _BUFFER_MIN:
                    return True
                buffers.append(raw)
                return False

            data = cloudpickle.dumps(value, protocol=5, buffer_callback=out_of_band)
        big_pickle = len(data) >= _BUFFER_MIN
        size = (len(data) if big_pickle else 0) + sum(b.nbytes + _ALIGN for b in buffers)
        if size < self.threshold:  # pickled already: it goes as it is, by the socket
            return SharedValue(None, 0, data, None, [b.tobytes() for b in buffers])
        name = self._names + secrets.token_hex(8)
        why = self._reserve(name, size)
        if why:
            self._fell_back(why)
            return None
        layout: list[tuple[int, int, bool]] = []
        pieces: list[tuple[int, memoryview]] = []
        at = 0
        span = None
        if big_pickle:
            span = (0, len(data))
            pieces.append((0, memoryview(data)))
            at = len(data)
        for raw in buffers:
            at = -(-at // _ALIGN) * _ALIGN
            layout.append((at, raw.nbytes, raw.readonly))
            pieces.append((at, raw))
            at += raw.nbytes
        with context_meter.meter("shared-memory"):
            try:
                self._write(name, at, pieces)
            except OSError as exc:
                self._fell_back("full" if exc.errno in (errno.ENOSPC, errno.ENOMEM) else "error")
                logger.debug("Shared memory segment %s not made: %s", name, exc)
                return None
        context_meter.record("shared-memory", at, "bytes")
        return SharedValue(name, at, None if big_pickle else data, span, layout)

    def _reserve(self, name: str, size: int) -> str:
        """Count a segment of ``size`` bytes as this process's, or say why it cannot
        be made now: over ``limit``, or the file system too full for it."""
        try:
            st = os.statvfs(self.directory)
        except OSError:
            return "unavailable"
        free = st.f_bavail * st.f_frsize
        if free - size < _RESERVE * st.f_blocks * st.f_frsize:
            return "full"
        with self._lock:
            if self.limit is not None and self.held + size > self.limit:
                return "limit"
            self._owned[name] = size
            self.held += size
        return ""

    def _fell_back(self, why: str) -> None:
        with self._lock:
            self.fallbacks[why] = self.fallbacks.get(why, 0) + 1
        context_meter.record("shared-memory-fallback", 1, "count")

    def _write(self, name: str, size: int, pieces: list[tuple[int, memoryview]]) -> None:
        path = os.path.join(self.directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except BaseException:
            self._remove(name)
            raise
        try:
            os.ftruncate(fd, size)
            for at, view in pieces:
                done = 0
                while done < view.nbytes:  # pwrite lets go of the GIL as it copies
                    done += os.pwrite(fd, view[done : done + _CHUNK], at + done)
        except BaseException:
            self._remove(name)
            raise
        finally:
            os.close(fd)

    def sent(self, channel: Hashable, values: list[SharedValue]) -> None:
        """``values`` went out on ``channel`` (a reader's connection)."""
        names = [v.segment for v in values if v.segment]
        if names:
            with self._lock:
                self._by_channel.setdefault(channel, []).extend(names)

    def release(self, channel: Hashable) -> None:
        """What went out on ``channel`` has been claimed or never will be (the reader
        asks again, or it is gone): remove the segments still there."""
        with self._lock:
            names = self._by_channel.pop(channel, ())
        for name in names:
            self._remove(name)

    def _remove(self, name: str) -> None:
        with self._lock:
            size = self._owned.pop(name, None)
            if size is None:
                return
            self.held -= size
        with contextlib.suppress(FileNotFoundError):  # claimed: the reader unlinked it
            os.unlink(os.path.join(self.directory, name))

    def owned(self) -> list[str]:
        """Names of the segments made here and not released (claimed or not)."""
        with self._lock:
            return list(self._owned)

    def close(self) -> None:
        """Remove every segment made here that is still owned; send no more."""
        self._closed = True
        with self._lock:
            self._by_channel.clear()
            names = list(self._owned)
        for name in names:
            self._remove(name)

    # -- the reader ---------------------------------------------------------------------

    def claim(self, value: SharedValue) -> Claimed:
        """Map ``value``'s segment and unlink it (it is this process's from now on).

        OSError when it cannot be (gone, not ours, the mapping refused): the reader
        then asks for the value again over the socket.
        """
        name = value.segment
        if name is None:
            return Claimed(value, None)
        if not _NAME.match(name):
            raise OSError(errno.EINVAL, f"not a segment name: {name!r}")
        path = os.path.join(self.directory, name)
        with context_meter.meter("shared-memory"):
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            try:
                os.unlink(path)
                st = os.fstat(fd)
                if st.st_uid != os.getuid() or st.st_size != value.size:
                    raise OSError(errno.EINVAL, f"segment {name} is not the one announced")
                for at, n, _ in value.buffers:
                    if at < 0 or at + n > value.size:
                        raise OSError(errno.EINVAL, f"segment {name}: a buffer out of bounds")
                mapping = mmap.mmap(fd, value.size) if value.size else None
            finally:
                os.close(fd)
        context_meter.record("shared-memory", value.size, "bytes")
        if mapping is not None:
            with self._lock:
                self.claimed += value.size
            weakref.finalize(mapping, self._unmapped, value.size)
        return Claimed(value, mapping)

    def _unmapped(self, size: int) -> None:
        with self._lock:
            self.claimed -= size


def _segments(directory: str, pattern: str) -> list[str]:
    return glob.glob(os.path.join(directory, pattern))


def remove_segments_of(pid: int, directory: str = DIRECTORY) -> list[str]:
    """Remove the segments made by process ``pid`` (which has ended): a dead worker's
    nanny calls it. Returns the names removed."""
    removed = []
    for path in _segments(directory, f"{PREFIX}{pid}-*"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(os.path.basename(path))
    return removed


def sweep_stale_segments(directory: str = DIRECTORY) -> list[str]:
    """Remove the segments of processes that are gone (a killed kernel's workers);
    those of live processes, and other users', are left alone."""
    removed = []
    uid = os.getuid()
    for path in _segments(directory, PREFIX + "*"):
        match = _NAME.match(os.path.basename(path))
        if match is None:
            continue
        try:
            if os.lstat(path).st_uid != uid:
                continue
        except OSError:
            continue
        pid, started = int(match[1]), int(match[2], 16) / 100
        if alive(pid, started):  # the same judgement as for directories
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(os.path.basename(path))
    if removed:
        logger.info("Removed %d shared memory segments left by dead processes", len(removed))
    return removed
