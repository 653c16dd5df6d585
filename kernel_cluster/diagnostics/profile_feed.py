"""Profiles for the browser: a count tree as columns, and the flame graph's feed.

``flatten`` lays a profile tree out in pre-order (a node's children right after it,
sorted by function name and line, so that a layout is stable from one update to the
next) as typed-array columns and a string table::

    parent int32 (-1 for the root)   count float64   own float64
    name uint32   file uint32   line uint32   text uint32  (string indices)

Frames under ``min_fraction`` of all samples are left out with what is under them,
and at most ``max_frames`` frames are kept (the smallest go first).

``ProfileFeed`` sends the flame graph widget the profile of the selection it holds
(task prefix, time window) and the timeline of samples per profile cycle; it sends
the tree again only when it changed, and nothing when neither changed.
``read_profile_snapshot`` is what the widget's publisher reads from a source: it
re-reads the (costly) tree only when the samples inside the selection changed.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Mapping
from typing import Any

from ..core.profile import Tree, iter_nodes, new_tree
from .feeds import Message
from .source import DiagnosticsSource

NBUFFERS = 7
DEFAULT_INTERVAL = 0.01  # seconds between samples, for pages made from a tree alone


def flatten(
    tree: Tree, min_fraction: float = 0.0, max_frames: int | None = None
) -> tuple[dict[str, Any], list[bytes]]:
    """``({"strings", "total", "nframes"}, buffers)`` for ``tree`` (see the module)."""
    total = tree["count"]
    threshold = max(min_fraction * total, 1e-12)
    if max_frames is not None:
        counts = [n["count"] for _, n in iter_nodes(tree)]
        if len(counts) > max_frames:
            # keep the frames above the first one that would not fit: at most max_frames
            threshold = max(threshold, heapq.nlargest(max_frames + 1, counts)[-1] + 1e-9)
    strings: list[str] = []
    index: dict[str, int] = {}

    def s(text: Any) -> int:
        text = "" if text is None else str(text)
        i = index.get(text)
        if i is None:
            i = index[text] = len(strings)
            strings.append(text)
        return i

    cols: dict[str, array[Any]] = {k: array(t) for k, t in zip(_COLUMNS, "iddIIII")}
    parent, count, own = cols["parent"], cols["count"], cols["own"]
    name, file, line, text = cols["name"], cols["file"], cols["line"], cols["text"]
    stack: list[tuple[int, Tree]] = [(-1, tree)]
    while stack:
        up, node = stack.pop()
        me = len(parent)
        d = node["description"]
        parent.append(up)
        count.append(float(node["count"]))
        own.append(float(node["own"]))
        name.append(s("all" if up < 0 else d.get("name")))
        file.append(s(d.get("filename")))
        line.append(int(d.get("line_number") or 0))
        text.append(s(d.get("line")))
        kids = [c for c in node["children"].values() if c["count"] >= threshold]
        kids.sort(
            key=lambda c: (c["description"]["name"], c["description"]["line_number"]),
            reverse=True,  # popped last-first: the first child comes out first
        )
        stack.extend((me, c) for c in kids)
    content = {"strings": strings, "total": float(total), "nframes": len(parent)}
    return content, [cols[k].tobytes() for k in _COLUMNS]


_COLUMNS = ("parent", "count", "own", "name", "file", "line", "text")


def unflatten(content: Mapping[str, Any], buffers: list[bytes]) -> Tree:
    """The tree back from ``flatten``'s output (tests, and the flame graph's readers)."""
    cols = {k: array(t, bytes(b)) for (k, t), b in zip(zip(_COLUMNS, "iddIIII"), buffers)}
    strings = content["strings"]
    nodes: list[Tree] = []
    for i in range(len(cols["parent"])):
        d = {
            "filename": strings[cols["file"][i]],
            "name": strings[cols["name"][i]],
            "line_number": cols["line"][i],
            "line": strings[cols["text"][i]],
        }
        node = {
            "identifier": f"{d['filename']}:{d['line_number']}:{d['name']}",
            "description": d,
            "count": int(cols["count"][i]),
            "own": int(cols["own"][i]),
            "children": {},
        }
        p = cols["parent"][i]
        if p < 0:  # the root stands for no frame
            node = {**new_tree(), "count": node["count"], "own": node["own"]}
        else:
            nodes[p]["children"][node["identifier"]] = node
        nodes.append(node)
    return nodes[0]


def clean_timeline(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Merged profile metadata as JSON-able lists, empty cycles left out."""
    return {
        "counts": [[float(t), int(n)] for t, n in meta.get("counts", ()) if n],
        "keys": {
            str(p): [[float(t), int(n)] for t, n in pts if n]
            for p, pts in sorted(meta.get("keys", {}).items())
            if any(n for _, n in pts)
        },
    }


def samples_in(timeline: Mapping[str, Any], selection: Mapping[str, Any], cycle: float) -> int:
    """How many samples of the timeline fall in the selection (prefix and window)."""
    prefix = selection.get("prefix")
    points = timeline["keys"].get(prefix, []) if prefix else timeline["counts"]
    start, stop = selection.get("start"), selection.get("stop")
    return sum(
        n
        for t, n in points
        if (start is None or t + cycle >= start) and (stop is None or t - cycle <= stop)
    )


class ProfileFeed:
    """The selected profile and the timeline, sent when either changed."""

    name = "profile"

    def __init__(self, min_fraction: float = 0.0, max_frames: int = 20_000) -> None:
        self.min_fraction = min_fraction
        self.max_frames = max_frames
        self.selection: dict[str, Any] = {"prefix": None, "start": None, "stop": None}
        self.seq = 0
        self.interval = DEFAULT_INTERVAL
        self.timeline: dict[str, Any] = {"counts": [], "keys": {}}
        self.tree: tuple[dict[str, Any], list[bytes]] | None = None
        self.tree_selection: dict[str, Any] | None = None  # what ``tree`` is the profile of
        self.tree_samples = -1  # samples in the selection when ``tree`` was read

    def select(self, prefix: str | None = None, start: Any = None, stop: Any = None) -> None:
        self.selection = {"prefix": prefix or None, "start": start, "stop": stop}

    def needs_tree(self, samples: int) -> bool:
        return self.tree_selection != self.selection or samples != self.tree_samples

    def update(self, snapshot: Mapping[str, Any] | None, full: bool = False) -> Message | None:
        """``snapshot``: ``{"timeline", "tree" (None: unchanged), "samples", "selection",
        "interval"}`` as ``read_profile_snapshot`` makes it."""
        new_timeline = new_tree = None
        if snapshot is not None:
            self.interval = snapshot.get("interval", self.interval)
            timeline = clean_timeline(snapshot["timeline"])
            if timeline != self.timeline:
                self.timeline = new_timeline = timeline
            if snapshot.get("tree") is not None:
                flat = flatten(snapshot["tree"], self.min_fraction, self.max_frames)
                selection = dict(snapshot["selection"])
                self.tree_samples = snapshot.get("samples", -1)
                if self.tree is None or flat != self.tree or selection != self.tree_selection:
                    self.tree, new_tree = flat, flat
                self.tree_selection = selection
        if full:
            new_timeline, new_tree = self.timeline, self.tree
        elif new_timeline is None and new_tree is None:
            return None
        return self._message(new_timeline, new_tree, full)

    def full(self) -> Message:
        msg = self.update(None, full=True)
        assert msg is not None
        return msg

    def _message(self, timeline: Any, tree: Any, full: bool) -> Message:
        self.seq += 1
        content = {
            "feed": self.name,
            "seq": self.seq,
            "full": full,
            "interval": self.interval,
            "selection": self.tree_selection or self.selection,
            "timeline": timeline,
            "tree": None if tree is None else tree[0],
        }
        return content, [] if tree is None else list(tree[1])


def read_profile_snapshot(source: DiagnosticsSource, feed: ProfileFeed) -> dict[str, Any]:
    """The timeline of every sample, and the selected profile if it may have changed."""
    from .profile import profile, profile_metadata

    meta = profile_metadata(source)
    timeline = clean_timeline(meta)
    cycle = source.profile_cycle_interval()
    selection = dict(feed.selection)
    samples = samples_in(timeline, selection, cycle)
    tree = None
    if feed.needs_tree(samples):
        tree = profile(
            source,
            start=selection["start"],
            stop=selection["stop"],
            prefix=selection["prefix"],
        )
    return {
        "timeline": timeline,
        "tree": tree,
        "samples": samples,
        "selection": selection,
        "interval": source.profile_interval(),
    }


class ProfileReader:
    """Applies profile messages as the browser does (for tests)."""

    def __init__(self) -> None:
        self.seq = 0
        self.timeline: dict[str, Any] = {"counts": [], "keys": {}}
        self.tree: Tree | None = None
        self.selection: dict[str, Any] = {}

    def apply(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if not content["full"] and content["seq"] != self.seq + 1:
            raise ValueError(f"profile message {content['seq']} after {self.seq}: one was lost")
        self.seq = content["seq"]
        self.selection = content["selection"]
        if content["timeline"] is not None:
            self.timeline = content["timeline"]
        if content["tree"] is not None:
            self.tree = unflatten(content["tree"], buffers)


# -- static pages: a flame graph file, the performance report ------------------------------


def static_profiles(
    trees: Mapping[str, Tree],
    timeline: Mapping[str, Any] | None = None,
    interval: float = DEFAULT_INTERVAL,
    max_frames: int = 20_000,
) -> dict[str, Any]:
    """Profiles for a page that carries them: ``trees`` by task prefix (``""``: every
    task's), flattened with their buffers in base64, and the timeline."""
    import base64

    out = {}
    for prefix, tree in trees.items():
        content, buffers = flatten(tree, max_frames=max_frames)
        out[prefix] = {
            "header": content,
            "buffers": [base64.b64encode(b).decode("ascii") for b in buffers],
        }
    return {
        "trees": out,
        "timeline": clean_timeline(timeline or {}),
        "interval": interval,
    }


def read_static_profiles(
    source: DiagnosticsSource,
    start: float | None = None,
    stop: float | None = None,
    prefix: str | None = None,
    max_prefixes: int = 40,
    tree: Tree | None = None,
) -> dict[str, Any] | None:
    """The profile of a window from a source (``tree`` if it was read already), every
    task's and each prefix's (the ``max_prefixes`` busiest), for a static page; None
    when there are no samples."""
    from .profile import profile, profile_metadata

    if tree is None:
        tree = profile(source, start=start, stop=stop, prefix=prefix)
    if not tree.get("count"):
        return None
    timeline = clean_timeline(profile_metadata(source, start=start, stop=stop))
    trees = {"": tree}
    if prefix is None:
        busiest = sorted(timeline["keys"], key=lambda p: -sum(n for _, n in timeline["keys"][p]))
        for p in busiest[:max_prefixes]:
            trees[p] = profile(source, start=start, stop=stop, prefix=p)
    else:
        timeline = {"counts": timeline["keys"].get(prefix, []), "keys": {}}
    return static_profiles(trees, timeline, source.profile_interval())
