"""Cluster secrets and the connection handshake (sans-I/O).

Every cluster has a random secret shared by its processes. It reaches a
subprocess through the environment (``KERNEL_CLUSTER_TOKEN``, hex) or a file
readable only by the user, never through the command line, where any local
user could read it in the process list.

Before a single byte of a message is decoded, both ends of a TCP connection
prove they hold the secret, without sending it::

    server -> client   hello: MAGIC + server nonce        (both send at once)
    client -> server   hello: MAGIC + client nonce
    client -> server   HMAC-SHA256(secret, "client" | client nonce | server nonce)
    server -> client   HMAC-SHA256(secret, "server" | client nonce | server nonce)

The server answers only after checking the client's proof, so an
unauthenticated peer never obtains a value computed with the secret. Each
side contributes a fresh nonce, so no proof can be replayed on another
connection, and the role label stops a proof being reflected back to its
author. Proofs are compared in constant time. The handshake runs on raw bytes
of fixed sizes: a peer that sends anything else (say, a pickle) fails at the
first check, before any parser sees its data.

This does not encrypt the traffic: it keeps other local users and stray
connections out of a loopback-only cluster.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from pathlib import Path
from typing import Literal

from .errors import AuthenticationError

__all__ = [
    "HELLO_SIZE",
    "MIN_SECRET_SIZE",
    "PROOF_SIZE",
    "TOKEN_ENV",
    "Handshake",
    "check_secret",
    "new_secret",
    "secret_from_env",
    "secret_from_file",
    "secret_from_stdin",
    "write_secret_file",
]

TOKEN_ENV = "KERNEL_CLUSTER_TOKEN"
SECRET_SIZE = 32
MIN_SECRET_SIZE = 16

HELLO_MAGIC = b"KCAUTH01"
NONCE_SIZE = 32
HELLO_SIZE = len(HELLO_MAGIC) + NONCE_SIZE
PROOF_SIZE = hashlib.sha256().digest_size

Role = Literal["client", "server"]


def new_secret() -> bytes:
    """A fresh random cluster secret."""
    return secrets.token_bytes(SECRET_SIZE)


def _from_hex(text: str, source: str) -> bytes:
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"{source} does not hold a hex-encoded secret") from None
    check_secret(secret, source)
    return secret


def check_secret(secret: object, source: str = "the secret") -> bytes:
    """Return ``secret`` if it is usable, else raise a ValueError saying why."""
    if not isinstance(secret, bytes):
        raise TypeError(f"{source} must be bytes (see new_secret()), not {type(secret).__name__}")
    if len(secret) < MIN_SECRET_SIZE:
        raise ValueError(f"{source} is {len(secret)} bytes; use at least {MIN_SECRET_SIZE}")
    return secret


def secret_from_env(name: str = TOKEN_ENV) -> bytes | None:
    """The secret in environment variable ``name`` (hex), or None if unset."""
    value = os.environ.get(name)
    if value is None:
        return None
    return _from_hex(value, f"environment variable {name}")


def secret_from_stdin() -> bytes:
    """The secret (hex) on the first line of standard input: how a KernelCluster hands
    it to its worker processes, leaving no trace in their environment."""
    return _from_hex(sys.stdin.readline(), "the first line of standard input")


def secret_from_file(path: str | os.PathLike[str]) -> bytes:
    """The secret stored (hex) in the file at ``path``."""
    return _from_hex(Path(path).read_text(), f"secret file {os.fspath(path)!r}")


def write_secret_file(path: str | os.PathLike[str], secret: bytes) -> None:
    """Store ``secret`` (hex) in a new file only its owner can read."""
    check_secret(secret)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex())


def _proof(secret: bytes, role: Role, client_nonce: bytes, server_nonce: bytes) -> bytes:
    message = b"kernel-cluster/" + role.encode() + b"/" + client_nonce + server_nonce
    return hmac.new(secret, message, hashlib.sha256).digest()


class Handshake:
    """One side's state in the handshake; the transport moves the bytes.

    ``hello`` is what to send first. Feed the peer's hello (exactly
    ``HELLO_SIZE`` bytes) to ``receive_hello``; ``proof()`` is then ours to
    send and ``check_proof`` verifies the peer's (``PROOF_SIZE`` bytes).
    Failures raise ``AuthenticationError`` without an address; the transport
    adds it.
    """

    def __init__(self, secret: bytes, role: Role, nonce: bytes | None = None) -> None:
        self._secret = check_secret(secret)
        self.role = role
        self._nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_SIZE)
        self._peer_nonce: bytes | None = None
        self.hello = HELLO_MAGIC + self._nonce

    def receive_hello(self, data: bytes) -> None:
        if len(data) != HELLO_SIZE or not data.startswith(HELLO_MAGIC):
            raise AuthenticationError(
                reason="peer did not open with the kernel-cluster handshake "
                f"(first bytes: {bytes(data[:16])!r})"
            )
        self._peer_nonce = bytes(data[len(HELLO_MAGIC) :])

    def _nonces(self) -> tuple[bytes, bytes]:
        if self._peer_nonce is None:
            raise RuntimeError("receive_hello() must come first")
        if self.role == "client":
            return self._nonce, self._peer_nonce
        return self._peer_nonce, self._nonce

    def proof(self) -> bytes:
        return _proof(self._secret, self.role, *self._nonces())

    def check_proof(self, data: bytes) -> None:
        peer_role: Role = "server" if self.role == "client" else "client"
        expected = _proof(self._secret, peer_role, *self._nonces())
        if not hmac.compare_digest(expected, bytes(data)):
            raise AuthenticationError(reason=f"the {peer_role} does not hold the cluster secret")
