"""The default cluster: the one ``Client()`` starts when given none, shared by every
such client and closed by the last of them to close (or at the process's exit)."""

from __future__ import annotations

import threading

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
        if _default_cluster is None or _default_cluster.status != "running":
            _default_cluster = KernelCluster()
            _default_users.clear()
        _default_users.add(client_id)
        return _default_cluster


def leave_default(cluster: KernelCluster, client_id: str) -> None:
    """``client_id`` no longer uses the default ``cluster``: close it if it was the last."""
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
