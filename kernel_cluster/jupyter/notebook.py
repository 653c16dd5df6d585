"""Where the code runs: a notebook (a Jupyter kernel with a front-end) or a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..diagnostics.progress_bar import set_notebook_display
from ..diagnostics.source import Diagnosable, source_of

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
    ``diagnostics.progress_text.TextProgress``)."""
    source = source_of(client)
    if in_notebook():
        from .widgets import Progress

        return Progress(source)
    from ..diagnostics.progress_text import TextProgress

    return TextProgress(source, **kwargs).run()


def _progress_bar_widget(client: Any) -> Callable[[], None] | None:
    """``ProgressBar`` in a notebook: the client's ``Progress`` widget, shown now;
    returns what ends its updates once the computation is done (None elsewhere)."""
    if not in_notebook():
        return None
    try:
        from IPython.display import display

        from .widgets import Progress

        widget = Progress(client)
    except (ImportError, FileNotFoundError):  # no widget libraries or bundle: text
        return None
    display(widget)

    def done() -> None:
        try:
            widget.update(force=True)
        finally:
            poller = getattr(widget, "_poller", None)
            if poller is not None:
                poller.stop()  # the views stay, showing the final state

    return done


set_notebook_display(_progress_bar_widget)
