"""dask's graph nodes as task specs, without importing dask.

What ``dask._task_spec.convert_legacy_graph`` gives is a mapping of nodes, each
already a function of its dependencies' values (``node({key: value})``), so a task
here is simply a call of the node on a dict of references: dask's own rules
(nested containers, keyword arguments, inlined subgraphs) run as dask wrote them.
The caller imports dask and converts the graph; this module only reads each
node's ``dependencies`` (and an alias's ``target``), so both the client
(``client/dask_graphs.py``) and ``get_sync`` use it, and ``core`` stays free of dask.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from .keys import Key, validate_key
from .spec import Call, Ref, TaskSpec

__all__ = ["is_dask_graph", "node_specs", "run_node"]


def is_dask_graph(dsk: Any) -> bool:
    """Whether ``dsk`` came from dask: an expression or collection, or a dict holding
    dask's task objects. Free when dask was never imported (nothing can be)."""
    if "dask" not in sys.modules:
        return False
    if not isinstance(dsk, Mapping):
        return hasattr(dsk, "__dask_graph__")
    return any(type(v).__module__ == "dask._task_spec" for v in dsk.values())


def run_node(node: Any, values: dict[Key, Any]) -> Any:
    """A dask node evaluated on its dependencies' values (what a worker calls)."""
    return node(values)


def node_specs(nodes: Mapping[Key, Any], alias_type: type) -> dict[Key, TaskSpec]:
    """One task spec per node: an alias of another key (``alias_type``, dask's
    ``Alias``) reads that key's value; every other node is called on its inputs."""
    specs: dict[Key, TaskSpec] = {}
    for key, node in nodes.items():
        validate_key(key)
        target: Any = getattr(node, "target", key) if type(node) is alias_type else key
        if target != key:
            specs[key] = TaskSpec(Ref(target), frozenset((target,)))
            continue
        deps = node.dependencies
        refs = {d: Ref(d) for d in deps}
        specs[key] = TaskSpec(Call(run_node, (node, refs)), frozenset(deps))
    return specs
