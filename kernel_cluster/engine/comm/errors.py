"""Errors raised by the transport layer.

Every error keeps its facts in attributes (which address, why) so the engine
can log or react without parsing messages, and every error survives pickling:
a worker may report a comm failure to the scheduler inside a message.

Hierarchy::

    OSError
      CommError                 anything that went wrong on a comm
        CommClosedError         the comm cannot be used any more
          ProtocolError         the peer broke the wire format; we closed it
        AuthenticationError     the handshake failed (wrong or missing secret)
    TypeError
      SerializationError        a value cannot be pickled or unpickled
        SerializationTimeout    ... in the time allowed (serialize_timeout)
    ValueError
      MessageTooLargeError      a message exceeds the size limit; nothing was sent

``CommError`` derives from ``OSError`` so that code handling network
failures in general (``except OSError``) also handles ours. Authentication
failures are deliberately *not* ``CommClosedError``: retrying a connect with
the wrong secret never helps, so reconnect loops should let them through.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_MESSAGE_SIZE_ENV",
    "AuthenticationError",
    "CommClosedError",
    "CommError",
    "MessageTooLargeError",
    "ProtocolError",
    "SerializationError",
    "SerializationTimeout",
]

# the byte count that overrides the message size limit (read in frames)
MAX_MESSAGE_SIZE_ENV = "KERNEL_CLUSTER_MAX_MESSAGE_SIZE"


class CommError(OSError):
    """Base class of the transport's errors.

    ``address`` is the peer's address when known (None inside the sans-I/O
    codecs, which do not know who they talk to); ``reason`` says what happened.
    """

    default_reason = "communication error"

    def __init__(self, address: str | None = None, reason: str | None = None) -> None:
        self.address = address
        self.reason = reason or self.default_reason
        super().__init__(self._message())

    def _message(self) -> str:
        if self.address:
            return f"{self.address}: {self.reason}"
        return self.reason

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError's own reduce would rebuild from ``args`` (the message only).
        return (type(self), (self.address, self.reason))


class CommClosedError(CommError):
    """The comm is closed: by us, by the peer, or because it broke."""

    default_reason = "the comm is closed"


class ProtocolError(CommClosedError):
    """The peer sent bytes that do not follow the wire format.

    The comm that received them has been closed; the listener and other comms
    are unaffected.
    """

    default_reason = "protocol violation"


class AuthenticationError(CommError):
    """The connection handshake failed: the peer does not hold our secret,
    sent something other than a handshake, or went silent during it."""

    default_reason = "authentication failed"


_SEND_HINT = (
    "Everything sent to another process is pickled with cloudpickle: define "
    "functions at module level or in an importable module, and do not pass "
    "locks, sockets, open files, generators or other live resources as task "
    "arguments; create them inside the task instead."
)
_RECEIVE_HINT = (
    "The receiving process could not rebuild the value: check that the "
    "modules it refers to are importable there, with the same versions."
)


class SerializationError(TypeError):
    """A value could not be serialised, or a received one deserialised.

    ``what`` names the value for a human ("the function of task 'inc-1'"),
    ``type_name`` is its type, ``reason`` the underlying error (type and
    message), ``receiving`` tells the two directions apart. The message ends
    with what to do about it (``hint``).
    """

    def __init__(self, what: str, type_name: str, reason: str, receiving: bool = False) -> None:
        self.what = what
        self.type_name = type_name
        self.reason = reason
        self.receiving = receiving
        verb = "deserialize" if receiving else "serialize"
        super().__init__(
            f"Cannot {verb} {what} (an object of type {type_name}): {reason}. {self.hint}"
        )

    @property
    def hint(self) -> str:
        return _RECEIVE_HINT if self.receiving else _SEND_HINT

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.type_name, self.reason, self.receiving))


class SerializationTimeout(SerializationError):
    """A value took longer than ``seconds`` to pickle (or, ``receiving``, to unpickle):
    its task fails rather than keep the value's worker busy for ever."""

    def __init__(self, what: str, type_name: str, seconds: float, receiving: bool = False):
        self.seconds = seconds
        verb = "unpickling" if receiving else "pickling"
        super().__init__(
            what,
            type_name,
            f"{verb} it took more than {seconds:g} s (serialize_timeout={seconds:g})",
            receiving,
        )

    @property
    def hint(self) -> str:
        return (
            "Return values that pickle quickly (arrays and plain data rather than large "
            "graphs of Python objects; no slow __reduce__ or __setstate__), or give the "
            "workers more time: KernelCluster(serialize_timeout=...)."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.type_name, self.seconds, self.receiving))


class MessageTooLargeError(ValueError):
    """A message (or one value of it) is over the message size limit.

    Raised by the sender before anything is written, so the comm stays usable.
    ``what`` names the message or value, ``size`` and ``limit`` are in bytes.
    A ValueError, so code catching the old oversize ``ValueError`` still does.
    """

    def __init__(self, what: str, size: int, limit: int, detail: str = "") -> None:
        self.what = what
        self.size = size
        self.limit = limit
        self.detail = detail
        super().__init__(
            f"{detail}{what} is {size} bytes, over the message size limit "
            f"(max_message_size={limit} bytes), so it cannot be sent to another process. "
            f"Return smaller pieces (split the data over several tasks), or raise the limit "
            f"with the environment variable {MAX_MESSAGE_SIZE_ENV} before the cluster starts."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.size, self.limit, self.detail))
