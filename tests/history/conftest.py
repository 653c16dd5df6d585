"""The history's tests write to a file of their own (the suite keeps it off elsewhere)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_cluster.diagnostics.history import recorder as recorders
from kernel_cluster.diagnostics.history import settings as history_settings


@pytest.fixture
def history_file(tmp_path: Path) -> Iterator[Path]:
    """The run history on, in a file of this test's own; every recorder it started is
    gone afterwards."""
    path = tmp_path / "history.sqlite"
    saved = dict(history_settings._override)
    history_settings.configure(path=path)
    try:
        yield path
    finally:
        for r in recorders.active():
            r.close()
        history_settings._override.clear()
        history_settings._override.update(saved)
