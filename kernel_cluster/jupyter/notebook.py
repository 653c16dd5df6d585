"""Where the code runs: a notebook (a Jupyter kernel with a front-end) or a terminal."""

from __future__ import annotations

import sys
from typing import Any


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can show), False in a terminal,
    a script or a plain IPython shell."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def source_of(obj: Any) -> Any:
    """The DiagnosticsSource behind a Client, or ``obj`` itself if it is one."""
    diagnostics = getattr(type(obj), "_diagnostics", None)
    if diagnostics is not None:  # a Client: its engine's source
        return obj._diagnostics
    for method in ("fine_metrics", "spans", "progress"):
        if not callable(getattr(obj, method, None)):
            raise TypeError(
                f"Expected a kernel_cluster Client or a DiagnosticsSource, got "
                f"{type(obj).__name__} (it has no {method}() method)."
            )
    return obj


def progress(client: Any = None, **kwargs: Any) -> Any:
    """Progress per task prefix: the ``Progress`` widget in a notebook; text bars in a
    terminal, drawn until the work in progress is done (``kwargs`` go to
    ``diagnostics.progress_text.TextProgress``)."""
    from ..diagnostics.source import default_source

    source = default_source() if client is None else client
    if in_notebook():
        from .widgets import Progress

        return Progress(source)
    from ..diagnostics.progress_text import TextProgress

    return TextProgress(source_of(source), **kwargs).run()
