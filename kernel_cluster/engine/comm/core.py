"""The transport contract: the ``Comm`` and ``Listener`` base classes.

``connect``/``listen`` (in the package, ``comm/__init__.py``) pick the transport;
the transports import this module, never the other way round.

An address is ``scheme://location``:

- ``tcp://HOST:PORT``: a TCP connection, authenticated with the cluster
  secret before anything is decoded (see ``tcp``). ``tcp://`` alone or port
  0 when listening picks 127.0.0.1 and a free port.
- ``inproc://NAME``: a pair of queues in this process; messages are passed
  as Python objects, never serialised (see ``inproc``).

Both transports give the same behaviour to the code above them, except where
noted in their modules (inproc does not copy messages, TCP turns lists into
tuples). A comm carries whole messages, in order; reading from a comm whose
peer went away raises ``CommClosedError``.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .errors import CommClosedError

logger = logging.getLogger(__name__)

__all__ = ["Comm", "Handler", "Listener", "ListenerBase"]


class Comm(abc.ABC):
    """One end of a bidirectional message stream.

    Only one task may ``read`` at a time; concurrent ``write`` calls are
    allowed and each message is written whole. ``peer_address`` and
    ``local_address`` stay valid after the comm is closed.
    """

    peer_address: str
    local_address: str

    @abc.abstractmethod
    async def read(self) -> Any:
        """The next message. Raises ``CommClosedError`` once the comm is closed
        or the peer went away (after any messages it sent before that)."""

    @abc.abstractmethod
    async def write(self, msg: Any) -> int:
        """Send ``msg``; returns once it is handed to the OS (TCP) or queued
        for the peer (inproc). Returns the number of bytes written, 0 for
        inproc. Raises ``SerializationError`` if the message cannot be encoded
        (the comm stays usable) and ``CommClosedError`` if the comm is closed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close this end; the peer's reads then raise ``CommClosedError``."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Close at once, without waiting for anything (safe in finalisers)."""

    @abc.abstractmethod
    def closed(self) -> bool:
        """True after ``close``/``abort``, or once a read or write found the
        comm broken."""

    async def __aenter__(self) -> Comm:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed() else "open"
        return f"<{type(self).__name__} {self.local_address} -> {self.peer_address} {state}>"


Handler = Callable[[Comm], Awaitable[None]]


class Listener(abc.ABC):
    """Accepts connections and runs ``handler(comm)`` for each, as a task.

    The handler owns its comm and may keep it after returning (e.g. hand it
    to a stream reader); if the handler raises, the comm is aborted.
    ``stop()`` closes the listening socket and every comm accepted, and
    cancels handler tasks still running.
    """

    address: str

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop accepting; close accepted comms; cancel running handlers."""

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"


class ListenerBase(Listener):
    """Book-keeping shared by the transports' listeners: the tasks serving
    connections and the comms they accepted, so ``stop()`` can end them all."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()
        # Strong references: a comm its handler dropped still holds a socket
        # that stop() must close. Closed ones are pruned as new ones arrive.
        self._comms: set[Comm] = set()
        self._stopped = False

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, comm: Comm) -> None:
        """Run the handler on an accepted comm (inside a ``_spawn``ed task)."""
        if self._stopped:
            comm.abort()
            return
        self._comms = {c for c in self._comms if not c.closed()}
        self._comms.add(comm)
        try:
            await self._handler(comm)
        except CommClosedError as exc:
            # The handler let a closed comm end it: ordinary, not a bug.
            logger.debug("Handler for %s ended: %s", comm, exc)
            comm.abort()
        except Exception:
            logger.exception("Handler for %s on %s failed; closing the comm", comm, self.address)
            comm.abort()

    async def _stop_serving(self) -> None:
        self._stopped = True
        for comm in list(self._comms):
            comm.abort()
        self._comms.clear()
        # stop() may run inside one of our handlers (a "terminate" message):
        # that task must not cancel and wait for itself.
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
