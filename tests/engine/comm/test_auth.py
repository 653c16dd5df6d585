"""Secrets and the handshake state machine, without sockets."""

from __future__ import annotations

import os
import stat

import pytest

from kernel_cluster.engine.comm import (
    TOKEN_ENV,
    AuthenticationError,
    new_secret,
    secret_from_env,
    secret_from_file,
    write_secret_file,
)
from kernel_cluster.engine.comm.auth import HELLO_SIZE, PROOF_SIZE, Handshake

pytestmark = pytest.mark.timeout(30)


def test_new_secret_is_random_and_long_enough():
    a, b = new_secret(), new_secret()
    assert isinstance(a, bytes) and len(a) == 32
    assert a != b


def test_secret_from_env(monkeypatch):
    secret = new_secret()
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert secret_from_env() is None
    monkeypatch.setenv(TOKEN_ENV, secret.hex() + "\n")
    assert secret_from_env() == secret
    monkeypatch.setenv(TOKEN_ENV, "not hex")
    with pytest.raises(ValueError, match=TOKEN_ENV):
        secret_from_env()
    monkeypatch.setenv(TOKEN_ENV, "abcd")
    with pytest.raises(ValueError, match="at least 16"):
        secret_from_env()


def test_secret_file_is_private(tmp_path):
    path = tmp_path / "token"
    secret = new_secret()
    write_secret_file(path, secret)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert secret_from_file(path) == secret
    with pytest.raises(FileExistsError):  # never overwrite someone else's file
        write_secret_file(path, secret)


def handshake_pair(client_secret: bytes, server_secret: bytes) -> tuple[Handshake, Handshake]:
    client, server = Handshake(client_secret, "client"), Handshake(server_secret, "server")
    assert len(client.hello) == len(server.hello) == HELLO_SIZE
    client.receive_hello(server.hello)
    server.receive_hello(client.hello)
    return client, server


def test_handshake_with_the_same_secret():
    secret = new_secret()
    client, server = handshake_pair(secret, secret)
    proof = client.proof()
    assert len(proof) == PROOF_SIZE
    server.check_proof(proof)
    client.check_proof(server.proof())


def test_handshake_with_another_secret_fails_on_the_server():
    client, server = handshake_pair(new_secret(), new_secret())
    with pytest.raises(AuthenticationError, match="client does not hold"):
        server.check_proof(client.proof())


def test_a_proof_cannot_be_reflected_or_replayed():
    secret = new_secret()
    client, _ = handshake_pair(secret, secret)
    with pytest.raises(AuthenticationError):
        client.check_proof(client.proof())  # our own proof sent back to us
    _, other_server = handshake_pair(secret, secret)
    with pytest.raises(AuthenticationError):
        other_server.check_proof(client.proof())  # from another connection


def test_anything_but_a_hello_is_refused():
    server = Handshake(new_secret(), "server")
    with pytest.raises(AuthenticationError, match="handshake"):
        server.receive_hello(b"\x80\x05" + b"\x00" * (HELLO_SIZE - 2))  # a pickle header
    with pytest.raises(AuthenticationError):
        server.receive_hello(b"short")


def test_secret_must_be_bytes_of_decent_length():
    with pytest.raises(TypeError):
        Handshake("a string", "client")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Handshake(b"short", "client")
