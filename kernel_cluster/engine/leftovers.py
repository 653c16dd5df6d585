"""Directories of kernels that died without cleaning up, and how they are swept.

A KernelCluster keeps its token file and its workers' spill files under
``<tmp>/kernel-cluster-<pid>-*``. A kernel killed by SIGKILL (or SIGTERM, which
runs no ``atexit``) cannot remove it; its workers remove their own directories
and, the last of them, the cluster's (kernel_cluster/engine/cli.py). What is left even
so (a worker killed too) is swept by the next KernelCluster on the machine.

Each directory holds an owner file: the owning process's pid and start time. A
directory is stale when no process with that pid and start time runs, so a pid
reused by another process does not keep a dead kernel's directory alive, and a
live cluster's directory is never touched. Worker processes write one in their
own directories too: a worker that outlived its kernel without noticing (stuck
in a task that holds the GIL) is killed by the sweep.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import tempfile
import time

import psutil

logger = logging.getLogger(__name__)

OWNER_FILE = "owner.json"
PREFIX = "kernel-cluster-"
# a directory younger than this without an owner file may be one being made right now
_GRACE = 60.0


def write_owner_file(directory: str) -> None:
    me = psutil.Process()
    path = os.path.join(directory, OWNER_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump({"pid": me.pid, "create_time": me.create_time()}, f)
    os.replace(path + ".tmp", path)  # whole or absent, never half written


def remove_cluster_directory(directory: str) -> None:
    """Remove a dead owner's directory if nothing but its own files is left in it."""
    for name in ("token", OWNER_FILE):
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # fails while another worker's directory is still there


def _kill_orphans(directory: str) -> None:
    """Kill the worker processes of a dead kernel's directory that still run."""
    for owner_file in glob.glob(os.path.join(directory, "*", OWNER_FILE)):
        owner = _read_owner(owner_file)
        if owner is None or not alive(*owner):
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(owner[0])
            process.kill()
            process.wait(2)
            logger.warning("Killed worker process %d, left running by a dead kernel", owner[0])


def _read_owner(path: str) -> tuple[int, float] | None:
    try:
        with open(path) as f:
            owner = json.load(f)
        return int(owner["pid"]), float(owner["create_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def alive(pid: int, create_time: float | None) -> bool:
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 1.0:
            return False  # the pid was reused
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # cannot tell (another user's process): assume alive
        return True


def _owner(directory: str) -> tuple[int, float | None] | None:
    """The owner's pid and start time; None when unknown (then the directory is kept)."""
    path = os.path.join(directory, OWNER_FILE)
    if os.path.exists(path):
        return _read_owner(path)
    # made by a version without owner files, or right now: the pid is in the name
    try:
        if time.time() - os.stat(directory).st_mtime < _GRACE:
            return None
    except OSError:
        return None
    pid = os.path.basename(directory)[len(PREFIX) :].split("-", 1)[0]
    return (int(pid), None) if pid.isdigit() else None


def sweep_stale_directories(root: str | None = None) -> list[str]:
    """Remove the directories of dead kernels (and workers) in ``root``; return them."""
    removed = []
    for directory in glob.glob(os.path.join(root or tempfile.gettempdir(), PREFIX + "*")):
        try:
            if os.path.islink(directory) or not os.path.isdir(directory):
                continue
            if os.stat(directory).st_uid != os.getuid():
                continue  # another user's: not ours to judge
        except OSError:
            continue
        owner = _owner(directory)
        if owner is None or alive(*owner):
            continue
        _kill_orphans(directory)
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.exists(directory):
            removed.append(directory)
    if removed:
        logger.info("Removed %d directories left by dead kernels: %s", len(removed), removed)
    return removed
