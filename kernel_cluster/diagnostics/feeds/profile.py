"""The live flame graph's feed: what the ``ProfileFlameGraph`` widget is sent.

``ProfileFeed`` sends the flame graph widget the profile of the selection it holds
(task prefix, time window) and the timeline of samples per profile cycle; it sends
the tree again only when it changed, and nothing when neither changed.
``read_profile_snapshot`` is what the widget's publisher reads from a source: it
re-reads the (costly) tree only when the samples inside the selection changed.
Trees travel as ``profile_codec`` columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.profile_tree import Tree
from ..queries.profile import profile, profile_metadata
from ..source import DiagnosticsSource
from .profile_codec import DEFAULT_INTERVAL, clean_timeline, flatten, samples_in, unflatten
from .tables import Message


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
