"""A worker in its own process: connects to a scheduler and serves peers over TCP.

Started by a KernelCluster (``python -m kernel_cluster.engine.cli``) or by hand with
``kernel-cluster-worker ADDRESS``. It lives as long as its scheduler connection:
when the kernel goes away, so does the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from .comm import Comm, CommError, connect, listen
from .config import WorkerConfig
from .offload import Offloader
from .pulse import Pulse
from .shared_memory import SharedMemory
from .slots import RunningSlots
from .tcp_workers import ConnectionPool, RemoteData, StreamChannel, adopt_lower_limit
from .wire import Registered, RegisterWorker, decode, decode_batch, encode
from .worker import Worker

logger = logging.getLogger(__name__)

# the exit code of a worker process that stayed paused over its memory limit
MEMORY_STUCK_EXIT = 75


async def serve(
    scheduler_address: str,
    secret: bytes,
    config: WorkerConfig,
    *,
    listen_address: str = "tcp://127.0.0.1:0",
) -> int:
    """Serve until the scheduler goes away; the process's exit code (0, or
    ``MEMORY_STUCK_EXIT`` when the worker gave up for lack of memory)."""
    loop = asyncio.get_running_loop()
    nthreads, memory_limit = config.nthreads, config.memory_limit
    worker: Worker | None = None

    async def handle_peer(comm: Comm) -> None:
        try:
            while True:
                msg = await comm.read()
                assert worker is not None
                await worker.transfers.serve(comm, msg)
        except CommError:
            pass
        finally:
            if worker is not None:
                worker.transfers.connection_closed(comm)

    listener = await listen(listen_address, handle_peer, secret=secret)
    pool = ConnectionPool(secret)
    # values sent to peers are pickled, and those received unpickled, off the loop
    name = config.name or listener.address
    pickling = Offloader(f"{name}-pickle", config.serialize_timeout)
    unpickling = Offloader(f"{name}-unpickle", config.serialize_timeout)
    # large values to and from workers on this machine (and the kernel's gather)
    shared = SharedMemory(config.shared_memory_limit)
    worker = Worker(
        address=listener.address,
        loop=loop,
        peers=RemoteData(pool, who=listener.address, offloader=unpickling, shared=shared),
        config=config if config.name else config.replace(name=listener.address),
        clock=time.time,
        in_process=False,
    )
    worker.transfers.offloader = pickling
    worker.transfers.shared = shared
    pulse: Pulse | None = None
    if config.local_directory:
        worker.slots = RunningSlots(config.local_directory, worker.pool.idents)
        # alive while the loop is busy: the nanny reads it for a silent worker
        pulse = worker.pulse = Pulse(
            config.local_directory,
            interval=config.heartbeat_interval,
            stuck_seconds=config.loop_stuck_seconds,
            name=worker.name,
        )
        pulse.start()
    comm = await connect(scheduler_address, secret=secret)
    try:
        limit = getattr(comm, "max_message_size", None)
        register = RegisterWorker(
            worker.address, nthreads, memory_limit, worker.name, os.getpid(), limit
        )
        await comm.write(encode(register))
        reply = decode(await comm.read())
        if type(reply) is not Registered:
            raise RuntimeError(
                f"The scheduler refused this worker: {getattr(reply, 'reason', reply)}"
            )
        adopt_lower_limit(comm, reply.max_message_size)
        stream = StreamChannel(comm)
        exit_code = 0
        closing: set[asyncio.Task] = set()

        def give_up() -> None:  # stuck over its memory limit: its nanny starts a new one
            nonlocal exit_code
            exit_code = MEMORY_STUCK_EXIT
            # what it last told the scheduler (the values it could not spill) goes first
            closing.add(loop.create_task(_close_then_abort(stream, comm)))

        worker.memory.on_stuck = give_up
        worker.connect(stream)
        worker.start_periodic()
        try:
            while True:
                msgs = decode_batch(await comm.read(), worker.address, "the scheduler")
                worker.handle_scheduler_messages(msgs)
        except CommError:
            if not exit_code:
                logger.info("Worker %s lost its scheduler; shutting down", worker.address)
        finally:
            await worker.stop_tasks()  # no heartbeat after this (nor any fetch)
            stream.abort()
    finally:
        comm.abort()
        await worker.stop_tasks()  # none of its tasks outlives it (if it failed early)
        if pulse is not None:
            pulse.stop()
        await listener.stop()
        await pool.close()
        pickling.close(0)
        unpickling.close(0)
        shared.close()  # the segments no reader claimed
        with contextlib.suppress(Exception):
            worker.close()
    return exit_code


async def _close_then_abort(stream: StreamChannel, comm: Comm, timeout: float = 2.0) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stream.close(), timeout)
    comm.abort()
