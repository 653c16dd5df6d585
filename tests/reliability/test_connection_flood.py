"""A flood of unauthenticated connections must neither spin the listener's loop
nor lock out the cluster's own processes once it ends (issue 17, item 13).

The listener runs in a child process with few file descriptors (RLIMIT_NOFILE),
so that the flood really exhausts them; the flood comes from this process, on
127.0.0.1 only, in bounded loops.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_cluster.engine.comm import TOKEN_ENV, connect, new_secret
from kernel_cluster.engine.comm.auth import HELLO_SIZE

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, sets rlimits")

ROOT = Path(__file__).resolve().parents[2]

# The child: an echo listener on 127.0.0.1, its descriptors limited to argv[1].
CHILD = """
import asyncio, logging, resource, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
from kernel_cluster.engine.comm import listen, secret_from_env

async def echo(comm):
    while True:
        await comm.write(await comm.read())

async def main():
    listener = await listen(
        "tcp://127.0.0.1:0", echo, secret=secret_from_env(), handshake_timeout=30
    )
    print(listener.address, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class Child:
    def __init__(self, nofile: int, tmp_path: Path) -> None:
        self.secret = new_secret()
        self.log = tmp_path / "child.log"
        env = {**os.environ, TOKEN_ENV: self.secret.hex()}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(nofile)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the child prints at once, or dies
        assert line.startswith("tcp://"), f"child failed: {self.log.read_text()[-2000:]}"
        self.address = line.strip()
        host, port = self.address.removeprefix("tcp://").rsplit(":", 1)
        self.host, self.port = host, int(port)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_fraction(self, seconds: float) -> float:
        before, t0 = self.cpu_seconds(), time.monotonic()
        time.sleep(seconds)  # measuring a rate over a window, not waiting for an event
        return (self.cpu_seconds() - before) / (time.monotonic() - t0)

    def log_lines(self) -> int:
        return len(self.log.read_text().splitlines())

    def echo(self, timeout: float = 15) -> object:
        """An authenticated round trip, retried until ``timeout``."""

        async def once() -> object:
            comm = await connect(self.address, secret=self.secret, timeout=2)
            try:
                await comm.write({"hello": 1})
                return await asyncio.wait_for(comm.read(), 5)
            finally:
                comm.abort()

        deadline = time.monotonic() + timeout
        while True:
            try:
                return asyncio.run(once())
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def flood(child: Child, n: int) -> list[socket.socket]:
    """Open up to ``n`` silent connections to the child; the ones that connected."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(0.2)
        try:
            s.connect((child.host, child.port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


@pytest.fixture
def starved(tmp_path: Path) -> Iterator[Child]:
    """A listener process with 64 file descriptors in all."""
    child = Child(64, tmp_path)
    try:
        yield child
    finally:
        child.close()


def test_flood_exhausting_descriptors_neither_spins_nor_locks_out(starved: Child) -> None:
    child = starved
    assert child.echo() == {"hello": 1}
    lines_before = child.log_lines()
    socks = flood(child, 170)
    try:
        assert len(socks) > 64  # more than the child can accept: it runs out
        cpu = child.cpu_fraction(2.0)
        lines = child.log_lines() - lines_before
        print(f"\nchild CPU during the flood: {cpu:.0%}; {lines} log lines")
        assert cpu < 0.25, f"the listener's loop spins: {cpu:.0%} CPU"
        assert lines < 50, f"{lines} log lines in 2 s"
    finally:
        for s in socks:
            s.close()
    assert child.echo() == {"hello": 1}  # the cluster's own connections get through


@pytest.fixture
def roomy(tmp_path: Path) -> Iterator[Child]:
    child = Child(4096, tmp_path)
    try:
        yield child
    finally:
        child.close()


def test_connections_beyond_the_handshake_cap_are_closed_at_once(roomy: Child) -> None:
    child = roomy
    socks = flood(child, 400)
    try:
        greeted = closed = 0
        for s in socks:
            s.settimeout(5)
            try:
                data = s.recv(HELLO_SIZE, socket.MSG_WAITALL)
            except OSError:  # reset: closed at once as well
                data = b""
            if len(data) == HELLO_SIZE:
                greeted += 1
            else:
                closed += 1
        print(f"\n{greeted} connections in the handshake, {closed} closed at once")
        assert 0 < greeted <= 128  # MAX_HANDSHAKES
        assert closed >= len(socks) - 128
        # while the silent ones hold every handshake slot, the CPU stays idle
        assert child.cpu_fraction(1.0) < 0.25
    finally:
        for s in socks:
            s.close()
    assert child.echo() == {"hello": 1}
