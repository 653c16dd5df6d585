"""Fine performance metrics as tables: the data behind the seeds' three panels.

``fine_metrics`` is the table of any client the views read; ``to_frame`` turns the
summed worker metrics into a tidy DataFrame, one row per (context, span, function,
activity, unit); ``by_function`` and ``by_activity`` pivot it the way the "Task
execution, by function / by activity" panels show it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...core.span_folding import IDLE
from ..attach import source_of
from ..snapshots import Metrics
from ..source import Diagnosable

COLUMNS = ["context", "span", "function", "activity", "unit", "value"]


def fine_metrics(
    client: Diagnosable | None = None, unit: str | None = "seconds", span: Any = None
) -> pd.DataFrame:
    """``client.fine_metrics()`` for whatever the views read: our Client, a
    ``distributed.Client`` (``kernel_cluster.fine_metrics(dask_client)``: the table
    without the widgets), or the default (the latest Client, or what ``attach`` named).
    ``unit``: "seconds" by default; "bytes", "count", or None for every unit. ``span``:
    a span id, a tag or a tuple of tags; that span's metrics, its "idle or other
    spans" line included."""
    source = source_of(client)
    if span is None:
        return to_frame(source.fine_metrics(), unit=unit)
    if isinstance(span, list):
        span = tuple(span)
    if not (
        (isinstance(span, str) and span)
        or (isinstance(span, tuple) and span and all(isinstance(t, str) for t in span))
    ):
        raise TypeError(
            f"fine_metrics(span={span!r}): give a span's id (what `with span(...)` "
            "yields), a tag, or a tuple of tags, as str."
        )
    metrics, label = source.span_metrics(span)
    return span_frame(metrics, label, unit=unit)


def to_frame(metrics: Metrics, unit: str | None = None) -> pd.DataFrame:
    """One row per metric; ``unit`` keeps only that unit (seconds, bytes, count, ...)."""
    rows = []
    if unit is not None:
        check_unit(unit, metrics)
    for key, value in metrics.items():
        if not isinstance(key, tuple) or not key:
            continue
        if key[0] == "execute" and len(key) == 5:
            _, span, function, activity, u = key
        elif len(key) == 3:
            span, function = None, None
            _, activity, u = key
        else:
            continue
        if unit is not None and u != unit:
            continue
        rows.append((key[0], span, function, activity, u, value))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["context", "function", "activity"], na_position="last").reset_index(
        drop=True
    )


# units the engine records itself: asking for one of them is never a mistake, even
# before any metric arrived
ENGINE_UNITS = ("seconds", "bytes", "count")


def check_unit(unit: Any, metrics: Metrics) -> None:
    """A ``unit`` nothing is measured in is a typo, not an empty table: say which exist."""
    if not isinstance(unit, str):
        raise TypeError(f"unit={unit!r}: give a unit name such as 'seconds', or None for all.")
    units = {k[-1] for k in metrics if isinstance(k, tuple) and k and isinstance(k[-1], str)}
    if unit in units or unit in ENGINE_UNITS:
        return
    known = sorted(units | set(ENGINE_UNITS))
    raise ValueError(
        f"No metric is measured in unit={unit!r}; the units are {', '.join(map(repr, known))} "
        "(or unit=None for all of them)."
    )


def span_frame(metrics: Metrics, label: str, unit: str | None = None) -> pd.DataFrame:
    """Rows like ``to_frame``'s for a span's metrics (keyed without the span id)."""
    spanned: Metrics = {("execute", label, k[1], k[2], k[3]): v for k, v in metrics.items()}
    return to_frame(spanned, unit=unit)


def by_function(frame: pd.DataFrame, unit: str = "seconds") -> pd.DataFrame:
    """Task execution, by function: a row per task prefix, a column per activity.

    Idle time belongs to no function, nor does a span's "idle or other spans" line
    (function ``"N/A"``, as Dask's): they show in ``by_activity`` only.
    """
    tasks = frame.function.notna() & (frame.activity != IDLE[2])
    return _pivot(frame[tasks], "execute", unit, index="function")


def by_activity(frame: pd.DataFrame, unit: str = "seconds", context: str = "execute") -> Any:
    """Task execution (or send / receive data), by activity: one total per activity."""
    sel = frame[(frame.context == context) & (frame.unit == unit)]
    return sel.groupby("activity")["value"].sum().sort_values(ascending=False)


def _pivot(frame: pd.DataFrame, context: str, unit: str, index: str) -> pd.DataFrame:
    sel = frame[(frame.context == context) & (frame.unit == unit)].copy()
    sel[index] = sel[index].fillna("(none)")
    table = sel.pivot_table(index=index, columns="activity", values="value", aggfunc="sum")
    table = table.fillna(0)
    table["total"] = table.sum(axis=1)
    return table.sort_values("total", ascending=False)
