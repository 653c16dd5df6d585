"""The default cluster: the one ``Client()`` starts when given none, shared by every
such client and closed by the last of them to close (or at the process's exit); and
the cluster of a client given cluster keywords (``Client(n_workers=2)``), its own."""

from __future__ import annotations

import threading
from typing import Any

from ..engine.cluster import KernelCluster

_default_cluster: KernelCluster | None = None
_default_users: set[str] = set()  # ids of the open clients on the default cluster
_default_lock = threading.Lock()


def join_default(client_id: str) -> KernelCluster:
    """The default cluster, started if need be, with ``client_id`` among its users.

    It lives while any client uses it: the last one to close closes it (and the
    process's exit closes whatever is left).
    """
    global _default_cluster
    with _default_lock:
        if (
            _default_cluster is None
            or _default_cluster.status != "running"
            or not _default_cluster.in_this_process  # a forked child's: its parent's
        ):
            _default_cluster = KernelCluster()
            _default_users.clear()
        _default_users.add(client_id)
        return _default_cluster


def own_cluster(kwargs: dict[str, Any]) -> KernelCluster:
    """``Client(n_workers=2, processes=True, ...)``: a KernelCluster made from those
    keywords, for that client alone, which closes it (a bad keyword is
    KernelCluster's TypeError)."""
    if "address" in kwargs or "scheduler_file" in kwargs:
        raise TypeError(
            "kernel_cluster.Client() starts its own cluster and connects to no address; "
            "for a Dask scheduler use distributed.Client(address) (and "
            "kernel_cluster.attach(it) for the views)."
        )
    return KernelCluster(**kwargs)


def leave_default(cluster: KernelCluster, client_id: str) -> None:
    """``client_id`` no longer uses ``cluster``: close it if it was the last user of
    the default cluster, or if it was the client's own (``own_cluster``)."""
    global _default_cluster
    with _default_lock:
        if cluster is _default_cluster:
            _default_users.discard(client_id)
            if _default_users:
                return
            _default_cluster = None
    cluster.close()


def default_cluster() -> KernelCluster | None:
    """The default cluster, if one was started and not yet closed by its last client."""
    return _default_cluster
