"""Peer transfers of a worker: fetching dependencies from peers, serving its data to
them (fitting replies to the message size limit), and the logs of both.

A part that ``engine.worker.Worker`` owns (``worker.transfers``): made with what the
transfers touch (the state machine, the data, the peers, the metrics ledger) and call
(the worker's ``now``, ``handle`` to give the state machine what was fetched,
``run_function`` for ``client.run`` requests, ``send_to_scheduler``). The worker
spawns ``gather_dep`` for each GatherDep instruction and sets ``fine_metrics`` when
metrics are switched; the transfer logs are this part's (the worker shows them as
``transfer_incoming_log`` and ``transfer_outgoing_log``). Worker processes hand their
peers' requests to ``serve``; embedded peers read with ``send_data``. Apart so that
the worker module holds the task shell alone.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from itertools import islice
from typing import Any, Protocol

import cloudpickle

from ..core.keys import Key
from ..core.metrics import MeterFrame, MetricsLedger
from ..core.worker_messages import GatherDep, GatherDepFailed, GatherDepSucceeded
from ..core.worker_state import WorkerState
from .comm import (
    MessageTooLargeError,
    Pickled,
    SerializationError,
    SerializationTimeout,
    dumps,
    pickle_value,
)
from .execute import pack_exception
from .offload import Offloader, run_here
from .process_meter import context_meter
from .shared_memory import SharedMemory, SharedValue
from .spill import SpillBuffer
from .tcp_workers import UnserializableResults
from .wire import (
    DataReply,
    GetData,
    RequestFailed,
    ResultUnsendable,
    Run,
    RunResult,
    WireError,
    decode,
    encode,
)

logger = logging.getLogger("kernel_cluster.engine.worker")  # where its warnings always went

__all__ = ["LOGGED_KEYS", "PeerData", "PeerTransfers"]

# keys named in one transfer log entry, at most (``n_keys`` counts them all): a gather of
# 10,000 results would otherwise keep 10,000 keys alive per entry
LOGGED_KEYS = 100


def log_entry(
    who: str, keys: dict, n_keys: int, total: int, compressed: int, start: float, stop: float
) -> dict[str, Any]:
    """One transfer log entry, with the fields of Dask's (``who``, ``start``, ``stop``,
    ``middle``, ``duration``, ``bandwidth``, ``keys`` as ``{key: bytes}``, ``total``,
    ``compressed``), ``peer`` (the same as ``who``, the name earlier versions used)
    and ``n_keys`` (``keys`` names the first ``LOGGED_KEYS`` of them)."""
    duration = max(0.001, stop - start)  # a transfer timed at 0 has no finite bandwidth
    return {
        "who": who,
        "peer": who,
        "start": start,
        "stop": stop,
        "middle": (start + stop) / 2,
        "duration": duration,
        "bandwidth": total / duration,
        "keys": keys,
        "n_keys": n_keys,
        "total": total,
        "compressed": compressed,
    }


_MISSING = object()
# values of these types pickle without running any code of the user's: small ones are
# pickled on the loop, saving the hand-over to the offload thread
_PLAIN = frozenset({int, float, bool, complex, type(None)})
_PLAIN_SIZED = frozenset({str, bytes})
_PLAIN_MAX = 64 * 1024


def _shared_bytes(digests: list[tuple]) -> float:
    """Bytes of a transfer that went through shared memory, not the network."""
    return sum(v for label, v, unit in digests if label == "shared-memory" and unit == "bytes")


# room kept in a get-data reply for its body besides the values and keys
_REPLY_HEADROOM = 64 * 1024


def _wire_size(value: Any) -> int:
    """Bytes ``value`` takes in a message (an upper bound: uncompressed)."""
    return sum(memoryview(f).nbytes for f in dumps(value, compress=False))


class PeerData(Protocol):
    """How a worker reads keys held by another worker."""

    async def get_data(
        self, peer: str, keys: list[Key], stats: dict | None = None, who: str = ...
    ) -> tuple[dict, dict]: ...


class PeerTransfers:
    """The transfers of one worker to and from its peers (``Worker.transfers``)."""

    def __init__(
        self,
        *,
        address: str,
        state: WorkerState,
        data: MutableMapping,
        peers: PeerData,
        metrics: MetricsLedger,
        log_length: int,
        now: Callable[[], float],
        handle: Callable[..., None],
        run_function: Callable[[Any], Awaitable[Any]],
        send_to_scheduler: Callable[[list], None],
        offloader: Offloader | None = None,
    ) -> None:
        """``offloader``: where the values sent to other processes are pickled (None:
        on the loop, as embedded workers never pickle them)."""
        self.address = address  # who fetches, and in the log messages
        self.state = state
        self.data = data
        self.peers = peers
        self.metrics = metrics
        self.now = now  # the scheduler's clock, as the worker tells it
        self.handle = handle
        self.run_function = run_function
        self.send_to_scheduler = send_to_scheduler
        self.offloader = offloader
        self.fine_metrics = False  # the worker's setting: it sets this when it changes
        # a worker process's shared memory (engine/shared_memory.py): large values go
        # that way to readers on this machine; set by worker_process.serve
        self.shared: SharedMemory | None = None
        # the latest transfers in and out (``log_entry``'s dicts): the performance
        # report's bandwidth charts read them
        self.incoming_log: deque[dict] = deque(maxlen=log_length)
        self.outgoing_log: deque[dict] = deque(maxlen=log_length)

    async def gather_dep(self, inst: GatherDep) -> None:
        """Fetch ``inst.keys`` from ``inst.worker`` (spawned by the worker); the state
        machine gets the data, or word that the fetch failed."""
        digests: list[tuple] = []
        frame = MeterFrame()
        t0 = time.perf_counter()
        with context_meter.scope(lambda *d: digests.append(d), frame):
            start = self.now()
            stats: dict = {}
            try:
                data, nbytes = await self.peers.get_data(
                    inst.worker, inst.keys, stats, who=self.address
                )
            except UnserializableResults as exc:  # those keys fail on the scheduler
                data, nbytes = exc.data, exc.nbytes
                # the sender told the scheduler of those it could not send; those that
                # could not be rebuilt here are ours to tell: each fails once, with its
                # error, rather than being fetched again and again
                self.send_to_scheduler(
                    [ResultUnsendable(key, *exc.errors[key]) for key in exc.here]
                )
            except Exception as exc:
                logger.warning(
                    "Worker %s could not fetch %d keys from %s: %s",
                    self.address,
                    len(inst.keys),
                    inst.worker,
                    exc,
                )
                self.handle(GatherDepFailed(inst.worker, inst.keys, inst.stimulus_id))
                return
            stop = self.now()
            t1 = time.perf_counter()
            metered_in_transfer = frame.inner_wall
            # storing the data may spill: that belongs to this transfer too
            self.handle(
                GatherDepSucceeded(inst.worker, data, nbytes, start, stop, inst.stimulus_id)
            )
        t2 = time.perf_counter()
        total_bytes = sum(nbytes.values())
        if data:
            self.incoming_log.append(
                log_entry(
                    inst.worker,
                    {key: nbytes.get(key, 0) for key in islice(data, LOGGED_KEYS)},
                    len(data),
                    total_bytes,
                    stats.get("bytes_read", total_bytes),
                    start,
                    stop,
                )
            )
        if self.fine_metrics:
            add = self.metrics.add
            add(("gather-dep", "network", "seconds"), max(0.0, t1 - t0 - metered_in_transfer))
            add(("gather-dep", "network", "bytes"), max(0, total_bytes - _shared_bytes(digests)))
            add(
                ("gather-dep", "other", "seconds"),
                max(0.0, t2 - t1 - (frame.inner_wall - metered_in_transfer)),
            )
            for label, value, unit in digests:
                add(("gather-dep", label, unit), value)

    # -- serving peers ----------------------------------------------------------------

    def get_data(self, keys: list[Key], who: str) -> tuple[dict, dict]:
        """The values this worker holds among ``keys`` and their sizes."""
        if not self.fine_metrics or context_meter.active:
            return self._get_data(keys)
        sums: dict[tuple, float] = {}  # summed here: a digest comes for every key read

        def charge(label: Any, value: float, unit: str) -> None:
            sums[label, unit] = sums.get((label, unit), 0) + value

        with context_meter.scope(charge, MeterFrame()):
            out = self._get_data(keys)
        for (label, unit), value in sums.items():
            self.metrics.add(("get-data", label, unit), value)
        return out

    def _get_data(self, keys: list[Key]) -> tuple[dict, dict]:
        data = self.data
        if isinstance(data, SpillBuffer):
            out = data.read_many(keys)
        else:
            out = {key: data[key] for key in keys if key in data}
        tasks = self.state.tasks
        nbytes = {}
        for key in out:
            ts = tasks.get(key)
            nbytes[key] = ts.nbytes if ts is not None else 0
        return out, nbytes

    async def serve(self, comm: Any, raw: Any) -> None:
        """Answer one request read from a peer connection (a dict, see engine/wire.py),
        metering what sending data cost. A request that is none of ours gets an error."""
        if self.shared is not None:  # the reader claimed the last reply's segments
            self.shared.release(comm)
        try:
            msg = decode(raw)
        except WireError as exc:
            logger.warning("Worker %s refused a peer's request: %s", self.address, exc)
            await comm.write(encode(RequestFailed(pack_exception(exc, None)[0])))
            return
        if type(msg) is not GetData or not self.fine_metrics:
            await self._reply(comm, msg)
            return

        digests: list[tuple] = []
        frame = MeterFrame()
        t0 = time.perf_counter()
        with context_meter.scope(lambda *d: digests.append(d), frame):
            nbytes = await self._reply(comm, msg)
        total = time.perf_counter() - t0
        add = self.metrics.add
        add(("get-data", "network", "seconds"), max(0.0, total - frame.inner_wall))
        add(("get-data", "network", "bytes"), max(0, nbytes - _shared_bytes(digests)))
        for label, value, unit in digests:
            add(("get-data", label, unit), value)

    def connection_closed(self, comm: Any) -> None:
        """A reader's connection ended: what it did not claim will not be."""
        if self.shared is not None:
            self.shared.release(comm)

    async def _reply(self, comm: Any, msg: Any) -> int:
        start = self.now()
        # the requester's limit, if lower than ours: over it, it would drop the comm
        limit = getattr(msg, "max_size", None)
        write = comm.write if limit is None else partial(comm.write, max_message_size=limit)
        if type(msg) is GetData:
            limits = (limit, getattr(comm, "max_message_size", None))
            most = min((x for x in limits if x), default=2**63)
            reply = await self.data_reply(msg, most, channel=comm)
        else:
            reply = await self.handle_request(msg)
        try:
            written = await write(encode(reply))
        except (SerializationError, MessageTooLargeError) as exc:  # nothing was sent
            if isinstance(exc, SerializationError) or type(reply) is not RunResult:
                raise
            # a client.run result too large to send: an error, not a broken comm
            packed = pack_exception(exc, None)[0]
            written = await write(encode(RequestFailed(packed)))
            return 0
        if type(reply) is not DataReply or not reply.data:
            return 0
        return self._log_sent(msg.who, reply.data, reply.nbytes, written, start)

    async def data_reply(self, msg: GetData, limit: int, channel: Any = None) -> DataReply:
        """The values of ``msg.keys`` this worker holds, each pickled on its own, off
        the loop (``offloader``), and as many as fit under ``limit`` bytes.

        A value that will not pickle, takes longer than the offloader's limit, or is
        alone over ``limit`` fails its task (the scheduler is told); the rest go. For
        a reader sharing this machine's shared memory (``msg.shm``), large values go
        there (SharedValues); the segments are ``channel``'s until the reader claims
        them (``SharedMemory.sent``).
        """
        keys = list(msg.keys)
        tasks = self.state.tasks
        read: Callable[[Key], Any] = self._read_pickled
        shared = self.shared
        if shared is not None and msg.shm and msg.shm == shared.identity:
            sizes = {key: ts.nbytes for key in keys if (ts := tasks.get(key)) is not None}
            read = partial(self._read_pickled, reader=msg.shm, sizes=sizes)
        offloader = self.offloader
        if offloader is None:
            outcomes = run_here(read, keys)
        else:
            outcomes = await offloader.map(read, keys, inline=self._plain)
        if shared is not None and channel is not None:
            sent = [out for ok, out in outcomes if ok and type(out) is SharedValue]
            shared.sent(channel, sent)  # those left out of the reply too (fit_reply)
        reply = DataReply({}, {})
        for key, (ok, out) in zip(keys, outcomes, strict=True):
            if ok:
                if out is not None:  # None: not held (any more)
                    reply.data[key] = out
                    ts = tasks.get(key)
                    reply.nbytes[key] = ts.nbytes if ts is not None else 0
                continue
            what = f"the result of task {key!r}"
            if isinstance(out, TimeoutError):
                seconds = offloader.limit if offloader is not None else 0.0
                out = SerializationTimeout(what, self._type_of(key), seconds)
            elif not isinstance(out, SerializationError):
                out = SerializationError(what, self._type_of(key), f"{type(out).__name__}: {out}")
            self._unsendable(reply, key, out)
        return self.fit_reply(reply, limit)

    def _read_pickled(
        self, key: Key, reader: str = "", sizes: dict | None = None
    ) -> Pickled | SharedValue | None:
        """The value of ``key`` pickled (on the offload thread), None if not held; in
        shared memory for ``reader`` if it is large (``sizes``) and there is room."""
        data = self.data
        if isinstance(data, SpillBuffer):
            value = data.read_many([key]).get(key, _MISSING)
        else:
            value = data.get(key, _MISSING)
        if value is _MISSING:
            return None
        if reader and self.shared is not None and sizes:
            shared = self.shared.export(value, reader, sizes.get(key, 0))
            if shared is not None:
                return shared
        return pickle_value(value, f"the result of task {key!r}")

    def _in_memory(self, key: Key) -> Any:
        data = self.data
        store = data.fast if isinstance(data, SpillBuffer) else data
        return store.get(key, _MISSING)

    def _plain(self, key: Key) -> bool:
        """Whether the value of ``key`` is in memory and pickles with no code of the
        user's, quickly (a number, a short string)."""
        value = self._in_memory(key)
        t = type(value)
        return t in _PLAIN or (t in _PLAIN_SIZED and len(value) < _PLAIN_MAX)

    def _type_of(self, key: Key) -> str:
        value = self._in_memory(key)
        if value is _MISSING:
            return "unknown"
        t = type(value)
        return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"

    def send_data(self, keys: list[Key], who: str) -> tuple[dict, dict]:
        """``get_data`` for a reader in this process (an embedded peer, or the kernel's
        gather): no wire, so what was sent is what was held."""
        start = self.now()
        data, nbytes = self.get_data(keys, who)
        if data:
            self._log_sent(who, data, nbytes, None, start)
        return data, nbytes

    def _log_sent(
        self, who: str, data: dict, nbytes: dict, written: int | None, start: float
    ) -> int:
        """Record one transfer out (``written``: bytes on the wire); returns its bytes."""
        total = sum(nbytes.get(key, 0) for key in data)
        self.outgoing_log.append(
            log_entry(
                who,
                {key: nbytes.get(key, 0) for key in islice(data, LOGGED_KEYS)},
                len(data),
                total,
                total if written is None else written,
                start,
                self.now(),
            )
        )
        return total

    async def handle_request(self, msg: Any) -> Any:
        """A peer's (or the kernel's) request other than get-data (``data_reply``)."""
        t = type(msg)
        if t is Run:
            try:
                fn = cloudpickle.loads(msg.function)
                result = await self.run_function(fn)
            except Exception as exc:
                packed, tb = pack_exception(exc, exc.__traceback__)
                return RequestFailed(packed, tb)
            return RunResult(cloudpickle.dumps(result))
        error = ValueError(f"{getattr(msg, 'op', msg)!r} is not a request a worker answers")
        return RequestFailed(pack_exception(error, None)[0])

    def fit_reply(self, reply: DataReply, limit: int) -> DataReply:
        """As many values of a get-data reply as fit in a message of ``limit`` bytes.

        Keys left out are listed in ``more`` for the requester to ask again (see
        ``RemoteData.get_data``); a value that alone is over the limit fails its
        task, with an error naming its size and the limit.
        """
        sizes = {key: value.nbytes for key, value in reply.data.items()}
        if sum(sizes.values()) + _REPLY_HEADROOM + 64 * len(sizes) < limit // 2:
            return reply  # far under: no need to count the keys' bytes
        # the body names each key up to twice (data or more, and nbytes)
        keys_size = 2 * _wire_size(list(reply.data))
        budget = max(limit // 2, limit - _REPLY_HEADROOM - keys_size)
        used = sum(len(payload) + len(text) for payload, text in reply.errors.values())
        more = []
        for key, size in sizes.items():
            if size > budget:
                error = MessageTooLargeError(f"the result of task {key!r}", size, limit)
                used += self._unsendable(reply, key, error)
            elif used and used + size > budget:
                more.append(key)
                del reply.data[key]
                reply.nbytes.pop(key, None)
            else:
                used += size
        reply.more = more
        return reply

    def _unsendable(self, reply: DataReply, key: Key, exc: Exception) -> int:
        """Take ``key`` out of a get-data reply, and fail its task on the scheduler.

        Returns about the bytes the error adds to the reply.
        """
        payload, _ = pack_exception(exc, None)
        reply.errors[key] = (payload, str(exc))
        reply.data.pop(key, None)
        reply.nbytes.pop(key, None)
        self.send_to_scheduler([ResultUnsendable(key, payload, str(exc))])
        return len(payload) + len(str(exc))
