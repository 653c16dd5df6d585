"""Snapshots as a stream of deltas: what the live widgets send to the browser.

A *feed* remembers what it last sent and turns the next snapshot into a message
holding only what changed, or ``None`` when nothing did. A message is a JSON-able
dict plus a list of binary buffers; ``full=True`` messages restate everything and
let a browser that missed earlier messages start over.

Three feeds, one per kind of data a view shows:

- ``MetricsFeed``: fine metrics rows ``(context, span, function, activity, unit) ->
  value``. Strings go once into a growing string table, a row's key once into a
  growing row table; an update carries the changed rows' numbers and values as
  ``uint32`` / ``float64`` buffers.
- ``RecordsFeed``: small records by id (spans, task prefixes), as JSON; an update
  carries the records that differ from what was sent.

``MetricsReader`` and ``RecordsReader`` apply messages the way the browser does;
the tests use them to check that the deltas rebuild the snapshot exactly.
Nothing here touches widgets, threads or the engine: plain data in, plain data out.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.spans import FOLDED_ID, is_default_span_id
from ..snapshots import SpanInfo

Message = tuple[dict[str, Any], list[bytes]]
MetricKey = tuple[str | None, str | None, str | None, str | None, str | None]

_NONE = 0  # string table index 0 stands for "no value" (idle has no span or function)


def metric_key(key: tuple[Any, ...]) -> MetricKey | None:
    """A worker metric key as five fields, or None for keys that are not metrics.

    ``("execute", span, prefix, activity, unit)`` stays as it is; the three-field keys
    of the other contexts (``("get-data", activity, unit)``, ...) get no span and no
    function. Activities and units that are not strings (custom metrics) become text.
    """
    if not isinstance(key, tuple):
        return None
    if len(key) == 5:
        context, span, function, activity, unit = key
    elif len(key) == 3:
        context, activity, unit = key
        span = function = None
    else:
        return None
    fields = (context, span, function, activity, unit)
    return tuple(None if v is None else str(v) for v in fields)  # type: ignore[return-value]


class MetricsFeed:
    """Fine metrics as deltas against what was last sent."""

    def __init__(self) -> None:
        self.seq = 0
        self._strings: dict[str, int] = {}
        self._string_list: list[str] = []
        self._rows: dict[MetricKey, int] = {}
        self._row_keys: list[MetricKey] = []
        self._sent: list[float] = []  # the value the browser holds, per row
        # rows of default spans, which may fold (core.spans): their metrics then move
        # to the fold's row, and this one is sent as 0 so nothing counts twice
        self._default_rows: dict[MetricKey, int] = {}

    def _string(self, s: str | None) -> int:
        if s is None:
            return _NONE
        i = self._strings.get(s)
        if i is None:
            self._string_list.append(s)
            i = self._strings[s] = len(self._string_list)  # 1-based: 0 is None
        return i

    def update(
        self, metrics: Mapping[tuple[Any, ...], float], full: bool = False, partial: bool = False
    ) -> Message | None:
        """The message that brings the browser to ``metrics``; None if it is there.

        ``partial``: ``metrics`` holds only the rows that changed (with 0 for a row
        that went, as ``DiagnosticsSource.changes_since`` gives them), not every row:
        rows left out keep their value."""
        n_strings, n_rows = len(self._string_list), len(self._row_keys)
        changed: list[int] = []
        values: list[float] = []
        default_rows = self._default_rows
        seen_default: set[MetricKey] = set()
        for raw, value in metrics.items():
            key = metric_key(raw)
            if key is None:
                continue
            value = float(value)
            if is_default_span_id(key[1]) and key[1] != FOLDED_ID:
                seen_default.add(key)
            row = self._rows.get(key)
            if row is None:
                for field in key:
                    self._string(field)
                row = self._rows[key] = len(self._row_keys)
                self._row_keys.append(key)
                self._sent.append(value)
                if key in seen_default:
                    default_rows[key] = row
            elif self._sent[row] == value and not full:
                continue
            self._sent[row] = value
            changed.append(row)
            values.append(value)
        if not partial and len(default_rows.keys() & seen_default) < len(default_rows):
            # a default span folded: its rows went
            for key in [k for k in default_rows if k not in seen_default]:
                row = default_rows.pop(key)
                self._sent[row] = 0.0
                changed.append(row)
                values.append(0.0)
        if full:
            n_strings, n_rows = 0, 0
            changed = list(range(len(self._row_keys)))
            values = list(self._sent)
        elif not changed:
            return None
        self.seq += 1
        keys = array("I")
        for key in self._row_keys[n_rows:]:
            keys.extend(self._string(f) for f in key)
        content = {
            "feed": "metrics",
            "seq": self.seq,
            "full": full,
            "strings": self._string_list[n_strings:],
            "first_row": n_rows,
        }
        return content, [
            keys.tobytes(),
            array("I", changed).tobytes(),
            array("d", values).tobytes(),
        ]

    def full(self) -> Message:
        msg = self.update({}, full=True, partial=True)
        assert msg is not None
        return msg


class RecordsFeed:
    """Records by id (JSON-able dicts) as deltas: the records that changed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seq = 0
        self._sent: dict[str, Any] = {}

    def update(self, records: Mapping[str, Any], full: bool = False) -> Message | None:
        changed = {k: v for k, v in records.items() if full or self._sent.get(k) != v}
        removed = [k for k in self._sent if k not in records]
        for k in removed:
            del self._sent[k]
        self._sent.update(changed)
        if full:
            changed = dict(self._sent)
        elif not changed and not removed:
            return None
        self.seq += 1
        content = {
            "feed": self.name,
            "seq": self.seq,
            "full": full,
            "records": changed,
            "removed": removed,
        }
        return content, []

    def full(self) -> Message:
        msg = self.update(self._sent, full=True)
        assert msg is not None
        return msg

    def update_some(self, changed: Mapping[str, Any], removed: Iterable[str]) -> Message | None:
        """The message for these records changed and these ids gone (the others stay as
        they were): what a reader of changes, not of the whole state, calls."""
        sent = self._sent
        changed = {k: v for k, v in changed.items() if sent.get(k) != v}
        gone = [k for k in removed if k in sent and k not in changed]
        for k in gone:
            del sent[k]
        if not changed and not gone:
            return None
        sent.update(changed)
        self.seq += 1
        content = {
            "feed": self.name,
            "seq": self.seq,
            "full": False,
            "records": changed,
            "removed": gone,
        }
        return content, []


# -- snapshots as records ----------------------------------------------------------------


def span_records(spans: Iterable[SpanInfo]) -> dict[str, dict[str, Any]]:
    """``SpanInfo`` snapshots as the span feed's records (no per-span metrics: the
    browser filters the metrics rows by span id itself)."""
    out = {}
    for s in spans:
        out[s.id] = {
            "name": list(s.name),
            "parent": s.parent,
            "enqueued": s.enqueued,
            "start": s.start,
            "stop": s.stop,
            "duration": s.duration,
            "nbytes": s.nbytes_total,
            "states": {k: v for k, v in s.states.items() if v},
            "done": s.done,
            "code": [[list(frame) for frame in stack] for stack in s.code][:3],
        }
    return out


def progress_records(progress: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per-prefix state counts as records, zeros left out."""
    return {p: {k: v for k, v in states.items() if v} for p, states in progress.items()}


# -- readers: what the browser does with the messages ----------------------------------------


class MetricsReader:
    def __init__(self) -> None:
        self.strings: list[str | None] = [None]
        self.keys: list[MetricKey] = []
        self.values: list[float] = []
        self.seq = 0

    def apply(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if content["full"]:
            self.__init__()  # type: ignore[misc]
        elif content["seq"] != self.seq + 1:
            raise ValueError(f"metrics message {content['seq']} after {self.seq}: one was lost")
        self.seq = content["seq"]
        self.strings.extend(content["strings"])
        keys = array("I", bytes(buffers[0]))
        if content["first_row"] != len(self.keys):
            raise ValueError("metrics rows out of step")
        for i in range(0, len(keys), 5):
            self.keys.append(tuple(self.strings[j] for j in keys[i : i + 5]))  # type: ignore[arg-type]
            self.values.append(0.0)
        rows = array("I", bytes(buffers[1]))
        values = array("d", bytes(buffers[2]))
        for r, v in zip(rows, values):
            self.values[r] = v

    def as_dict(self) -> dict[MetricKey, float]:
        return dict(zip(self.keys, self.values))


class RecordsReader:
    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    def apply(self, content: dict[str, Any], buffers: list[bytes]) -> None:
        if content["full"]:
            self.records = {}
        for k in content["removed"]:
            self.records.pop(k, None)
        self.records.update(content["records"])
