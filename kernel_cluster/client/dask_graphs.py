"""Dask's graphs, turned into this engine's task specs at the client's edge.

What dask hands a scheduler (``dask.compute(x, scheduler=client.get)``) is an
expression with ``__dask_graph__()``, whose tasks are ``dask._task_spec`` nodes
(``Task``, ``Alias``, ``DataNode``) mixed with the older tuple tasks. Each node is
already a function of its dependencies' values (``node({key: value})``), so a task
here is simply a call of the node on a dict of references: dask's own rules
(nested containers, keyword arguments, inlined subgraphs) run as dask wrote them,
and ``core/`` never learns that dask exists.

dask stays optional: nothing here imports it until a dask object is handed in, and
``core.dask_specs.is_dask_graph`` answers without importing it when it was never
loaded; ``core.dask_specs.node_specs`` makes the specs, shared with ``get_sync``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.dask_specs import is_dask_graph, node_specs
from ..core.keys import Key
from ..core.spec import GraphError, TaskSpec, check_acyclic
from ..core.user_frames import user_stacklevel
from ..diagnostics.spans import spans_lost_by
from .futures import Future

__all__ = [
    "HONOURED_ANNOTATIONS",
    "DaskGraph",
    "apply_options",
    "collection_graph",
    "convert",
    "is_dask_graph",
    "persist_graph",
]

# what dask.annotate(...) may say that this engine acts on; the rest is ignored
HONOURED_ANNOTATIONS = frozenset({"workers", "allow_other_workers", "priority", "retries", "span"})


@dataclass
class DaskGraph:
    """A dask graph as this engine runs it.

    ``specs``: the tasks to send; ``held``: the futures in the graph (a persisted
    collection's pieces), whose keys are sent as nothing; ``annotations``: per-task annotations
    the engine acts on; ``priority``: dask's ``priority`` annotation (higher first).
    """

    specs: dict[Key, TaskSpec]
    held: dict[Key, Future] = field(default_factory=dict)
    annotations: dict[Key, dict[str, Any]] = field(default_factory=dict)
    priority: dict[Key, float] = field(default_factory=dict)
    ignored: frozenset[str] = frozenset()


_MISSING_HINT = (
    "Pass the whole graph (or persist the collection it comes from with this client first)."
)


def convert(dsk: Any, client: Any, hint: str = _MISSING_HINT) -> DaskGraph:
    """Task specs for a dask expression, collection or graph dict.

    Futures in the graph (a persisted collection's pieces) become references to
    their keys. A task reading a key that is neither in the graph nor held by a
    future raises GraphError naming both, before anything runs.
    """
    from dask._task_spec import Alias, Task, TaskRef, convert_legacy_graph

    annotations: Mapping[str, Mapping[Key, Any]] = {}
    if not isinstance(dsk, Mapping):
        get_annotations = getattr(dsk, "__dask_annotations__", None)
        if get_annotations is not None:
            annotations = get_annotations() or {}
        dsk = dsk.__dask_graph__()
    else:
        from dask.highlevelgraph import HighLevelGraph

        if isinstance(dsk, HighLevelGraph):  # its annotations live on its layers
            annotations = _layer_annotations(dsk)
    held: dict[Key, Future] = {}
    for value in dsk.values():  # a persisted collection's pieces: {key: future}
        if type(value) is Future:
            _check_owner(value, client)
            held[value.key] = value
    nodes = convert_legacy_graph(dsk)  # futures become references to their keys
    for key, node in nodes.items():
        if type(node) is Task:
            nodes[key] = _futures_as_refs(node, held, client, TaskRef, Task)
    specs = node_specs(nodes, Alias)
    missing_dependencies(specs, lambda dep: dep in held or client._holds(dep), hint)
    check_acyclic(specs)
    return _with_annotations(DaskGraph(specs, held), annotations)


def missing_dependencies(specs: dict[Key, TaskSpec], held: Any, hint: str) -> None:
    """Raise GraphError for the first task reading a key the graph does not define
    and ``held(key)`` does not vouch for, before anything runs."""
    for key, spec in specs.items():
        for dep in spec.dependencies:
            if dep not in specs and not held(dep):
                raise GraphError(
                    f"Task {key!r} needs key {dep!r}, which the graph does not define and no "
                    f"future holds. {hint}",
                    keys=(key, dep),
                )


def _futures_as_refs(
    node: Any, held: dict[Key, Future], client: Any, task_ref: type, task: type
) -> Any:
    """``node`` with futures among its arguments (``delayed(f)(future)``, which dask
    keeps as literals) made references to their keys."""
    args, kwargs = node.args, node.kwargs
    if not any(type(a) is Future for a in args) and not any(
        type(v) is Future for v in kwargs.values()
    ):
        return node

    def ref(value: Any) -> Any:
        if type(value) is not Future:
            return value
        _check_owner(value, client)
        held[value.key] = value
        return task_ref(value.key)

    return task(
        node.key,
        node.func,
        *map(ref, args),
        _data_producer=node.data_producer,
        **{k: ref(v) for k, v in kwargs.items()},
    )


def _check_owner(future: Future, client: Any) -> None:
    owner = future.client
    if owner is not client and getattr(owner, "cluster", None) is not client.cluster:
        raise ValueError(
            f"The graph holds future {future.key!r} of another cluster; compute it with "
            "the client that made it."
        )


def _layer_annotations(hlg: Any) -> dict[str, dict[Key, Any]]:
    out: dict[str, dict[Key, Any]] = {}
    for layer in getattr(hlg, "layers", {}).values():
        for name, value in (getattr(layer, "annotations", None) or {}).items():
            per_key = out.setdefault(name, {})
            for key in layer.get_output_keys():
                per_key[key] = value(key) if callable(value) else value
    return out


def _with_annotations(graph: DaskGraph, annotations: Mapping[str, Mapping[Key, Any]]) -> DaskGraph:
    """Keep what the engine acts on, per task; name the rest in ``graph.ignored``."""
    ignored = set()
    per_task = graph.annotations
    specs = graph.specs
    for name, by_key in annotations.items():
        if name not in HONOURED_ANNOTATIONS:
            ignored.add(name)
            continue
        for key, value in by_key.items():
            if key not in specs:
                continue
            if name == "priority":
                graph.priority[key] = value
            elif name == "workers":
                per_task.setdefault(key, {})["workers"] = (
                    (value,) if isinstance(value, str) else tuple(value)
                )
            elif name == "span":  # span() around the code that built the collection
                if _is_span_annotation(value):
                    per_task.setdefault(key, {})["span"] = {
                        "name": tuple(value["name"]),
                        "ids": tuple(value["ids"]),
                    }
            else:
                per_task.setdefault(key, {})[name] = value
    graph.ignored = frozenset(ignored)
    return graph


def _is_span_annotation(value: Any) -> bool:
    """Whether ``value`` is what ``span()`` (ours or distributed's) annotates with:
    ``{"name": (tag, ...), "ids": (id, ...)}`` of one length."""
    if not isinstance(value, Mapping):
        return False
    name, ids = value.get("name"), value.get("ids")
    return (
        isinstance(name, (tuple, list))
        and isinstance(ids, (tuple, list))
        and len(name) == len(ids) > 0
    )


def span_ids_in(graph: DaskGraph) -> set[str]:
    """Every span id the graph's tasks are annotated with (parents' too)."""
    out: set[str] = set()
    seen: set[tuple[str, ...]] = set()
    for own in graph.annotations.values():
        span = own.get("span")
        if span is not None and span["ids"] not in seen:
            seen.add(span["ids"])
            out.update(span["ids"])
    return out


def apply_options(
    graph: DaskGraph,
    workers: Any = None,
    allow_other_workers: bool = False,
    retries: int | None = None,
) -> DaskGraph:
    """``client.compute(x, workers=..., retries=...)``: the same as annotating every
    task of the graph with them (a task's own ``dask.annotate`` wins)."""
    options: dict[str, Any] = {}
    if workers is not None:
        options["workers"] = (workers,) if isinstance(workers, str) else tuple(workers)
        options["allow_other_workers"] = bool(allow_other_workers)
    if retries:
        options["retries"] = int(retries)
    if options:
        for key in graph.specs:
            own = graph.annotations.get(key)
            graph.annotations[key] = {**options, **own} if own else dict(options)
    return graph


def refuse_options(method: str, kwargs: dict[str, Any]) -> None:
    """Say which keywords of ``method`` (compute, persist) the engine does not act on,
    rather than dropping them unseen."""
    if kwargs:
        warnings.warn(
            f"client.{method}() ignores {', '.join(map(repr, sorted(kwargs)))}: it acts on "
            "optimize_graph, workers, allow_other_workers and retries"
            + (" (and sync)" if method == "compute" else "")
            + "; use dask.annotate(...) for per-task placement and priority.",
            UserWarning,
            stacklevel=3,
        )


def prioritized(order: dict[Key, int], priority: Mapping[Key, float]) -> dict[Key, int]:
    """``order`` (lower runs first) with dask's ``priority`` (higher runs first) put
    ahead of it, within this submission."""
    ranked = sorted(order, key=lambda k: (-priority.get(k, 0), order[k]))
    return {k: i for i, k in enumerate(ranked)}


def warn_lost_spans(graph: DaskGraph) -> None:
    """Name the spans a computation lost: spans closed with nothing submitted inside
    (a collection was built there) whose annotation none of its tasks carries."""
    lost = spans_lost_by(span_ids_in(graph))
    if not lost:
        return
    names = ", ".join(f"span({', '.join(map(repr, name))})" for name in lost)
    warnings.warn(
        f"The tasks of this computation carry no annotation of {names}, in which dask "
        "collections were built and nothing computed: if it computes them, dask's "
        "optimisation dropped the annotation (dask-expr dataframes always do; arrays and "
        "delayed when tasks fuse, unless dask.config.set({'optimization.fuse.active': "
        "False})), so they are filed under the span open now, or the default one. To "
        "label them, compute inside the span: `with span(...): result = x.compute()`.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def warn_ignored(names: frozenset[str]) -> None:
    """Say that the engine does not act on these annotations (once per place in the
    user's code, by the warnings module's default filter)."""
    warnings.warn(
        f"dask annotations {', '.join(map(repr, sorted(names)))} are ignored by "
        f"kernel-cluster, which acts on {', '.join(sorted(HONOURED_ANNOTATIONS))} only.",
        UserWarning,
        stacklevel=4,
    )


# -- collections --------------------------------------------------------------------


def collection_graph(collection: Any, optimize_graph: bool) -> tuple[Any, Key]:
    """The expression computing ``collection``'s final value (its postcompute done on a
    worker, as ``dask.compute`` does) and the key that value will have."""
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from dask.core import flatten

    expr = FinalizeCompute(collections_to_expr([collection], optimize_graph)).optimize()
    keys = list(flatten(expr.__dask_keys__()))
    if len(keys) != 1:  # FinalizeCompute makes one key for the one collection
        raise GraphError(
            f"Computing {type(collection).__name__} gave {len(keys)} final keys, not one; "
            "use client.persist() for it instead.",
            keys=tuple(keys),
        )
    return expr, keys[0]


def persist_graph(collections: list[Any], optimize_graph: bool) -> tuple[Any, list[list[Key]]]:
    """The expression of ``collections`` and, for each, the keys of its pieces."""
    from dask.base import collections_to_expr
    from dask.core import flatten

    expr = collections_to_expr(collections, optimize_graph).optimize()
    per_collection = expr.__dask_keys__()
    if len(collections) == 1 and len(per_collection) != 1:
        per_collection = [per_collection]
    return expr, [list(flatten(k)) for k in per_collection]


def is_collection(obj: Any) -> bool:
    """Whether ``obj`` is a dask collection (without importing dask if it is not loaded)."""
    if "dask" not in sys.modules:
        return False
    from dask.base import is_dask_collection

    return bool(is_dask_collection(obj))
