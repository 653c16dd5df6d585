"""Progress per task prefix as text bars, for a terminal (the ``Progress`` widget's
counterpart outside a notebook)::

    inc     [##########>>>>.........]  10 / 24  (4 running)
    total   [########################]  24 / 24  1 erred

``#`` done, ``x`` erred, ``>`` running, ``.`` waiting. On a terminal the bars are
redrawn in place until every task shown is done; into a file or a pipe only the
final state is written, so logs stay readable.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from ..source import DiagnosticsSource


def summarize(states: Mapping[str, int]) -> dict[str, int]:
    """Done, erred, running and waiting tasks out of a prefix's state counts (a
    released task is done: its result was dropped once nothing needed it; as
    ``widgets/src/spanTree.ts`` counts)."""
    n = states.get
    out = {
        "done": n("memory", 0) + n("forgotten", 0) + n("released", 0),
        "erred": n("erred", 0),
        "running": n("processing", 0),
        "waiting": n("waiting", 0) + n("queued", 0) + n("no-worker", 0),
    }
    out["total"] = sum(out.values())
    return out


def bar(t: Mapping[str, int], width: int) -> str:
    """``width`` characters: done, erred, running, then waiting, in proportion."""
    if t["total"] == 0:
        return " " * width
    chars = []
    used = 0
    shown = 0
    for key, ch in (("done", "#"), ("erred", "x"), ("running", ">")):
        shown += t[key]
        end = (shown * width) // t["total"]
        chars.append(ch * (end - used))
        used = end
    chars.append("." * (width - used))
    return "".join(chars)


def format_bars(progress: Mapping[str, Mapping[str, int]], width: int = 80) -> list[str]:
    """One line per prefix with tasks, then a total line when there are several."""
    rows = [(p, summarize(s)) for p, s in progress.items()]
    rows = [(p, t) for p, t in rows if t["total"]]
    if len(rows) > 1:
        total = {k: sum(t[k] for _, t in rows) for k in rows[0][1]}
        rows.append(("total", total))
    if not rows:
        return ["No tasks"]
    name_w = min(max(len(p) for p, _ in rows), 24)
    count_w = len(str(max(t["total"] for _, t in rows)))
    tails = []
    for _, t in rows:
        tail = f"  {t['done'] + t['erred']:>{count_w}} / {t['total']:<{count_w}}"
        if t["running"]:
            tail += f"  ({t['running']} running)"
        if t["erred"]:
            tail += f"  {t['erred']} erred"
        tails.append(tail)
    bar_w = max(10, width - name_w - 4 - max(len(tail) for tail in tails))
    lines = []
    for (p, t), tail in zip(rows, tails):
        name = p if len(p) <= name_w else p[: name_w - 1] + "~"
        lines.append(f"{name:<{name_w}}  [{bar(t, bar_w)}]{tail}".rstrip())
    return lines


def unfinished(progress: Mapping[str, Mapping[str, int]]) -> int:
    return sum(summarize(s)["running"] + summarize(s)["waiting"] for s in progress.values())


class TextProgress:
    """Bars of the prefixes at work: those with unfinished tasks when it starts (all,
    if none is), and those that change while it runs. ``run()`` returns once they are all done (or
    after ``timeout`` seconds), with the final text."""

    def __init__(
        self,
        source: DiagnosticsSource,
        *,
        file: IO[str] | None = None,
        interval: float = 0.2,
        width: int | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], Any] | None = None,
    ):
        self.source = source
        self.file = file if file is not None else sys.stdout
        self.interval = interval
        self.width = width or min(shutil.get_terminal_size((100, 24)).columns, 120)
        self.timeout = timeout
        self.clock = clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self._drawn = 0
        self._start = self.source.progress()
        self._shown = {p for p, s in self._start.items() if unfinished({p: s})}
        if not self._shown:  # nothing at work: show how the last work ended
            self._shown = set(self._start)

    def snapshot(self) -> dict[str, dict[str, int]]:
        progress = self.source.progress()
        for p, s in progress.items():
            if s != self._start.get(p):
                self._shown.add(p)
        return {p: s for p, s in progress.items() if p in self._shown}

    def render(self) -> str:
        return "\n".join(format_bars(self.snapshot(), self.width))

    def _draw(self, text: str) -> None:
        out = self.file
        if self.tty and self._drawn:
            out.write(f"\x1b[{self._drawn}F")  # back to the first line of the last drawing
        lines = text.split("\n")
        for line in lines:
            out.write(("\x1b[2K" if self.tty else "") + line + "\n")
        self._drawn = len(lines)
        out.flush()

    def run(self) -> str:
        deadline = None if self.timeout is None else self.clock() + self.timeout
        while True:
            progress = self.snapshot()
            text = "\n".join(format_bars(progress, self.width))
            last = (
                not unfinished(progress)
                or self._stop.is_set()
                or (deadline is not None and self.clock() >= deadline)
            )
            if self.tty or last:
                self._draw(text)
            if last:
                return text
            self.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
