"""``Client``, the user's door, and ``get_client``.

``Client`` is assembled from parts with one job each, over a shared base (base.py:
its state and its event queue to the scheduler): submission.py (``submit``, ``map``,
``get``, ``compute``, ``persist``), results.py (``gather``, ``cancel``) and views.py
(fine metrics, task stream, profiles, spans, dashboard). Here: its lifetime (the
default cluster, default.py, when given none), and what it runs on every worker or
on the scheduler itself (``run``, plugins, ``restart``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any, NoReturn

import cloudpickle

from ..core.spec import MissingKeyError as MissingKeyError  # get's, importable here as before
from ..diagnostics.attach import set_default_source
from ..engine.cluster import KernelCluster
from ..engine.comm import SerializationError
from ..engine.plugins import check_plugin
from ..engine.pool import in_task_thread
from .call_keys import funcname
from .default import join_default, leave_default
from .futures import run_callback
from .results import Results
from .submission import Submission
from .views import Views

_current_client: Client | None = None


def get_client() -> Client:
    """The most recently created client that is still open."""
    if _current_client is None or _current_client.status != "running":
        if in_task_thread():  # a task of a worker process: Client() would start a cluster
            raise ValueError(
                "No client in this worker process: tasks of KernelCluster(processes=True) "
                "cannot submit work or compute dask collections on the cluster (in an "
                "embedded cluster they can). Return what the nested work needs and run it "
                "from the kernel, or compute it inside the task with dask's own "
                'scheduler (scheduler="sync").'
            )
        raise ValueError("No client is open; create one with kernel_cluster.Client().")
    return _current_client


class Client(Submission, Results, Views):
    """Submit work to a KernelCluster and collect the results.

    ``Client()`` creates (or reuses) the default embedded cluster; ``Client(cluster)``
    attaches to one you made. The default cluster lives while any ``Client()`` on it
    is open: the last one to close stops it. A cluster you made is yours to close.
    """

    def __init__(
        self,
        cluster: KernelCluster | None = None,
        *,
        set_as_default: bool = True,
        code_frames: int = 1,
    ):
        """``code_frames``: how many frames of your code each span remembers (0: none)."""
        global _current_client
        client_id = f"Client-{uuid.uuid4().hex[:12]}"
        if cluster is None:
            cluster, owned = join_default(client_id), True
        elif isinstance(cluster, KernelCluster):
            owned = False
            if cluster.status != "running":
                raise ValueError(f"{cluster!r} is not running; create a new KernelCluster.")
        else:
            raise TypeError(
                f"Client() takes a KernelCluster or nothing, got {type(cluster).__name__}."
            )
        super().__init__(client_id, cluster, code_frames)
        self._owns_cluster = owned  # the default cluster, shared with other Client()s
        try:
            self._loop.run(self._scheduler.add_client, self.id, self._futures.apply_reports)
        except BaseException:
            if owned:  # not a user of the default cluster after all
                leave_default(cluster, self.id)
            raise
        if set_as_default:
            _current_client = self
            set_default_source(self._source)

    # -- on every worker, and on the scheduler ----------------------------------------

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        workers: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Call ``fn(*args, **kwargs)`` on every worker (or those in ``workers``), with
        ``dask_worker=worker`` too if ``fn`` takes that.

        Returns ``{worker_address: result}``; an exception on any worker is raised here.
        """
        self._check_running()
        if args or kwargs:
            fn = functools.partial(fn, *args, **kwargs)
        if not self.cluster.processes:
            return self._loop.run(self._scheduler.run_on_workers, fn, workers)
        pickled = self._loop.run(self._scheduler.run_on_workers, _PickledResult(fn), workers)
        return {address: cloudpickle.loads(data) for address, data in pickled.items()}

    def register_plugin(self, plugin: Any, name: str | None = None) -> str:
        """Add a SchedulerPlugin (an instance); it is called from the engine's thread.
        Returns its name."""
        check_plugin(plugin, name)
        self._check_running()
        return self._loop.run(self._scheduler.register_plugin, plugin, name)

    def unregister_plugin(self, name: str) -> None:
        self._check_running()
        self._loop.run(self._scheduler.unregister_plugin, name)

    def restart(self) -> None:
        """Cancel every future on the cluster and replace every worker."""
        self._check_running()
        self.cluster.restart()

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        global _current_client
        if self.status == "closed":
            return
        with self._lock:
            self.status = "closing"
            self._futures.tracking = False
        if self.cluster.status == "running":
            try:
                self._loop.run(self._flush)
                self._loop.run(self._scheduler.remove_client, self.id)
            except (TimeoutError, RuntimeError):
                pass
        with self._lock:
            self.status = "closed"
            reason = (
                f"{self.id} was closed before it finished; keep the client open until "
                "you have gathered the results you need"
            )
            callbacks = self._futures.cancel_pending(reason)
        for cb in callbacks:
            run_callback(cb)
        if _current_client is self:
            _current_client = None
            set_default_source(None)
        if self._owns_cluster:
            leave_default(self.cluster, self.id)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self.id} cannot be pickled: a task in a worker process cannot use the client "
            "that submitted it. Pass the values it needs (or futures, which arrive as values) "
            "as arguments to submit() instead."
        )

    def __repr__(self) -> str:
        info = self.cluster
        return f"<Client {self.id} {self.status}, cluster={info!r}>"


class _PickledResult:
    """``client.run``'s function as a worker process calls it: the result is pickled
    there, so one that cannot travel raises an error naming it (and the fix) instead
    of breaking the connection it was to be sent on."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    async def __call__(self, dask_worker: Any) -> bytes:
        import inspect

        fn = self.fn
        try:
            takes_worker = "dask_worker" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_worker = False
        result = fn(dask_worker=dask_worker) if takes_worker else fn()
        if inspect.isawaitable(result):
            result = await result
        try:
            data: bytes = cloudpickle.dumps(result, protocol=5)
            return data
        except Exception as exc:
            raise SerializationError(
                f"the result of client.run({funcname(fn)}) on worker "
                f"{getattr(dask_worker, 'address', '?')}",
                type(result).__name__,
                f"{type(exc).__name__}: {exc}",
            ) from None
