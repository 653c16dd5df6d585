"""ProgressBar's view in a notebook: the client's ``Progress`` widget.

``diagnostics.progress_bar`` cannot import this layer; this module tells it how to
show the widget when it is imported (``kernel_cluster``'s import does that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..diagnostics.progress_bar import set_notebook_display
from .notebook import in_notebook

__all__ = ["progress_bar_widget"]


def progress_bar_widget(client: Any) -> Callable[[], None] | None:
    """Show the client's ``Progress`` widget now if in a notebook; returns what ends
    its updates once the computation is done (None elsewhere: the bar is text)."""
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


set_notebook_display(progress_bar_widget)
