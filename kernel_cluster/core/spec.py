"""What a task runs: a small expression tree, built once and evaluated on a worker.

A graph in the seeds' dict form (``{"a": (add, 1, 2), "b": (add, 3, "a")}``) and a
``submit(fn, *args)`` call both become :class:`TaskSpec` objects holding a
:class:`Call` whose arguments may contain :class:`Ref` (another key's value) and
nested calls. Containers are only walked when they hold a reference, so the
common case (literal arguments) costs one flag test at execution time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .keys import Key, validate_key
from .lazysets import EMPTY


class Ref:
    """A placeholder for the value of another task."""

    __slots__ = ("key",)

    def __init__(self, key: Key):
        self.key = key

    def __repr__(self) -> str:
        return f"Ref({self.key!r})"

    def __reduce__(self) -> tuple[type[Ref], tuple[Key]]:
        return (Ref, (self.key,))


class Call:
    """``func(*args, **kwargs)`` where arguments may hold refs and nested calls."""

    __slots__ = ("args", "func", "kwargs", "nested")

    def __init__(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
    ):
        self.func = func
        self.args = args
        self.kwargs = kwargs or None
        self.nested = holds_refs(args) or (kwargs is not None and holds_refs(kwargs.values()))

    def __repr__(self) -> str:
        name = getattr(self.func, "__name__", repr(self.func))
        return f"Call({name}, {self.args!r}, {self.kwargs!r})"

    def __reduce__(self) -> tuple[type[Call], tuple[Any, ...]]:
        return (Call, (self.func, self.args, self.kwargs))


# the dependencies of every task that reads no other key: one shared set, not one each
# (even an empty frozenset is a container that the cyclic GC tracks)
NO_DEPENDENCIES: frozenset[Any] = EMPTY


class TaskSpec:
    """A task's expression plus the keys it reads. ``expr`` may be a literal value."""

    __slots__ = ("dependencies", "expr")

    def __init__(self, expr: Any, dependencies: frozenset[Key]):
        self.expr = expr
        self.dependencies = dependencies or NO_DEPENDENCIES

    @property
    def func(self) -> Callable[..., Any] | None:
        return self.expr.func if type(self.expr) is Call else None

    def __repr__(self) -> str:
        return f"TaskSpec({self.expr!r}, deps={sorted(map(str, self.dependencies))})"

    def __reduce__(self) -> tuple[type[TaskSpec], tuple[Any, frozenset[Key]]]:
        return (TaskSpec, (self.expr, self.dependencies))


def holds_refs(values: Iterable[Any]) -> bool:
    """Whether any value is (or contains, in lists and dicts) a Ref or a Call."""
    for v in values:
        t = type(v)
        if t is Ref or t is Call:
            return True
        if t is list and holds_refs(v):
            return True
        if t is dict and holds_refs(v.values()):
            return True
    return False


class GraphError(ValueError):
    """A graph that cannot run: a cycle, a missing key or a malformed task."""

    def __init__(self, message: str, *, keys: tuple[Key, ...] = ()):
        super().__init__(message)
        self.keys = keys

    def __reduce__(
        self,
    ) -> tuple[Callable[[str, tuple[Key, ...]], GraphError], tuple[str, tuple[Key, ...]]]:
        return (_rebuild_graph_error, (str(self), self.keys))


def _rebuild_graph_error(message: str, keys: tuple[Key, ...]) -> GraphError:
    return GraphError(message, keys=keys)


class MissingKeyError(GraphError, KeyError):
    """A key was asked for that the graph does not define."""

    def __str__(self) -> str:  # KeyError would otherwise show the repr of the message
        return str(self.args[0])


# -- evaluation ----------------------------------------------------------------------


def evaluate(expr: Any, data: Mapping[Key, Any]) -> Any:
    """Compute ``expr`` with ``data`` holding the values of its references."""
    t = type(expr)
    if t is Call:
        if not expr.nested:
            if expr.kwargs is None:
                return expr.func(*expr.args)
            return expr.func(*expr.args, **expr.kwargs)
        args = [_substitute(a, data) for a in expr.args]
        if expr.kwargs is None:
            return expr.func(*args)
        return expr.func(*args, **{k: _substitute(v, data) for k, v in expr.kwargs.items()})
    return _substitute(expr, data)


def _substitute(value: Any, data: Mapping[Key, Any]) -> Any:
    t = type(value)
    if t is Ref:
        return data[value.key]
    if t is Call:
        return evaluate(value, data)
    if t is list:
        return [_substitute(v, data) for v in value]
    if t is dict:
        return {k: _substitute(v, data) for k, v in value.items()}
    return value


# -- the dict graph form -------------------------------------------------------------


def _is_task_tuple(value: Any) -> bool:
    return type(value) is tuple and len(value) > 0 and callable(value[0])


def _convert(value: Any, keys: Mapping[Key, Any], deps: set[Key]) -> Any:
    t = type(value)
    if t is tuple:
        if value and callable(value[0]):
            args = tuple(_convert(a, keys, deps) for a in value[1:])
            return Call(value[0], args)
        try:
            is_ref = value in keys
        except TypeError:  # a tuple holding lists cannot name a key
            is_ref = False
        if is_ref:
            deps.add(value)
            return Ref(value)
        return value
    if t is str:
        if value in keys:
            deps.add(value)
            return Ref(value)
        return value
    if t is list:
        return [_convert(v, keys, deps) for v in value]
    if t is dict:
        return {k: _convert(v, keys, deps) for k, v in value.items()}
    return value


def parse_graph(
    dsk: Mapping[Key, Any], known_keys: Mapping[Key, Any] | frozenset[Key] = frozenset()
) -> dict[Key, TaskSpec]:
    """Turn the seeds' dict graph into task specs; references may also name ``known_keys``.

    Raises GraphError for cycles and TypeError for keys of the wrong type, before
    anything runs.
    """
    if not isinstance(dsk, Mapping):
        raise TypeError(
            f"A task graph must be a dict mapping keys to tasks, got {type(dsk).__name__}."
        )
    for key in dsk:
        validate_key(key)
    lookup: Mapping[Key, Any] = dsk if not known_keys else _ChainKeys(dsk, known_keys)
    specs: dict[Key, TaskSpec] = {}
    for key, value in dsk.items():
        deps: set[Key] = set()
        try:
            expr = _convert(value, lookup, deps)
        except RecursionError:
            raise GraphError(f"Task {key!r} is nested too deeply to run.", keys=(key,)) from None
        if key in deps:
            raise GraphError(f"Task {key!r} depends on itself.", keys=(key,))
        specs[key] = TaskSpec(expr, frozenset(deps))
    check_acyclic(specs)
    return specs


class _ChainKeys(Mapping[Key, Any]):
    """Membership over two key collections without copying either."""

    def __init__(self, first: Mapping[Key, Any], second: Mapping[Key, Any] | frozenset[Key]):
        self.first, self.second = first, second

    def __contains__(self, key: object) -> bool:
        return key in self.first or key in self.second

    def __getitem__(self, key: Key) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[Key]:
        yield from self.first
        yield from self.second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)


def check_acyclic(specs: Mapping[Key, TaskSpec]) -> None:
    """Raise GraphError naming a cycle if the graph has one (iterative, no recursion)."""
    state: dict[Key, int] = {}  # key -> 1 visiting, 2 done
    for root in specs:
        if state.get(root) == 2:
            continue
        stack = [(root, iter(specs[root].dependencies))]
        state[root] = 1
        path = [root]
        while stack:
            key, deps = stack[-1]
            advanced = False
            for dep in deps:
                if dep not in specs:
                    continue
                s = state.get(dep)
                if s == 1:
                    cycle = [*path[path.index(dep) :], dep]
                    shown = " -> ".join(map(repr, cycle))
                    raise GraphError(f"The graph has a cycle: {shown}.", keys=tuple(cycle))
                if s is None:
                    state[dep] = 1
                    stack.append((dep, iter(specs[dep].dependencies)))
                    path.append(dep)
                    advanced = True
                    break
            if not advanced:
                state[key] = 2
                stack.pop()
                path.pop()


def graph_order(specs: Mapping[Key, TaskSpec], outputs: Iterable[Key]) -> dict[Key, int]:
    """A run order that finishes one branch before starting the next (depth first).

    Running each output's inputs close together lets intermediates be released early,
    which keeps tree reductions' memory small. Tasks no output reaches come last.
    """
    order: dict[Key, int] = {}
    n = 0
    for root in [*outputs, *specs]:
        if root in order or root not in specs:
            continue
        stack = [(root, iter(sorted(specs[root].dependencies, key=_sort_key)))]
        seen = {root}
        while stack:
            key, deps = stack[-1]
            for dep in deps:
                if dep in specs and dep not in order and dep not in seen:
                    seen.add(dep)
                    stack.append((dep, iter(sorted(specs[dep].dependencies, key=_sort_key))))
                    break
            else:
                stack.pop()
                order[key] = n
                n += 1
    return order


def _sort_key(key: Key) -> tuple[str, str]:
    return (str(type(key)), str(key))


def flatten_keys(keys: Any) -> list[Any]:
    """All keys in a (nested) list of keys, in order."""
    if type(keys) is list:
        out: list[Any] = []
        for k in keys:
            out.extend(flatten_keys(k))
        return out
    return [keys]


def wanted_keys(
    specs: Mapping[Key, Any], keys: Any, held: Callable[[Key], bool] | None = None
) -> list[Key]:
    """The keys a ``get`` asks for, flat and in order, each one defined by the graph
    (or ``held``, e.g. by a future); else a ``MissingKeyError`` naming it."""
    flat = flatten_keys(keys)
    for k in flat:
        try:
            present = k in specs
        except TypeError:  # an unhashable "key"
            present = False
        if not present and not (held is not None and held(k)):
            raise MissingKeyError(
                f"Key {k!r} is not in the graph; it defines {len(specs)} keys "
                f"such as {list(specs)[:3]!r}.",
                keys=(k,),
            )
    return flat


def pack_results(keys: Any, results: Mapping[Key, Any]) -> Any:
    """Results shaped like the (nested) list of keys asked for."""
    if type(keys) is list:
        return [pack_results(k, results) for k in keys]
    return results[keys]
