"""Profiles as columns: the one encoding of a count tree that every browser view reads.

``flatten`` lays a profile tree out in pre-order (a node's children right after it,
sorted by function name and line, so that a layout is stable from one update to the
next) as typed-array columns and a string table::

    parent int32 (-1 for the root)   count float64   own float64
    name uint32   file uint32   line uint32   text uint32  (string indices)

Frames under ``min_fraction`` of all samples are left out with what is under them,
and at most ``max_frames`` frames are kept (the smallest go first). The live flame
graph (``feeds/profile.py``) sends these columns as binary buffers; static pages
(``profile_page``, the performance report) carry them in base64 (``static_profiles``).

The profile modules: ``queries/profile.py`` reads and merges the workers' profiles;
this codec encodes them; ``feeds/profile.py`` (the live widget's deltas) and
``pages/profile_page.py`` (the HTML flame graph) use both.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Mapping
from typing import Any

from ...core.profile_tree import Tree, iter_nodes, new_tree

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
