"""Statistical profiles as count trees: plain data and pure transforms.

A profile is a tree of call sites. Every node is a plain dict::

    {"identifier": "file.py:12:f",
     "description": {"filename": "file.py", "name": "f", "line_number": 12, "line": "g()"},
     "count": 7, "own": 2, "children": {identifier: node, ...}}

A node is one function *at one line*: for an inner frame the line that made the
call, for the innermost frame the line that was running. ``count`` is how many
samples passed through the node and ``own`` how many of them stopped there, so
that for every node ``count == own + sum of the children's counts``
(:func:`validate` checks it). The root stands for no frame: its count is the
number of samples, and its ``own`` the samples that ran no Python frame of the
task (a task whose function is a builtin, for example).

Descriptions are shared between trees and treated as read-only.

This module imports the standard library alone: the Dask scheduler plugin
(diagnostics/sources/dask_plugin.py) is pickled by value onto a scheduler that may
not have this package, with ``to_flat`` in it.

Stacks can be deeper than Python's recursion limit (``sys.getrecursionlimit()``,
1,000 by default), for instance in a recursive task: every function here walks
with an explicit stack. Pickle, msgpack, JSON and ``repr`` all recurse once per
level of a nested dict, so profiles travel between processes in the shallow form
of :func:`to_flat` and are rebuilt with :func:`from_flat`.

:class:`ProfileLog` is a worker's record over time: samples go into the current
cycle, per task prefix; each ``cycle(now)`` closes it into a bounded history.
The caller supplies every time: nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

Tree = dict[str, Any]
Frame = tuple[str, dict[Any, Any]]  # (identifier, description), as add_stack takes them
FlatRow = tuple[int, str, str, str, int, str, int, int]

ROOT = "root"
_ROOT_DESCRIPTION = {"filename": "", "name": "root", "line_number": 0, "line": ""}


class ProfileError(ValueError):
    """A profile tree breaks an invariant; ``path`` names the node (identifiers from the
    root)."""

    def __init__(self, message: str, path: tuple[str, ...] = ()):
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[type[ProfileError], tuple[str, tuple[str, ...]]]:
        return (ProfileError, (str(self), self.path))


def new_tree() -> Tree:
    """An empty profile: a root with no samples."""
    return _node(ROOT, _ROOT_DESCRIPTION)


def _node(identifier: str, description: dict[Any, Any]) -> Tree:
    return {
        "identifier": identifier,
        "description": description,
        "count": 0,
        "own": 0,
        "children": {},
    }


def describe(filename: str, name: str, line_number: int, line: str = "") -> Frame:
    """The ``(identifier, description)`` of a function at a line, for ``add_stack``."""
    description = {"filename": filename, "name": name, "line_number": line_number, "line": line}
    return f"{filename}:{line_number}:{name}", description


def add_stack(tree: Tree, stack: Sequence[Frame], count: int = 1) -> None:
    """Count one sample (or ``count``) of ``stack``, outermost frame first.

    Costs one step per frame, whatever the size of the tree.
    """
    node = tree
    node["count"] += count
    for identifier, description in stack:
        children = node["children"]
        child = children.get(identifier)
        if child is None:
            child = children[identifier] = _node(identifier, description)
        child["count"] += count
        node = child
    node["own"] += count


def merge_into(target: Tree, *trees: Tree) -> Tree:
    """Add ``trees`` into ``target`` (changed in place, returned): shared paths sum.

    ``target`` must not be one of ``trees``, nor share nodes with them.
    """
    work: list[tuple[Tree, list[Tree]]] = [(target, [t for t in trees if t["count"]])]
    while work:
        dest, sources = work.pop()
        grouped: dict[str, list[Tree]] = {}
        for src in sources:
            if src is dest:
                raise ValueError("merge_into() cannot add a profile into itself; use merge().")
            dest["count"] += src["count"]
            dest["own"] += src["own"]
            for identifier, child in src["children"].items():
                grouped.setdefault(identifier, []).append(child)
        children = dest["children"]
        for identifier, kids in grouped.items():
            node = children.get(identifier)
            if node is None:
                node = children[identifier] = _node(identifier, kids[0]["description"])
            work.append((node, kids))
    return target


def merge(*trees: Tree) -> Tree:
    """A new profile with the samples of all ``trees``; the inputs are not changed."""
    return merge_into(new_tree(), *trees)


def iter_nodes(tree: Tree) -> Iterator[tuple[int, Tree]]:
    """``(depth, node)`` for every node, parents before children (the root at depth 0)."""
    stack = [(0, tree)]
    while stack:
        depth, node = stack.pop()
        yield depth, node
        children = node["children"]
        if children:
            stack.extend((depth + 1, c) for c in reversed(children.values()))


def depth(tree: Tree) -> int:
    """Frames on the longest path (0 for a profile without frames)."""
    return max(d for d, _ in iter_nodes(tree))


def validate(tree: Tree) -> None:
    """Raise ProfileError unless every node is well formed and counts add up."""
    stack: list[tuple[tuple[str, ...], Tree]] = [((tree.get("identifier", "?"),), tree)]
    while stack:
        path, node = stack.pop()
        missing = {"identifier", "description", "count", "own", "children"} - set(node)
        if missing:
            raise ProfileError(f"Profile node {'/'.join(path)} lacks {sorted(missing)}.", path)
        count, own, children = node["count"], node["own"], node["children"]
        if own < 0 or count < 0:
            raise ProfileError(f"Profile node {'/'.join(path)} has a negative count.", path)
        below = 0
        for identifier, child in children.items():
            if child.get("identifier") != identifier:
                raise ProfileError(
                    f"Profile node {'/'.join(path)} files child {child.get('identifier')!r} "
                    f"under {identifier!r}.",
                    path,
                )
            below += child.get("count", 0)
            stack.append(((*path, identifier), child))
        if count != own + below:
            raise ProfileError(
                f"Profile node {'/'.join(path)} has count {count}, but its own samples "
                f"({own}) and its children's ({below}) make {own + below}.",
                path,
            )


def inclusive_counts(tree: Tree) -> dict[tuple[str, str], int]:
    """Samples in which each function ``(filename, name)`` was on the stack.

    A recursive function is counted once per sample, not once per frame.
    """
    counts: dict[tuple[str, str], int] = {}
    active: dict[tuple[str, str], int] = {}
    stack: list[tuple[Tree, bool]] = [(c, False) for c in tree["children"].values()]
    while stack:
        node, leaving = stack.pop()
        desc = node["description"]
        fn = (desc["filename"], desc["name"])
        if leaving:
            active[fn] -= 1
            if not active[fn]:
                del active[fn]
            continue
        if fn not in active:
            counts[fn] = counts.get(fn, 0) + node["count"]
        active[fn] = active.get(fn, 0) + 1
        stack.append((node, True))
        stack.extend((c, False) for c in node["children"].values())
    return counts


def to_flat(tree: Tree) -> list[FlatRow]:
    """The tree as rows ``(parent row, identifier, filename, name, line_number, line,
    count, own)``, parents first; the root's parent is -1. Safe to pickle at any depth.

    Also takes a tree made elsewhere in the same shape (a Dask worker's profile, which
    the Dask scheduler plugin flattens with this function): a node without ``own``
    gets its count minus its children's, missing parts of a description are empty,
    and every value is made a plain ``str`` or ``int``.
    """
    rows: list[FlatRow] = []
    stack: list[tuple[int, Tree]] = [(-1, tree)]
    while stack:
        parent, node = stack.pop()
        d = node.get("description") or {}
        children = node.get("children") or {}
        count = int(node.get("count", 0))
        own = node.get("own")
        if own is None:
            own = max(0, count - sum(int(c.get("count", 0)) for c in children.values()))
        index = len(rows)
        rows.append(
            (
                parent,
                str(node.get("identifier", ROOT)),
                str(d.get("filename", "")),
                str(d.get("name", "")),
                int(d.get("line_number") or 0),
                str(d.get("line", "")),
                count,
                int(own),
            )
        )
        stack.extend((index, c) for c in children.values())
    return rows


def from_flat(rows: Sequence[Sequence[Any]]) -> Tree:
    """The inverse of ``to_flat``; an empty sequence gives an empty profile."""
    if not rows:
        return new_tree()
    nodes: list[Tree] = []
    for parent, identifier, filename, name, line_number, line, count, own in rows:
        description = {
            "filename": filename,
            "name": name,
            "line_number": line_number,
            "line": line,
        }
        node = _node(identifier, description)
        node["count"], node["own"] = count, own
        if parent >= 0:
            nodes[parent]["children"][identifier] = node
        nodes.append(node)
    return nodes[0]


# -- a worker's profile over time ------------------------------------------------------


class Cycle:
    """Samples taken in ``(start, stop]``, one tree per task prefix."""

    __slots__ = ("start", "stop", "trees")

    def __init__(self, start: float, stop: float, trees: dict[str, Tree]):
        self.start = start
        self.stop = stop
        self.trees = trees

    def __repr__(self) -> str:
        return f"<Cycle {self.start:.3f}-{self.stop:.3f} {sorted(self.trees)}>"


def overlaps(begin: float, end: float, start: float | None, stop: float | None) -> bool:
    """Whether ``(begin, end]`` meets the window ``[start, stop]`` (None: unbounded)."""
    return (start is None or end > start) and (stop is None or begin < stop)


class ProfileLog:
    """A worker's profile: all-time totals and a history of the last ``max_cycles``
    cycles, each per task prefix; times are whatever the caller's clock says.

    Windows select whole cycles: a window gets every sample of each cycle it touches.
    """

    def __init__(self, now: float, max_cycles: int = 1000):
        self.cycles: deque[Cycle] = deque(maxlen=max_cycles)
        self.totals: dict[str, Tree] = {}
        self.recent: dict[str, Tree] = {}
        self.recent_start = now

    def add(self, stack: Sequence[Frame], prefix: str, count: int = 1) -> None:
        tree = self.recent.get(prefix)
        if tree is None:
            tree = self.recent[prefix] = new_tree()
        add_stack(tree, stack, count)

    def cycle(self, now: float) -> Cycle:
        """Close the current cycle at ``now`` into the history; a new one starts."""
        recent = self.recent
        for prefix, tree in recent.items():
            total = self.totals.get(prefix)
            if total is None:
                total = self.totals[prefix] = new_tree()
            merge_into(total, tree)
        closed = Cycle(self.recent_start, now, recent)
        self.cycles.append(closed)
        self.recent = {}
        self.recent_start = now
        return closed

    def _trees(
        self, start: float | None, stop: float | None, now: float | None
    ) -> Iterator[dict[str, Tree]]:
        if start is None and stop is None:
            yield self.totals
        else:
            for c in self.cycles:
                if overlaps(c.start, c.stop, start, stop):
                    yield c.trees
        end = math.inf if now is None else now
        if overlaps(self.recent_start, end, start, stop):
            yield self.recent

    def get(
        self,
        start: float | None = None,
        stop: float | None = None,
        prefix: str | None = None,
        now: float | None = None,
    ) -> Tree:
        """The samples of the window (all time if unbounded) as one new tree; ``prefix``
        keeps one task prefix. ``now`` ends the current cycle (default: never)."""
        parts: list[Tree] = []
        for trees in self._trees(start, stop, now):
            if prefix is None:
                parts.extend(trees.values())
            elif prefix in trees:
                parts.append(trees[prefix])
        return merge(*parts)

    def metadata(
        self, start: float | None = None, stop: float | None = None, now: float | None = None
    ) -> dict[str, Any]:
        """Samples per cycle, for a timeline: ``{"counts": [(time, n)], "keys": {prefix:
        [(time, n)]}}``, time being the cycle's end (``now`` for the current one, which
        is left out without it)."""
        counts: list[tuple[float, int]] = []
        keys: dict[str, list[tuple[float, int]]] = {}
        cycles: list[tuple[float, dict[str, Tree]]] = [
            (c.stop, c.trees) for c in self.cycles if overlaps(c.start, c.stop, start, stop)
        ]
        if now is not None and overlaps(self.recent_start, now, start, stop):
            cycles.append((now, self.recent))
        for t, trees in cycles:
            total = 0
            for prefix, tree in trees.items():
                keys.setdefault(prefix, []).append((t, tree["count"]))
                total += tree["count"]
            counts.append((t, total))
        return {"counts": counts, "keys": keys}


def merge_metadata(metas: Iterable[dict[Any, Any]], resolution: float) -> dict[Any, Any]:
    """Several workers' ``metadata`` summed per time bin of ``resolution`` seconds.

    Workers close their cycles at different moments: each point goes to the bin its
    time falls in (times are rounded down to a multiple of ``resolution``).
    """
    if resolution <= 0:
        raise ValueError(f"resolution must be positive, got {resolution!r}.")
    counts: dict[float, int] = {}
    keys: dict[str, dict[float, int]] = {}

    def bin_of(t: float) -> float:
        return math.floor(t / resolution) * resolution

    for meta in metas:
        for t, n in meta.get("counts", ()):
            b = bin_of(t)
            counts[b] = counts.get(b, 0) + n
        for prefix, points in meta.get("keys", {}).items():
            series = keys.setdefault(prefix, {})
            for t, n in points:
                b = bin_of(t)
                series[b] = series.get(b, 0) + n
    return {
        "counts": sorted(counts.items()),
        "keys": {prefix: sorted(series.items()) for prefix, series in keys.items()},
    }
