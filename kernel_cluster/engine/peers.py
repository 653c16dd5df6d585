"""InProcessPeers: the registry of a cluster's embedded workers, by address.

Embedded workers read each other's data directly from it (same process, no copies);
the addresses of worker processes go to a RemoteData over TCP. Not to be confused with
a worker's ``local_directory``, the path its spill files go to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.keys import Key
from .tcp_workers import RemoteData

if TYPE_CHECKING:  # annotations only: worker.py does not import this module
    from .worker import Worker

__all__ = ["InProcessPeers"]


class InProcessPeers:
    """Embedded workers by address; other addresses are handed to ``remote``."""

    def __init__(self, remote: RemoteData | None = None) -> None:
        self.workers: dict[str, Worker] = {}
        self.remote = remote

    async def get_data(
        self, peer: str, keys: list[Key], stats: dict | None = None, who: str = "scheduler"
    ) -> tuple[dict, dict]:
        """``who`` reads ``keys`` from ``peer`` (logged by ``peer`` as sent to ``who``)."""
        worker = self.workers.get(peer)
        if worker is not None:
            return worker.transfers.send_data(keys, who)
        if self.remote is not None and not peer.startswith("inproc://"):
            return await self.remote.get_data(peer, keys, stats)
        raise OSError(f"Worker {peer} is gone")

    async def run(self, peer: str, fn: Any) -> Any:
        worker = self.workers.get(peer)
        if worker is not None:
            return await worker.run_function(fn)
        if self.remote is None:
            raise OSError(f"Worker {peer} is gone")
        import cloudpickle

        from .execute import unpack_exception
        from .wire import RequestFailed, Run, RunResult

        reply = await self.remote.pool.rpc(peer, Run(cloudpickle.dumps(fn)))
        if type(reply) is RequestFailed:
            exc, tb = unpack_exception(reply.exception, reply.traceback)
            raise exc.with_traceback(tb)
        if type(reply) is not RunResult:
            raise OSError(f"Worker {peer} answered run with {reply!r}")
        return cloudpickle.loads(reply.result)
