"""``kernel-cluster-worker ADDRESS`` (or ``python -m kernel_cluster.engine.cli``, as the
nanny in engine/cluster.py starts it): join a cluster running elsewhere on this machine.

The cluster's secret comes on standard input (``--token-stdin``: how a KernelCluster
starts its workers), from ``--token-file``, or from the ``KERNEL_CLUSTER_TOKEN``
environment variable (hex); never from the command line, where other users of the
machine could read it in the process list. The variable is removed from the worker's
environment once read, so that tasks and the processes they start do not inherit it;
/proc/<pid>/environ keeps the first environment, hence stdin for our own workers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable

from .comm import TOKEN_ENV, secret_from_env, secret_from_file, secret_from_stdin
from .config import WorkerConfig
from .leftovers import remove_cluster_directory, write_owner_file
from .shared_memory import remove_segments_of
from .worker_process import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kernel-cluster-worker", description="Join a kernel-cluster scheduler as a worker."
    )
    parser.add_argument("address", help="the scheduler's address, e.g. tcp://127.0.0.1:40123")
    parser.add_argument(
        "--token-file", help=f"file holding the cluster's secret (default: ${TOKEN_ENV})"
    )
    parser.add_argument(
        "--token-stdin",
        action="store_true",
        help="read the cluster's secret (hex) as the first line of standard input: how a "
        f"KernelCluster starts its workers. ${TOKEN_ENV} works too, but stays readable in "
        "/proc/<pid>/environ for the life of the process",
    )
    WorkerConfig.add_arguments(parser)  # every worker setting (engine/config.py)
    args = parser.parse_args(argv)
    try:
        config = WorkerConfig.from_namespace(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    secret: bytes | None
    if args.token_stdin:
        secret = secret_from_stdin()
    elif args.token_file:
        secret = secret_from_file(args.token_file)
    else:
        secret = secret_from_env()
    # read once: tasks, and the processes they start, inherit the environment
    os.environ.pop(TOKEN_ENV, None)
    if secret is None:
        print(
            f"kernel-cluster-worker: no secret; set {TOKEN_ENV} or pass --token-file.",
            file=sys.stderr,
        )
        return 2
    if config.local_directory is None:
        import tempfile

        config = config.replace(
            local_directory=tempfile.mkdtemp(prefix="kernel-cluster-worker-"),
            remove_local_directory=True,
        )
    if config.remove_local_directory:  # ours: a sweep may judge it (engine/leftovers.py)
        assert config.local_directory is not None
        os.makedirs(config.local_directory, exist_ok=True)
        write_owner_file(config.local_directory)
    cleanup = functools.partial(_clean_up, config)
    _exit_with_owner(config.owner_pid, cleanup)
    code = 0
    try:
        code = asyncio.run(serve(args.address, secret, config))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"kernel-cluster-worker: cannot reach {args.address}: {exc}", file=sys.stderr)
        return 1
    else:
        return code
    finally:
        if code == 0:  # the scheduler's connection closed: perhaps the owner is dying
            _wait_for_owner_death(config.owner_pid)
        cleanup()
    return 0


def _owner_gone(owner_pid: int | None) -> bool:
    # the owner is our parent: once it is gone we are someone else's child, so a pid
    # reused by another process cannot pass for it
    return owner_pid is not None and os.getppid() != owner_pid


def _wait_for_owner_death(owner_pid: int | None, timeout: float = 2.0) -> None:
    """The scheduler's connection closed: if the owner is dying, give it a moment.

    A dying process's sockets close before its children are handed to a new parent,
    so a worker that saw the connection close may still see its owner as parent, and
    would leave the owner's directory behind. The owner's death signal (SIGTERM)
    usually arrives meanwhile and cleans up at once. An owner that lives on (it
    dropped this worker) stops it with SIGTERM anyway.
    """
    if owner_pid is None:
        return
    deadline = time.monotonic() + timeout
    while not _owner_gone(owner_pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _clean_up(config: WorkerConfig) -> None:
    """Remove what this worker leaves on disk: its directory (spill files), its shared
    memory segments not claimed, and, when
    its owner died without cleaning up, the owner's directory once no other worker's
    directory is left in it (the last worker to go removes it)."""
    if config.remove_local_directory and config.local_directory:
        shutil.rmtree(config.local_directory, ignore_errors=True)
    remove_segments_of(os.getpid())  # made for readers that never claimed them
    if config.cluster_directory and _owner_gone(config.owner_pid):
        remove_cluster_directory(config.cluster_directory)


def _exit_with_owner(owner_pid: int | None, cleanup: Callable[[], None]) -> None:
    """Leave no worker or file behind when the owner dies, even by SIGKILL.

    A responsive worker notices anyway (its scheduler connection closes, ``serve``
    returns); the owner's death signal (Linux) also ends one that is still starting
    or is in a task that lets go of the GIL. SIGTERM (the nanny stops a worker with
    it) cleans up, then ends the process as the signal would have.

    The death signal is SIGHUP, not SIGTERM: it is sent when the owner's *thread*
    that started the worker exits, which in a process being killed may come before
    the process is gone (the worker is then handed to a sibling thread). Its handler
    waits for the owner process to be gone before cleaning up after it.
    """

    def on_signal(signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            _wait_for_owner_death(owner_pid)
        cleanup()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_signal)
    if owner_pid is None:
        return
    signal.signal(signal.SIGHUP, on_signal)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)
    if _owner_gone(owner_pid):  # it died before the death signal was armed
        cleanup()
        sys.exit(0)


_PR_SET_PDEATHSIG = 1


if __name__ == "__main__":
    sys.exit(main())
