"""``%%span`` and ``%span``: put everything a cell submits under a span.

    %load_ext kernel_cluster

    %%span "Alice's workflow" "data load"
    futures = client.map(load, files)

    %span "data load" -- futures = client.map(load, files)

Tags are read like a shell line (quote tags with spaces). Inside an outer
``with span(...)`` the cell's span nests under it. An exception in the cell
closes the span and is raised as usual.

``--compare-to REF`` names a baseline (a span id or name, or a stored run:
``etl@-1``, the latest stored ``etl`` other than this cell's): once the cell is
done, the one-line verdict of ``kernel_cluster.compare(REF, <the cell's span>)``
is printed under it (a missing baseline is said there too; the cell's result is
unaffected).

    %%span etl --compare-to etl@-1
    results = client.gather(client.map(parse, files))
"""

from __future__ import annotations

import ast
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..diagnostics.attach import default_source
from ..diagnostics.history.compare import comparison
from ..diagnostics.spans import span

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

USAGE = (
    "%%span TAG [TAG ...] [--compare-to REF]  (cell)   or   "
    "%span TAG [TAG ...] [--compare-to REF] -- statement  (line)"
)


@magics_class
class SpanMagics(Magics):
    shell: InteractiveShell  # set by IPython when it registers the magics

    # IPython's types take the decorator's name form for Never
    @line_cell_magic("span")  # type: ignore[arg-type]
    def span_magic(self, line: str, cell: str | None = None) -> Any:
        if cell is None:
            if "--" not in line:
                raise UsageError(f"%span needs a statement after '--'. Usage: {USAGE}")
            line, cell = line.split("--", 1)
        try:
            tags = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"Cannot read the span tags {line!r}: {exc}. Usage: {USAGE}") from None
        tags, baseline = _baseline(tags)
        if not tags:
            raise UsageError(f"%%span needs at least one tag. Usage: {USAGE}")
        code = self.shell.transform_cell(cell)
        with span(*tags) as span_id:
            result = self._run(code)
        if baseline is not None:
            print(verdict_line(baseline, span_id))
        return result

    def _run(self, code: str) -> Any:
        """Run like a cell: statements, then the last expression's value is the result."""
        tree = ast.parse(code)
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
        else:
            last = None
        ns = self.shell.user_ns
        if tree.body:
            exec(compile(tree, "<span cell>", "exec"), ns)
        if last is not None:
            expr = ast.Expression(last.value)
            return eval(compile(expr, "<span cell>", "eval"), ns)
        return None


def _baseline(words: list[str]) -> tuple[list[str], str | None]:
    """The tags, and the reference after ``--compare-to`` (or ``--compare-to=REF``)."""
    tags: list[str] = []
    baseline = None
    it = iter(words)
    for word in it:
        if word == "--compare-to":
            baseline = next(it, None)
            if not baseline:
                raise UsageError(f"--compare-to needs a run, e.g. etl@-1. Usage: {USAGE}")
        elif word.startswith("--compare-to="):
            baseline = word.split("=", 1)[1]
            if not baseline:
                raise UsageError(f"--compare-to needs a run, e.g. etl@-1. Usage: {USAGE}")
        else:
            tags.append(word)
    return tags, baseline


def verdict_line(baseline: str, span_id: str) -> str:
    """The comparison's verdict for the cell's span against ``baseline``, or why there
    is none."""
    try:
        source = default_source()
    except ValueError:
        source = None
    try:
        c = comparison(baseline, span_id, source)
    except (KeyError, ValueError) as exc:  # no such baseline, the history off, ...
        why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        return f"No comparison with {baseline}: {why}"
    except (RuntimeError, TimeoutError) as exc:  # the cluster or the history file
        return f"No comparison with {baseline}: {exc}"
    running = "" if c.b.done else " (the cell's tasks are still running)"
    return f"Against {baseline} ({c.a.label}): {c.verdict}{running}"


def register(ip: Any) -> None:
    """Idempotent: registering the same magics again replaces them."""
    ip.register_magics(SpanMagics)
