"""Workers in other processes: the TCP side of the scheduler and of peer transfers.

A worker connects to the scheduler's listener, registers, and from then on the
connection carries batches of the same messages embedded workers exchange through
LocalChannel, encoded as dicts (engine/wire.py). Data moves worker to worker (and
worker to kernel, for ``gather``) over separate request/reply connections, pooled
per peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.keys import Key
from ..core.scheduler_messages import ComputeTask
from ..core.worker_messages import SendTaskErred
from .comm import (
    BatchedSend,
    Comm,
    CommClosedError,
    CommError,
    MessageTooLargeError,
    Pickled,
    ProtocolError,
    SerializationError,
    SerializationTimeout,
    connect,
    listen,
    unpickle,
)
from .execute import pack_exception
from .offload import Offloader, run_here
from .shared_memory import Claimed, SharedMemory, SharedValue
from .wire import (
    DataReply,
    GetData,
    Refused,
    Registered,
    RegisterWorker,
    WireError,
    decode,
    decode_batch,
    encode,
    encode_batch,
)

logger = logging.getLogger(__name__)


def _error_too_large(msg: Any, exc: Exception) -> Any:
    """What to send instead of a message that cannot be sent (None: nothing).

    A task's error too large to send fails the task all the same, with an
    error that quotes its start and names the size and the limit: the future
    must end, not wait for a message that was dropped.
    """
    if not (isinstance(exc, MessageTooLargeError) and type(msg) is SendTaskErred):
        return None
    text = str(msg.exception_text)
    head = text[:_ERROR_HEAD] + (" [...]" if len(text) > _ERROR_HEAD else "")
    error = MessageTooLargeError(
        f"The error of task {msg.key!r}", exc.size, exc.limit, detail=f"{head}\n\n"
    )
    return SendTaskErred(
        msg.key,
        pack_exception(error, None)[0],
        None,
        str(error),
        msg.startstops,
        msg.thread,
        msg.stimulus_id,
    )


_ERROR_HEAD = 2000  # characters of an oversize error that are kept


def adopt_lower_limit(comm: Comm, peer_limit: Any) -> None:
    """Send no message over the peer's limit (if lower than ours) on this comm:
    it would drop the comm, and with it the worker's stream."""
    limit = getattr(comm, "max_message_size", None)
    if isinstance(peer_limit, int) and limit is not None and peer_limit < limit:
        comm.max_message_size = peer_limit  # type: ignore[attr-defined]


class StreamChannel:
    """The channel interface over a BatchedSend: messages (engine/wire.py) go out
    encoded as dicts; ``wire.decode_batch`` makes objects of what the peer sends.

    Batching is adaptive (see BatchedSend): a dependency chain must not wait a
    timer at every step, while 10,000 small tasks finishing should not mean
    10,000 writes.
    """

    def __init__(
        self,
        comm: Comm,
        interval: float = 0.002,
        on_unsendable: Callable[[Any, Exception], Any] = _error_too_large,
    ):
        """``on_unsendable``: see BatchedSend (it gets and returns message objects);
        by default a task's error too large to send is replaced by a smaller one (a
        worker's stream)."""
        self.comm = comm
        self.on_unsendable = on_unsendable
        self.batched = BatchedSend(comm, interval=interval, on_unsendable=self._instead)

    def send(self, msgs: list) -> None:
        try:
            self.batched.send(*encode_batch(msgs))
        except CommClosedError:
            pass  # the reader notices the broken stream and removes the peer

    def _instead(self, raw: dict, exc: Exception) -> dict | None:
        replacement = self.on_unsendable(decode(raw), exc)
        return None if replacement is None else encode(replacement)

    async def close(self) -> None:
        with contextlib.suppress(CommError, OSError):
            await self.batched.close()

    def abort(self) -> None:
        self.batched.abort()
        self.comm.abort()


class ConnectionPool:
    """Reusable request/reply connections to peers, a few per address."""

    def __init__(self, secret: bytes, *, per_peer: int = 4, timeout: float = 10):
        self.secret = secret
        self.per_peer = per_peer
        self.timeout = timeout
        self._idle: dict[str, list[Comm]] = {}
        self._closed = False

    async def rpc(self, address: str, msg: Any, stats: dict | None = None) -> Any:
        """Send the request ``msg`` (engine/wire.py) and return the reply, decoded;
        ``stats["bytes_read"]``: the reply's wire size.

        ``msg.max_size`` is set to the largest reply this comm accepts.
        """
        if self._closed:
            raise CommClosedError(address, "connection pool closed")
        idle = self._idle.get(address)
        comm = (
            idle.pop() if idle else await connect(address, secret=self.secret, timeout=self.timeout)
        )
        limit = getattr(comm, "max_message_size", None)
        if limit is not None:  # the peer keeps its reply under what we accept
            msg.max_size = limit
        try:
            await comm.write(encode(msg))
            before = getattr(comm, "bytes_read", 0)
            raw = await comm.read()
            if stats is not None:
                stats["bytes_read"] = getattr(comm, "bytes_read", 0) - before
            try:
                reply = decode(raw)
            except WireError as exc:
                raise ProtocolError(address, f"a reply that is none of ours: {exc}") from exc
        except BaseException:
            comm.abort()
            raise
        idle = self._idle.setdefault(address, [])
        if len(idle) < self.per_peer and not self._closed:
            idle.append(comm)
        else:
            comm.abort()
        return reply

    def forget(self, address: str) -> None:
        for comm in self._idle.pop(address, ()):
            comm.abort()

    async def close(self) -> None:
        self._closed = True
        for address in list(self._idle):
            self.forget(address)


class UnserializableResults(Exception):
    """Some requested values could not be had; ``data`` holds the ones that could.

    ``errors``: key -> (pickled exception, text), for values the peer could not send
    (it told the scheduler) and for those that could not be rebuilt here (``here``:
    the reader tells the scheduler, so that each fails once, with its error).
    """

    def __init__(
        self, peer: str, data: dict, nbytes: dict, errors: dict, here: frozenset = frozenset()
    ):
        self.peer = peer
        self.data = data
        self.nbytes = nbytes
        self.errors = errors
        self.here = here
        super().__init__(f"{len(errors)} results on {peer} cannot be serialised")


class RemoteData:
    """Reads values from worker processes: the scheduler's and workers' data source.

    Each value arrives pickled on its own (``Pickled``) and is unpickled by
    ``offloader``, off the event loop and within its time limit (None: here, on the
    loop); one that fails to load is an error for its key alone. With ``shared``
    (engine/shared_memory.py), a worker on this machine sends large values through
    shared memory: they are claimed as the reply arrives, before the connection is
    used again (the worker removes, at the next request, what was not), then rebuilt
    as the others are; one that cannot be claimed is asked for again over the socket.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        who: str = "scheduler",
        offloader: Offloader | None = None,
        shared: SharedMemory | None = None,
    ):
        self.pool = pool
        self.who = who
        self.offloader = offloader
        self.shared = shared

    async def get_data(
        self, peer: str, keys: list[Key], stats: dict | None = None, who: str | None = None
    ) -> tuple[dict, dict]:
        """The values of ``keys`` that ``peer`` holds, and their sizes (``who``: the
        reader that ``peer`` logs the transfer to, if not this one's own name).

        A peer whose reply would exceed the message size limit sends what fits
        and names the rest (``more``): those are asked for again, until done.
        """
        data: dict = {}
        nbytes: dict = {}
        errors: dict = {}
        bytes_read = 0
        todo = list(keys)
        shm = self.shared.identity if self.shared is not None else ""
        while todo:
            one: dict = {}
            try:
                request = GetData(todo, who or self.who, shm=shm)
                reply = await self.pool.rpc(peer, request, one)
            except (TimeoutError, CommError, OSError) as exc:
                raise OSError(f"could not get data from {peer}: {exc}") from exc
            if type(reply) is not DataReply:
                raise OSError(f"could not get data from {peer}: it answered {reply!r}")
            unclaimed = self._claim(peer, reply.data)  # before any other await
            bytes_read += one.get("bytes_read", 0)
            data.update(reply.data)
            nbytes.update(reply.nbytes)
            errors.update(reply.errors or {})
            more = list(reply.more or ())
            if len(more) >= len(todo) and not unclaimed:  # never loop on a confused peer
                logger.warning("%s sent none of %d keys asked for", peer, len(todo))
                break
            if unclaimed:  # again, over the socket
                shm = ""
                more.extend(unclaimed)
            todo = more
        if stats is not None:
            stats["bytes_read"] = bytes_read
        here = await self._unpickle(peer, data, nbytes, errors)
        if errors:
            raise UnserializableResults(peer, data, nbytes, errors, here)
        return data, nbytes

    def _claim(self, peer: str, data: dict) -> list[Key]:
        """Map the segments of the SharedValues in ``data`` (replaced by Claimed);
        returns the keys of those that could not be, taken out of ``data``."""
        failed = []
        for key, value in data.items():
            if type(value) is not SharedValue:
                continue
            try:
                if self.shared is None:
                    raise OSError("this reader has no shared memory")
                data[key] = self.shared.claim(value)
            except OSError as exc:
                logger.warning("Could not map %r sent by %s (%s); asking again", key, peer, exc)
                failed.append(key)
        for key in failed:
            del data[key]
        return failed

    async def _unpickle(self, peer: str, data: dict, nbytes: dict, errors: dict) -> frozenset:
        """Rebuild the values of ``data`` in place; those that fail go to ``errors``.
        Returns the keys that failed here."""
        keys = [key for key, value in data.items() if type(value) in (Pickled, Claimed)]
        if not keys:
            return frozenset()

        def what(key: Key) -> str:
            return f"the result of task {key!r}, sent by {peer} to {self.who}"

        def load(key: Key) -> Any:
            value = data[key]
            return value.value() if type(value) is Claimed else unpickle(value, what(key))

        offloader = self.offloader
        outcomes = run_here(load, keys) if offloader is None else await offloader.map(load, keys)
        failed = []
        for key, (ok, out) in zip(keys, outcomes, strict=True):
            if ok:
                data[key] = out
                continue
            if isinstance(out, TimeoutError):
                seconds = offloader.limit if offloader is not None else 0.0
                out = SerializationTimeout(what(key), "pickle", seconds, receiving=True)
            elif not isinstance(out, SerializationError):
                out = SerializationError(
                    what(key), "pickle", f"{type(out).__name__}: {out}", receiving=True
                )
            errors[key] = (pack_exception(out, None)[0], str(out))
            del data[key]
            nbytes.pop(key, None)
            failed.append(key)
        return frozenset(failed)


class SchedulerServer:
    """Accepts worker processes for a Scheduler, and drops those that stop heartbeating."""

    def __init__(
        self,
        scheduler: Any,
        secret: bytes,
        *,
        death_timeout: float = 10.0,
        on_register: Callable[[str, RegisterWorker], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
        vouch: Callable[[str, float], bool] | None = None,
    ):
        """``on_lost(address)``: a worker's stream ended (it died, went silent for
        ``death_timeout``, or was found unreachable) and the scheduler removed it; the
        nanny ends a process still running there. ``vouch(address, seconds)``: whether
        the silent worker's process showed signs of life within that many seconds
        (the nanny reads its pulse, engine/pulse.py)."""
        self.scheduler = scheduler
        self.secret = secret
        self.death_timeout = death_timeout
        self.on_register = on_register
        self.on_lost = on_lost
        self.vouch = vouch
        self._stopping = False
        self.address = ""
        self.listener: Any = None
        self._streams: dict[str, StreamChannel] = {}
        self._watchdog: asyncio.Task | None = None
        self.watchdog_turns = 0  # checks for silent workers so far (tests count them)

    async def start(self, address: str = "tcp://127.0.0.1:0") -> None:
        self.listener = await listen(address, self._handle_comm, secret=self.secret)
        self.address = self.listener.address
        self.scheduler.on_unreachable = self.close_worker_stream
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _handle_comm(self, comm: Comm) -> None:
        try:
            raw = await asyncio.wait_for(comm.read(), self.death_timeout)
        except (TimeoutError, CommError):
            comm.abort()
            return
        try:
            msg = decode(raw)
        except WireError as exc:
            msg = exc
        if type(msg) is not RegisterWorker:
            logger.warning("Closing a connection that did not register as a worker: %r", msg)
            comm.abort()
            return
        await self._serve_worker(comm, msg)

    async def _serve_worker(self, comm: Comm, reg: RegisterWorker) -> None:
        address = reg.address
        scheduler = self.scheduler
        if address in scheduler.worker_channels:
            await comm.write(encode(Refused(f"{address} is already registered")))
            comm.abort()
            return
        limit = getattr(comm, "max_message_size", None)
        await comm.write(encode(Registered(scheduler.clock(), limit)))
        adopt_lower_limit(comm, reg.max_message_size)
        stream = StreamChannel(comm, on_unsendable=self._task_too_large(address))
        self._streams[address] = stream
        scheduler.add_worker(
            address,
            stream,
            nthreads=reg.nthreads,
            memory_limit=reg.memory_limit,
            name=reg.name,
            pid=reg.pid,
        )
        if self.on_register is not None:
            self.on_register(address, reg)
        try:
            while True:
                msgs = decode_batch(await comm.read(), "The scheduler", address)
                scheduler.handle_worker_messages(address, msgs)
        except CommError:
            pass
        except Exception:
            logger.exception("Worker stream from %s failed", address)
        finally:
            if self._streams.get(address) is stream:
                del self._streams[address]
                if scheduler.worker_channels.get(address) is stream:
                    scheduler.remove_worker(address, reason="connection closed")
            stream.abort()
            if self.on_lost is not None and not self._stopping:
                self.on_lost(address)

    def _task_too_large(self, address: str) -> Callable[[Any, Exception], None]:
        """A task too large to send to its worker fails, as if the worker had said so:
        its future must end, and nobody else would ever tell the scheduler."""

        def on_unsendable(msg: Any, exc: Exception) -> None:
            if not (isinstance(exc, MessageTooLargeError) and type(msg) is ComputeTask):
                return
            key = msg.key
            error = MessageTooLargeError(
                f"Task {key!r} (its function and arguments)", exc.size, exc.limit
            )
            packed = pack_exception(error, None)[0]
            erred = SendTaskErred(key, packed, None, str(error), [], None, f"too-large-{key}")
            self.scheduler.handle_worker_messages(address, [erred])

        return on_unsendable

    async def _watch(self) -> None:
        """A worker silent for ``death_timeout`` is treated as dead, unless ``vouch``
        says its process is alive (its loop is busy: a long ``client.run``, a stall).

        Silence is counted in the time this loop itself ran: when the loop was stalled
        (a slow callback, the kernel stopped), the heartbeats that arrived meanwhile
        were not read, and the stall is not held against the workers.
        """
        interval = self.death_timeout / 4
        last = time.monotonic()
        # (scheduler clock when a stall was noticed, seconds it lasted): a silence
        # that began before it is that much shorter; kept for two death timeouts
        stalls: deque[tuple[float, float]] = deque()
        vouched: set[str] = set()
        while True:
            await asyncio.sleep(interval)
            self.watchdog_turns += 1
            tick = time.monotonic()
            late = tick - last - interval
            last = tick
            now = self.scheduler.clock()
            if late > 0:
                stalls.append((now, late))
            while stalls and now - stalls[0][0] > 2 * self.death_timeout:
                stalls.popleft()
            for address, stream in list(self._streams.items()):
                info = self.scheduler.worker_info.get(address)
                if info is None:
                    continue
                seen = info["last_seen"]
                silent = now - seen - sum(d for at, d in stalls if at > seen)
                if silent <= self.death_timeout:
                    vouched.discard(address)
                    continue
                if self.vouch is not None and self.vouch(address, self.death_timeout):
                    if address not in vouched:  # once per silence
                        vouched.add(address)
                        logger.warning(
                            "Worker %s sent no heartbeat for %.1f s, but its process is "
                            "alive: its event loop is busy (a long client.run function, "
                            "or a large value); keeping it",
                            address,
                            silent,
                        )
                    continue
                vouched.discard(address)
                logger.warning(
                    "Worker %s sent no heartbeat for %.1f s; removing it", address, silent
                )
                stream.abort()

    def close_worker_stream(self, address: str) -> None:
        stream = self._streams.get(address)
        if stream is not None:
            stream.abort()

    async def stop(self) -> None:
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for stream in list(self._streams.values()):
            stream.abort()
        if self.listener is not None:
            await self.listener.stop()
