"""Transport layer: authenticated message comms over TCP or inside the process.

The engine needs only what this package exports::

    listener = await listen("tcp://", handler, secret=secret)   # handler(comm)
    comm = await connect(listener.address, secret=secret)
    await comm.write({"op": "compute", "key": ("x-abc", 0)})
    msg = await comm.read()

Modules, bottom up: ``errors``; ``frames`` (sans-I/O framing); ``serialize``
(msgpack + cloudpickle, out-of-band buffers); ``auth`` (secrets and the
handshake); ``core`` (the Comm/Listener contract, ``connect``/``listen``);
``tcp`` and ``inproc`` (the transports); ``batched`` (``BatchedSend``).
"""

from .auth import TOKEN_ENV, new_secret, secret_from_env, secret_from_file, write_secret_file
from .batched import BatchedSend
from .core import Comm, Handler, Listener, connect, listen, parse_address
from .errors import (
    AuthenticationError,
    CommClosedError,
    CommError,
    MessageTooLargeError,
    ProtocolError,
    SerializationError,
)
from .serialize import check_serializable, dumps, loads

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
    "ProtocolError",
    "SerializationError",
    "check_serializable",
    "connect",
    "dumps",
    "listen",
    "loads",
    "new_secret",
    "parse_address",
    "secret_from_env",
    "secret_from_file",
    "write_secret_file",
]
