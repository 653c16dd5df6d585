"""Scheduler plugins: hooks into what the scheduler does, for users and instruments alike.

The task stream is one of these; a user's plugin gets the same calls. A plugin
that raises is logged and switched off: it can never break the scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

logger = logging.getLogger(__name__)


class SchedulerPlugin:
    """Subclass and override what you need; register with ``client.register_plugin``.

    ``transitions``: the (start, finish) pairs this plugin wants ``transition`` calls
    for; ``None`` (the default) means every transition. Narrowing it keeps the
    scheduler fast: the hook sits on every task's path.
    """

    name: str | None = None
    transitions: ClassVar[frozenset[tuple[str, str]] | None] = None
    # the engine's own plugins read ``startstops`` as (action, start, stop[, source])
    # tuples, cheap to keep by the thousand; a user's gets Dask's dicts
    raw_startstops: ClassVar[bool] = False

    def start(self, scheduler: Any) -> None:
        """Registered with a running scheduler."""

    def update_graph(self, scheduler: Any, *, client: str, keys: list, **kwargs: Any) -> None:
        """A client submitted tasks; ``keys`` are the ones it wants."""

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        """A task changed state. For tasks that ran, ``kwargs`` has ``worker``,
        ``startstops`` (as Dask's: a list of ``{"action", "start", "stop"}`` dicts on
        the scheduler's clock, a transfer's with its ``source`` worker), ``thread``,
        ``nbytes``, ``prefix`` and ``span_id``."""

    def add_worker(self, scheduler: Any, worker: str) -> None:
        """A worker joined."""

    def remove_worker(self, scheduler: Any, worker: str) -> None:
        """A worker left or died."""

    def close(self) -> None:
        """The scheduler is shutting down."""


# a plugin, its ``transition``, and whether it takes startstops as raw tuples
_Caller = tuple["SchedulerPlugin", Callable[..., Any], bool]
HOOKS = ("start", "update_graph", "transition", "add_worker", "remove_worker", "close")


def check_plugin(plugin: Any, name: Any = None) -> None:
    """Refuse, with the fix in the message, what would fail (or be switched off) later.

    A plugin is an instance of a ``SchedulerPlugin`` subclass, or any object with at
    least one of its hooks; the common slip is passing the class itself.
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"A plugin's name must be a str, got {type(name).__name__} {name!r}.")
    if isinstance(plugin, type):
        raise TypeError(
            f"register_plugin() got the class {plugin.__name__}, not a plugin: pass an "
            f"instance, e.g. client.register_plugin({plugin.__name__}())."
        )
    if isinstance(plugin, SchedulerPlugin):
        return
    if not any(callable(getattr(plugin, hook, None)) for hook in HOOKS):
        raise TypeError(
            f"register_plugin() got {type(plugin).__name__} {plugin!r}, which has none of a "
            f"plugin's methods ({', '.join(HOOKS)}); subclass kernel_cluster.SchedulerPlugin "
            "and override the ones you need."
        )


class PluginSet:
    """The registered plugins, and safe calls into them."""

    def __init__(self) -> None:
        self.plugins: dict[str, SchedulerPlugin] = {}
        self._by_transition: dict[tuple[str, str], list[SchedulerPlugin]] = {}
        self._everything: list[SchedulerPlugin] = []
        self._callers: dict[tuple[str, str], tuple[_Caller, ...]] = {}
        self._default_callers: tuple[_Caller, ...] = ()

    def add(self, plugin: SchedulerPlugin, name: str | None = None) -> str:
        check_plugin(plugin, name)
        name = name or getattr(plugin, "name", None) or f"{type(plugin).__name__}-{id(plugin):x}"
        if name in self.plugins:
            self.remove(name)
        self.plugins[name] = plugin
        self._index()
        return name

    def remove(self, name: str) -> SchedulerPlugin | None:
        plugin = self.plugins.pop(name, None)
        self._index()
        return plugin

    def _index(self) -> None:
        # duck-typed plugins: no ``transitions`` means all of them, no ``transition`` none
        wanted = {
            n: getattr(p, "transitions", None) if callable(getattr(p, "transition", None)) else ()
            for n, p in self.plugins.items()
        }
        everything = [p for n, p in self.plugins.items() if wanted[n] is None]
        by: dict[tuple[str, str], list[SchedulerPlugin]] = {}
        for n, p in self.plugins.items():
            for pair in wanted[n] or ():
                by.setdefault(pair, []).append(p)
        self._everything = everything
        self._by_transition = by
        # (plugin, its ``transition``) per (start, finish), ready for the hot path; the
        # tuples are rebuilt, never changed in place, so a call in progress can go on
        # iterating over the one it took
        self._callers = {
            pair: tuple(_caller(p) for p in [*everything, *targeted])
            for pair, targeted in by.items()
        }
        self._default_callers = tuple(_caller(p) for p in everything)

    def wants_transitions(self) -> bool:
        return bool(self._everything or self._by_transition)

    def transition_filter(self) -> frozenset[tuple[str, str]] | None:
        """The transitions some plugin wants, or None when one of them wants them all."""
        if self._everything:
            return None
        return frozenset(self._by_transition)

    def transition_callers(self, start: str, finish: str) -> tuple[_Caller, ...]:
        """The plugins, and their ``transition`` methods, to call for this change."""
        return self._callers.get((start, finish), self._default_callers)

    def failed(self, plugin: SchedulerPlugin, method: str) -> None:
        """``plugin`` raised (the exception is being handled): log it and switch it off."""
        name = next((n for n, p in self.plugins.items() if p is plugin), repr(plugin))
        logger.exception("Scheduler plugin %s failed in %s(); it is now disabled", name, method)
        self.remove(name)

    def call(self, plugins: Iterable[SchedulerPlugin], method: str, *args: Any, **kw: Any) -> None:
        for plugin in tuple(plugins):  # a failing plugin is removed from the live list
            hook = getattr(plugin, method, None)
            if hook is None:  # a duck-typed plugin without this hook
                continue
            try:
                hook(*args, **kw)
            except Exception:
                self.failed(plugin, method)

    def call_all(self, method: str, *args: Any, **kw: Any) -> None:
        self.call(self.plugins.values(), method, *args, **kw)


def _caller(plugin: Any) -> _Caller:
    return (plugin, plugin.transition, bool(getattr(plugin, "raw_startstops", False)))


def startstop_dicts(startstops: Iterable[tuple]) -> list[dict[str, Any]]:
    """(action, start, stop[, source]) tuples as Dask's startstops: dicts, a
    transfer's with the worker it came from as ``source``."""
    out = []
    for action, start, stop, *rest in startstops:
        d: dict[str, Any] = {"action": action, "start": start, "stop": stop}
        if action == "transfer" and rest:
            d["source"] = rest[0]
        out.append(d)
    return out
