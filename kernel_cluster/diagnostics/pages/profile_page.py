"""A self-contained HTML flame graph of a profile: ``client.profile(filename=...)``.

The page is drawn by the same renderer library as the ``ProfileFlameGraph`` widget
and the performance report (``kernel_cluster/jupyter/static/report.js``), inlined
with the profile's data: it opens from disk, offline, with no server. Click a frame
to zoom into it and back out; hover for file:line, time and share; a task-prefix
selector switches between the trees the page carries, and the timeline under the
graph shows the samples over time.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from typing import Any

from ...core.profile_tree import Tree
from ..feeds.profile_codec import DEFAULT_INTERVAL, static_profiles
from ..queries.profile import profile, resolve_profile_window
from ..source import DiagnosticsSource
from .report import read_static_profiles, render_html


def flame_graph_html(
    tree: Tree,
    title: str = "Profile",
    *,
    trees: Mapping[str, Tree] | None = None,
    timeline: Mapping[str, Any] | None = None,
    interval: float = DEFAULT_INTERVAL,
    max_frames: int = 20_000,
) -> str:
    """The page as a string. ``trees``: more profiles by task prefix, for the
    selector; ``timeline``: samples over time (``client.profile_metadata()``)."""
    profiles = static_profiles(
        {**(trees or {}), "": tree}, timeline, interval=interval, max_frames=max_frames
    )
    return page_html(profiles, title)


def page_html(profiles: Mapping[str, Any], title: str) -> str:
    """The page of ``static_profiles`` data (already flattened)."""
    total = int(profiles["trees"][""]["header"]["total"]) if "" in profiles["trees"] else 0
    summary = (
        f"{total} samples. Click a frame to zoom in, click it again to zoom out."
        if total
        else "No samples in this profile."
    )
    data = {"page": "flamegraph", "title": title, "summary": summary, "profiles": profiles}
    return render_html(data, heading=html.escape(title), note=html.escape(summary))


def write_flame_graph(
    tree: Tree, filename: str | os.PathLike[str], title: str = "Profile", **kwargs: Any
) -> str:
    """Write the page to ``filename``; returns its path."""
    path = os.fspath(filename)
    with open(path, "w", encoding="utf-8") as f:
        f.write(flame_graph_html(tree, title, **kwargs))
    return path


def profile_to_file(
    source: DiagnosticsSource,
    filename: str | os.PathLike[str],
    start: Any = None,
    stop: Any = None,
    key: Any = None,
    prefix: str | None = None,
    workers: Any = None,
) -> Tree:
    """``client.profile(..., filename=)``: the merged profile, also written as a page
    with each busy prefix's tree and the timeline of the same window."""
    start_t, stop_t, prefix = resolve_profile_window(source, start, stop, key, prefix)
    tree = profile(source, start_t, stop_t, prefix=prefix, workers=workers)
    what = f"tasks {prefix!r}" if prefix is not None else "all tasks"
    data = read_static_profiles(source, start_t, stop_t, prefix, tree=tree)
    page = page_html(data or static_profiles({"": tree}), title=f"Profile of {what}")
    with open(filename, "w", encoding="utf-8") as f:
        f.write(page)
    return tree
