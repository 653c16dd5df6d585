"""Transport layer: authenticated message comms over TCP or inside the process.

The engine needs only what this package exports::

    listener = await listen("tcp://", handler, secret=secret)   # handler(comm)
    comm = await connect(listener.address, secret=secret)
    await comm.write({"op": "compute", "key": ("x-abc", 0)})
    msg = await comm.read()

Modules, bottom up: ``errors``; ``frames`` (sans-I/O framing); ``serialize``
(msgpack + cloudpickle, out-of-band buffers); ``auth`` (secrets and the
handshake); ``core`` (the Comm/Listener base classes);
``tcp`` and ``inproc`` (the transports); ``batched`` (``BatchedSend``). The
package itself picks the transport for an address (``connect``/``listen``).
"""

from __future__ import annotations

from typing import Any

from . import inproc, tcp
from .auth import (
    TOKEN_ENV,
    new_secret,
    secret_from_env,
    secret_from_file,
    secret_from_stdin,
    write_secret_file,
)
from .batched import BatchedSend
from .core import Comm, Handler, Listener
from .errors import (
    AuthenticationError,
    CommClosedError,
    CommError,
    MessageTooLargeError,
    ProtocolError,
    SerializationError,
    SerializationTimeout,
)
from .serialize import Pickled, check_serializable, dumps, loads, pickle_value, unpickle

__all__ = [
    "TOKEN_ENV",
    "AuthenticationError",
    "BatchedSend",
    "Comm",
    "CommClosedError",
    "CommError",
    "Handler",
    "Listener",
    "MessageTooLargeError",
    "Pickled",
    "ProtocolError",
    "SerializationError",
    "SerializationTimeout",
    "check_serializable",
    "connect",
    "dumps",
    "listen",
    "loads",
    "new_secret",
    "parse_address",
    "pickle_value",
    "secret_from_env",
    "secret_from_file",
    "secret_from_stdin",
    "unpickle",
    "write_secret_file",
]


def parse_address(address: str) -> tuple[str, str]:
    """Split ``scheme://location``; raises ValueError on a bad address."""
    scheme, sep, location = address.partition("://")
    if not sep or not scheme:
        raise ValueError(
            f"address {address!r} has no scheme; use 'tcp://HOST:PORT' or 'inproc://NAME'"
        )
    if scheme not in ("tcp", "inproc"):
        raise ValueError(f"address {address!r}: unknown scheme {scheme!r}; use 'tcp' or 'inproc'")
    return scheme, location


async def connect(
    address: str, *, secret: bytes | None, timeout: float = 10, **options: Any
) -> Comm:
    """Open a comm to the listener at ``address``.

    ``secret`` is required for TCP and ignored by inproc. ``options`` go to
    the transport (TCP: ``max_message_size``, ``max_frames``). Raises
    ``CommClosedError`` if nobody listens there or the connection fails or
    ``timeout`` seconds pass, ``AuthenticationError`` if the handshake fails.
    """
    scheme, location = parse_address(address)
    if scheme == "tcp":
        return await tcp.connect(location, secret=secret, timeout=timeout, **options)
    return await inproc.connect(location, **options)


async def listen(
    address: str, handler: Handler, *, secret: bytes | None, **options: Any
) -> Listener:
    """Start listening at ``address`` and return the running listener.

    ``listener.address`` is the real address (with the port chosen when 0
    was asked for). ``secret`` is required for TCP and ignored by inproc.
    ``options`` go to the transport (TCP: ``handshake_timeout``, ``max_handshakes``,
    ``max_message_size``, ``max_frames``).
    """
    scheme, location = parse_address(address)
    if scheme == "tcp":
        return await tcp.listen(location, handler, secret=secret, **options)
    return await inproc.listen(location, handler, **options)
