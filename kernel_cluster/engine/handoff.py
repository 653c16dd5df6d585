"""What the worker's loop hands a task thread: a task's inputs, and a claim on it.

Inputs are read on the loop when the values are in memory (a plain dict), else on
the task thread, so that unspilling counts as the task's time.

A claim decides who has a task handed to the pool but not started yet: the task
thread that starts it takes the claim first (``start``), or the loop takes it back,
to withdraw a task freed while it waited in the pool (``withdraw``). One of the two
gets it, so a withdrawn task never starts and a started one is never reported as
not having started. Without withdrawal, a task waiting behind one that never ends
would count as running for ever (issue 26.1).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, MutableMapping
from functools import partial
from typing import Any

from ..core.keys import Key
from ..core.worker_messages import ExecuteSkipped

NO_DATA: dict = {}


def read_inputs(data: MutableMapping, keys: list[Key]) -> dict:
    return {k: data[k] for k in keys}


def read_inputs_and(data: MutableMapping, keys: list[Key], key: Key, value: Any) -> dict:
    inputs = read_inputs(data, keys)
    inputs[key] = value
    return inputs


def inputs_for(data: MutableMapping, dependencies: Iterable[Any]) -> Any:
    r"""The inputs of a task with ``dependencies`` (their ``key``\s): a dict, or a
    callable that reads them on the task thread (values that may be spilled)."""
    if not dependencies:
        return NO_DATA
    if type(data) is dict:
        return {d.key: data[d.key] for d in dependencies}
    return partial(read_inputs, data, [d.key for d in dependencies])


def inputs_and(data: MutableMapping, others: list[Key], key: Key, value: Any) -> Any:
    """The inputs of a task that depends on ``key`` (its ``value`` at hand) and on
    ``others``, as ``inputs_for`` gives them; None if one of ``others`` is gone."""
    if not others:
        return {key: value}
    if type(data) is dict:
        try:
            return read_inputs_and(data, others, key, value)
        except KeyError:
            return None
    return partial(read_inputs_and, data, others, key, value)


class PoolClaims:
    """Claims on the tasks handed to the pool and not started yet (see the module's
    docstring). ``hand`` and ``withdraw`` and ``settle`` are for the loop, ``start``
    for a task thread."""

    __slots__ = ("_claim_of", "_claims", "_numbers")

    def __init__(self) -> None:
        self._claims: dict[int, Key] = {}  # claim number -> key
        self._claim_of: dict[Key, int] = {}
        self._numbers = itertools.count()

    def hand(self, key: Key) -> int:
        """``key`` is handed to the pool: its claim's number, for the thread."""
        number = next(self._numbers)
        self._claims[number] = key
        self._claim_of[key] = number
        return number

    def start(self, number: int) -> bool:
        """On the task thread: whether it may start the task (not withdrawn)."""
        return self._claims.pop(number, None) is not None

    def settle(self, keys: Iterable[Key]) -> None:
        """The outcomes of ``keys`` reached the loop: their claims are done with."""
        claim_of = self._claim_of
        for key in keys:
            claim_of.pop(key, None)

    def withdraw(self, keys: Iterable[Key], offers: dict[Key, Any]) -> list[ExecuteSkipped]:
        r"""Take back those of ``keys`` that no thread has started: they never will (nor
        run what was ``offers``\ ed to follow them). Each ends as skipped."""
        claims, claim_of = self._claims, self._claim_of
        taken = []
        for key in keys:
            number = claim_of.get(key)
            if number is not None and claims.pop(number, None) is not None:
                del claim_of[key]
                offers.pop(key, None)
                taken.append(ExecuteSkipped(key))
        return taken
