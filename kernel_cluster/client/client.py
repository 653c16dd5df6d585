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
import numbers
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
from ..engine.run_function import RUN_TIMEOUT, RunTimeoutError
from .asynchronous import Asynchronous
from .call_keys import funcname
from .default import join_default, leave_default, own_cluster
from .futures import run_callback
from .graph_packing import worker_addresses
from .results import Results
from .runs import record_cluster
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

    def __new__(cls, *args: Any, asynchronous: bool = False, **kwargs: Any) -> Client:
        # Client(asynchronous=True) is an AsyncClient: the same client whose waiting
        # methods return awaitables (asynchronous.py)
        if asynchronous and not issubclass(cls, Asynchronous):
            cls = AsyncClient
        return super().__new__(cls)

    def __init__(
        self,
        cluster: KernelCluster | None = None,
        *,
        asynchronous: bool = False,
        set_as_default: bool = True,
        code_frames: int = 1,
        **cluster_kwargs: Any,
    ):
        """``code_frames``: how many frames of your code each span remembers (0: none).

        ``cluster_kwargs`` (``n_workers``, ``threads_per_worker``, ``processes``,
        ``memory_limit`` and the other ``KernelCluster`` keywords), as
        ``distributed.Client(processes=True, n_workers=2)`` takes them: a cluster of
        this client's own, made from them and closed with it.

        ``asynchronous=True``: for a running event loop (a notebook's, ``asyncio.run``):
        ``client = await Client(asynchronous=True)`` or ``async with Client(...) as
        client:`` starts it without blocking the loop, and its waiting methods
        (``gather``, ``result``, ``scheduler_info``, ``run``, ``close``, ...) return
        awaitables (``kernel_cluster.client.asynchronous``)."""
        client_id = f"Client-{uuid.uuid4().hex[:12]}"
        if cluster_kwargs:
            if cluster is not None:
                raise TypeError(
                    f"Client() got a cluster and cluster keywords ({', '.join(cluster_kwargs)})"
                    "; give the keywords to KernelCluster(...) instead, or leave the "
                    "cluster out to have Client make one from them."
                )
        elif cluster is not None:
            if not isinstance(cluster, KernelCluster):
                raise TypeError(
                    f"Client() takes a KernelCluster or nothing, got {type(cluster).__name__}."
                )
            if cluster.status != "running":
                raise ValueError(f"{cluster!r} is not running; create a new KernelCluster.")
        self.id = client_id
        self._start_args = (cluster, cluster_kwargs, set_as_default, code_frames)
        if asynchronous:
            self.status = "newly-created"  # started by ``await client`` (Asynchronous)
            return
        self._start()

    def _start(self) -> None:
        """Join (or make) the cluster and register with its scheduler: blocking (a
        cluster of worker processes takes seconds), so an asynchronous client runs it
        in a thread."""
        global _current_client
        cluster, cluster_kwargs, set_as_default, code_frames = self._start_args
        if cluster_kwargs:
            cluster, owned = own_cluster(cluster_kwargs), True
        elif cluster is None:
            cluster, owned = join_default(self.id), True
        else:
            owned = False
        super().__init__(self.id, cluster, code_frames)
        self._owns_cluster = owned  # the default cluster, shared with other Client()s
        try:
            self._loop.run(self._scheduler.add_client, self.id, self._futures.apply_reports)
        except BaseException:
            self.status = "closed"
            if owned:  # not a user of the default cluster after all
                leave_default(cluster, self.id)
            raise
        record_cluster(cluster, self._source)  # its finished spans go to the run history
        if set_as_default:
            _current_client = self
            set_default_source(self._source)

    # -- on every worker, and on the scheduler ----------------------------------------

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        workers: list[str] | str | None = None,
        timeout: float | None = RUN_TIMEOUT,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Call ``fn(*args, **kwargs)`` on every worker (or those in ``workers``: an
        address or a list of them), with ``dask_worker=worker`` too if ``fn`` takes that.

        Returns ``{worker_address: result}``; an exception on any worker is raised here.
        ``fn`` runs on the worker's event loop, as in Dask: a worker that has not
        answered within ``timeout`` seconds (None: no limit) raises RunTimeoutError, a
        TimeoutError naming ``fn``; the worker carries on once ``fn`` returns.
        """
        if not callable(fn):
            raise TypeError(f"run() needs a callable first, got {type(fn).__name__} {fn!r}.")
        self._check_running()
        if workers is not None:
            addresses = list(worker_addresses(workers, "workers"))
            known = self._loop.run(lambda: set(self._scheduler.state.workers))
            unknown = [a for a in addresses if a not in known]
            if unknown:
                raise ValueError(
                    f"run(workers=...): {', '.join(map(repr, unknown))} is not a worker of "
                    f"{self.cluster.name}; its workers are {', '.join(sorted(known)) or 'none'}."
                )
            workers = addresses
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, numbers.Real)
            or not 0 < timeout < float("inf")
        ):
            raise ValueError(
                f"timeout={timeout!r}: give a positive number of seconds, or None to wait for ever."
            )
        name = funcname(fn)
        if args or kwargs:
            fn = functools.partial(fn, *args, **kwargs)
        processes = self.cluster.processes
        call = _PickledResult(fn) if processes else fn
        # the engine times out each worker process; this wait is for a function that
        # blocks the engine's loop itself (embedded workers run it there)
        wait = None if timeout is None else timeout + (5.0 if processes else 0.0)
        try:
            results = self._loop.run(
                self._scheduler.run_on_workers, call, workers, timeout, name, timeout=wait
            )
        except RunTimeoutError:
            raise
        except TimeoutError:
            raise RunTimeoutError(name, timeout or 0) from None
        if not processes:
            return results
        return {address: cloudpickle.loads(data) for address, data in results.items()}

    def register_plugin(self, plugin: Any, name: str | None = None) -> str:
        """Add a SchedulerPlugin (an instance); it is called from the engine's thread.
        Returns its name."""
        check_plugin(plugin, name)
        self._check_running()
        return self._loop.run(self._scheduler.register_plugin, plugin, name)

    def unregister_plugin(self, name: str) -> None:
        self._check_running()
        self._loop.run(self._scheduler.unregister_plugin, name)

    def run_on_scheduler(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` on the scheduler's event-loop thread and return
        its result (awaited if it is a coroutine), with ``dask_scheduler=`` the
        scheduler if ``fn`` takes that: ``dask_scheduler.extensions["spans"].spans``
        are the spans. ``fn`` runs between the engine's steps: keep it short."""
        self._check_running()
        if not callable(fn):
            raise TypeError(
                f"run_on_scheduler() needs a callable first, got {type(fn).__name__} {fn!r}."
            )
        if _takes(fn, "dask_scheduler"):
            kwargs = {**kwargs, "dask_scheduler": self._scheduler}
        return self._loop.run(functools.partial(fn, *args, **kwargs))

    def restart(self) -> None:
        """Cancel every future on the cluster and replace every worker."""
        self._check_running()
        self.cluster.restart()

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Release every future and leave the cluster (the default one closes with its
        last client). Not from a done-callback or a task of the cluster: RuntimeError."""
        global _current_client
        if self.status == "newly-created":  # an asynchronous client never awaited
            self.status = "closed"
        if self.status == "closed":
            return
        if self.cluster.status == "running" and self.cluster.in_this_process:
            self.cluster.refuse_own_threads("Client.close()")
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


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` has a parameter called ``name``."""
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class AsyncClient(Asynchronous, Client):  # type: ignore[misc]  # close() is awaitable here
    """What ``Client(asynchronous=True)`` makes: a Client for a running event loop
    (see ``kernel_cluster.client.asynchronous``)."""


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
