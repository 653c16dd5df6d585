"""``%%span`` and ``%span``: put everything a cell submits under a span.

    %load_ext kernel_cluster

    %%span "Alice's workflow" "data load"
    futures = client.map(load, files)

    %span "data load" -- futures = client.map(load, files)

Tags are read like a shell line (quote tags with spaces). Inside an outer
``with span(...)`` the cell's span nests under it. An exception in the cell
closes the span and is raised as usual. ``--diagnose`` among the tags prints the
span's findings under the cell once it ran (diagnostics/queries/findings.py).
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..diagnostics.attach import default_source
from ..diagnostics.queries.findings import diagnose
from ..diagnostics.spans import span

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

USAGE = (
    "%%span [--diagnose] TAG [TAG ...]  (cell)   or   "
    "%span [--diagnose] TAG [TAG ...] -- statement  (line)"
)
_STATEMENT = re.compile(r"(?:^|\s)--(?:\s|$)")  # a lone "--" starts the statement


@magics_class
class SpanMagics(Magics):
    shell: InteractiveShell  # set by IPython when it registers the magics

    # IPython's types take the decorator's name form for Never
    @line_cell_magic("span")  # type: ignore[arg-type]
    def span_magic(self, line: str, cell: str | None = None) -> Any:
        if cell is None:
            parts = _STATEMENT.split(line, maxsplit=1)
            if len(parts) < 2:
                raise UsageError(f"%span needs a statement after '--'. Usage: {USAGE}")
            line, cell = parts
        try:
            tags = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"Cannot read the span tags {line!r}: {exc}. Usage: {USAGE}") from None
        explain = "--diagnose" in tags
        tags = [t for t in tags if t != "--diagnose"]
        if not tags:
            raise UsageError(f"%%span needs at least one tag. Usage: {USAGE}")
        code = self.shell.transform_cell(cell)
        with span(*tags) as span_id:
            result = self._run(code)
        if explain:
            print(diagnose(default_source(), span_id))
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


def register(ip: Any) -> None:
    """Idempotent: registering the same magics again replaces them."""
    ip.register_magics(SpanMagics)
