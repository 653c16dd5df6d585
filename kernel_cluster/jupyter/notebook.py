"""Where the code runs: a notebook (a Jupyter kernel with a front-end) or a terminal."""

from __future__ import annotations

import sys
from typing import Any

from ..diagnostics.attach import source_of
from ..diagnostics.source import Diagnosable

__all__ = ["in_notebook", "progress", "source_of"]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can show), False in a terminal,
    a script or a plain IPython shell."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress(client: Diagnosable | None = None, **kwargs: Any) -> Any:
    """Progress per task prefix: the ``Progress`` widget in a notebook; text bars in a
    terminal, drawn until the work in progress is done (``kwargs`` go to
    ``diagnostics.queries.progress_text.TextProgress``)."""
    source = source_of(client)
    if in_notebook():
        from .widgets import Progress

        return Progress(source)
    from ..diagnostics.queries.progress_text import TextProgress

    return TextProgress(source, **kwargs).run()
