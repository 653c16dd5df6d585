"""Where the run history lives and how much of it is kept.

Read from the environment when a recorder starts or the history is read, unless
``configure()`` (``kernel_cluster.history.configure``) set them in this process:

- ``KERNEL_CLUSTER_HISTORY``: the SQLite file (a directory: ``history.sqlite`` in it),
  or ``off`` to record and read nothing. Default: ``history.sqlite`` in the user's
  data directory (``platformdirs.user_data_dir("kernel-cluster")``: on Linux
  ``~/.local/share/kernel-cluster``).
- ``KERNEL_CLUSTER_HISTORY_MAX_RUNS``: runs (top-level spans) kept, the latest ones;
  default 10,000.
- ``KERNEL_CLUSTER_HISTORY_MAX_MB``: the file's size bound in megabytes (10**6 bytes);
  default 100. Past either bound the oldest runs go, with their nested spans.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

ENV_PATH = "KERNEL_CLUSTER_HISTORY"
ENV_RUNS = "KERNEL_CLUSTER_HISTORY_MAX_RUNS"
ENV_MB = "KERNEL_CLUSTER_HISTORY_MAX_MB"
FILENAME = "history.sqlite"
MAX_RUNS = 10_000
MAX_MB = 100.0
OFF = frozenset({"off", "0", "false", "no", "none"})


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """``path``: the history file, None when the history is off."""

    path: Path | None
    max_runs: int = MAX_RUNS
    max_mb: float = MAX_MB

    @property
    def max_bytes(self) -> int:
        return int(self.max_mb * 1e6)


_override: dict[str, object] = {}


def default_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("kernel-cluster", appauthor=False)) / FILENAME


def _path(value: str | os.PathLike[str] | bool | None, origin: str) -> Path | None:
    if value is None or value is True:
        return default_path()
    if value is False:
        return None
    if not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"{origin}={value!r}: give a file path, 'off' (or False) to keep no history, or "
            "None for the default file."
        )
    text = os.fspath(value)
    if text.strip().lower() in OFF:
        return None
    if not text.strip():
        return default_path()
    path = Path(text).expanduser()
    return path / FILENAME if path.is_dir() else path


def _max_runs(value: object, origin: str) -> int:
    try:
        n = int(str(value)) if not isinstance(value, int) else value
    except ValueError:
        n = -1
    if isinstance(value, bool) or n < 1:
        raise ValueError(f"{origin}={value!r}: give how many runs to keep, a whole number >= 1.")
    return n


def _max_mb(value: object, origin: str) -> float:
    try:
        mb = float(str(value)) if not isinstance(value, int | float) else float(value)
    except ValueError:
        mb = -1.0
    if isinstance(value, bool) or not math.isfinite(mb) or mb <= 0:
        raise ValueError(
            f"{origin}={value!r}: give the history file's size bound in megabytes, a number > 0."
        )
    return mb


def current() -> HistorySettings:
    """The settings now: ``configure()``'s, else the environment's, else the defaults."""
    if "path" in _override:
        path = _override["path"]
        assert path is None or isinstance(path, Path)
    else:
        path = _path(os.environ.get(ENV_PATH), ENV_PATH)
    if "max_runs" in _override:
        runs = _override["max_runs"]
        assert isinstance(runs, int)
    else:
        env = os.environ.get(ENV_RUNS)
        runs = _max_runs(env, ENV_RUNS) if env else MAX_RUNS
    if "max_mb" in _override:
        mb = _override["max_mb"]
        assert isinstance(mb, float)
    else:
        env = os.environ.get(ENV_MB)
        mb = _max_mb(env, ENV_MB) if env else MAX_MB
    return HistorySettings(path, runs, mb)


_UNSET = object()


def configure(
    path: str | os.PathLike[str] | bool | object | None = _UNSET,
    max_runs: int | object | None = _UNSET,
    max_mb: float | object | None = _UNSET,
) -> HistorySettings:
    """Set the history's file (``False`` or ``"off"``: none), ``max_runs`` and ``max_mb``
    for this process, over the environment; ``None`` goes back to the environment's
    (or the default). Checked here: a bad value raises, naming it. Recorders already
    running take the new bounds at their next write, and the new file too."""
    new = dict(_override)
    if path is not _UNSET:
        if path is None:
            new.pop("path", None)
        else:
            new["path"] = _path(path, "path")  # type: ignore[arg-type]
    if max_runs is not _UNSET:
        if max_runs is None:
            new.pop("max_runs", None)
        else:
            new["max_runs"] = _max_runs(max_runs, "max_runs")
    if max_mb is not _UNSET:
        if max_mb is None:
            new.pop("max_mb", None)
        else:
            new["max_mb"] = _max_mb(max_mb, "max_mb")
    _override.clear()
    _override.update(new)
    return current()


def with_path(settings: HistorySettings, path: Path | None) -> HistorySettings:
    return replace(settings, path=path)
