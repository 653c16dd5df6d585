"""WorkerConfig: every setting of a worker, checked once, in one place.

A KernelCluster builds one from its keyword arguments (or takes one whole,
``worker_config=``), refuses a bad value there with a message naming the setting,
and hands it on: to each embedded ``Worker``, or as a command line
(``to_argv``) to each worker process, whose entry point reads it back
(``from_argv``) and gives it to ``serve`` and its ``Worker``. Adding a setting
is adding a field here (with its check and help); every path then carries it.

The message size limit is not a setting here: the comm layer of every process
(the kernel's scheduler and client too) reads it from the environment variable
``KERNEL_CLUSTER_MAX_MESSAGE_SIZE`` (engine/comm/frames.py), which worker
processes inherit.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

# the settings a KernelCluster fills in for each worker process it starts itself
PER_WORKER = ("name", "remove_local_directory", "cluster_directory", "owner_pid")


def _cpu_count() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """The settings of one worker (embedded, or a process of its own).

    Times are in seconds, memory in bytes. Immutable: a worker that changes a
    setting while it runs (``Worker.set_fine_metrics``, ``set_profiling``, or a
    test lowering ``memory_stuck_seconds``) changes its own attribute, not this.
    """

    nthreads: int = field(default_factory=_cpu_count, metadata={"help": "task threads"})
    memory_limit: int = field(
        default=0,
        metadata={"help": "bytes, '2 GiB', a fraction of the memory, or 'auto' (all); 0: none"},
    )
    name: str = field(default="", metadata={"help": "the worker's name (default: its address)"})
    heartbeat_interval: float = field(
        default=0.5, metadata={"help": "seconds between heartbeats to the scheduler"}
    )
    fine_metrics: bool = field(default=True, metadata={"help": "collect fine performance metrics"})
    # values past target go to disk as they are stored; past spill the monitor moves
    # more there; past pause the worker starts no new task until memory falls
    memory_target_fraction: float = field(
        default=0.6, metadata={"help": "fraction of the memory limit kept for results in memory"}
    )
    memory_spill_fraction: float = field(
        default=0.7, metadata={"help": "fraction of the memory limit past which results spill"}
    )
    memory_pause_fraction: float = field(
        default=0.8, metadata={"help": "fraction of the memory limit past which tasks wait"}
    )
    memory_monitor_interval: float = field(
        default=0.1, metadata={"help": "seconds between memory checks"}
    )
    memory_stuck_seconds: float = field(
        default=10.0,
        metadata={"help": "seconds paused, with nothing to spill or run, before giving up"},
    )
    # a worker process past it is ended by its nanny (the task running there is blamed)
    memory_terminate_fraction: float = field(
        default=0.95,
        metadata={
            "help": "fraction of the memory limit past which a worker process is restarted "
            "(0: never)"
        },
    )
    serialize_timeout: float = field(
        default=120.0,
        metadata={"help": "seconds one value may take to pickle or unpickle before its task fails"},
    )
    loop_stuck_seconds: float = field(
        default=300.0,
        metadata={
            "help": "seconds a worker process's event loop may stay blocked before it is "
            "replaced (its heartbeats wait meanwhile; a pulse of its own says it is alive)"
        },
    )
    profile: bool = field(default=True, metadata={"help": "run the statistical profiler"})
    profile_interval: float = field(default=0.01, metadata={"help": "seconds between samples"})
    profile_cycle_interval: float = field(
        default=1.0, metadata={"help": "seconds of samples per entry of the profile's history"}
    )
    transfer_log_length: int = field(
        default=10_000, metadata={"help": "transfers in and out kept for the reports"}
    )
    # large values go to readers on this machine through /dev/shm (shared_memory.py)
    shared_memory_limit: int | None = field(
        default=None,
        metadata={
            "help": "bytes of shared memory a worker process's outgoing transfers may hold "
            "at once (default: what /dev/shm has free; 0: none, all over the socket)"
        },
    )
    local_directory: str | None = field(
        default=None,
        metadata={
            "help": "where spilled data and the worker's files go (a worker process "
            "started by hand makes a temporary one)"
        },
    )
    # a worker process and its nanny (kernel_cluster/engine/cli.py)
    remove_local_directory: bool = field(
        default=False,
        metadata={"help": "remove the local directory on exit (always done for one made here)"},
    )
    cluster_directory: str | None = field(
        default=None,
        metadata={
            "help": "the owner's directory (token, owner file): removed, once empty of "
            "workers' directories, by a worker that outlives its owner"
        },
    )
    owner_pid: int | None = field(
        default=None,
        metadata={
            "help": "the process that started this worker (its parent, a kernel): when "
            "it dies, the worker exits and cleans up after it (see --cluster-directory)"
        },
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting and what it accepts.

        Whole numbers given as floats (``nthreads=2.0``) are refused, not rounded;
        numbers of seconds are stored as floats so that equal configs compare equal.
        """
        _whole("nthreads", self.nthreads, 1)
        _whole("memory_limit", self.memory_limit, 0, what="a byte count")
        _whole("transfer_log_length", self.transfer_log_length, 0)
        if self.shared_memory_limit is not None:
            _whole(
                "shared_memory_limit",
                self.shared_memory_limit,
                0,
                what="a byte count",
                optional=True,
            )
        if self.owner_pid is not None:
            _whole("owner_pid", self.owner_pid, 1, what="a process id", optional=True)
        for name in ("fine_metrics", "profile", "remove_local_directory"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        _text("name", self.name, optional=False)
        _text("local_directory", self.local_directory, optional=True)
        if self.local_directory == "":
            raise ValueError(
                "local_directory must be a directory's path, got '' (None: the system's "
                "temporary directory)."
            )
        _text("cluster_directory", self.cluster_directory, optional=True)
        for name in (
            "heartbeat_interval",
            "memory_monitor_interval",
            "memory_stuck_seconds",
            "serialize_timeout",
            "loop_stuck_seconds",
            "profile_interval",
            "profile_cycle_interval",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value < math.inf
            ):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
            object.__setattr__(self, name, float(value))
        fractions = (
            self.memory_target_fraction,
            self.memory_spill_fraction,
            self.memory_pause_fraction,
        )
        if (
            any(isinstance(f, bool) or not isinstance(f, int | float) for f in fractions)
            or not all(0 < f <= 1 for f in fractions)
            or sorted(fractions) != list(fractions)
        ):
            raise ValueError(
                "memory fractions must satisfy 0 < target <= spill <= pause <= 1, got "
                f"memory_target_fraction={self.memory_target_fraction!r}, "
                f"memory_spill_fraction={self.memory_spill_fraction!r}, "
                f"memory_pause_fraction={self.memory_pause_fraction!r}."
            )
        for name, value in zip(
            ("memory_target_fraction", "memory_spill_fraction", "memory_pause_fraction"),
            fractions,
            strict=True,
        ):
            object.__setattr__(self, name, float(value))
        terminate = self.memory_terminate_fraction
        if (
            isinstance(terminate, bool)
            or not isinstance(terminate, int | float)
            or not 0 <= terminate <= 1
        ):
            raise ValueError(
                "memory_terminate_fraction must be a number > 0 and <= 1, or 0 (never), got "
                f"{terminate!r}."
            )
        object.__setattr__(self, "memory_terminate_fraction", float(terminate))

    def replace(self, **changes: Any) -> WorkerConfig:
        """A copy with ``changes`` (checked like any other)."""
        try:
            return dataclasses.replace(self, **changes)
        except TypeError:
            unknown = sorted(set(changes) - set(SETTINGS))
            if not unknown:
                raise
            raise TypeError(
                f"unknown worker setting(s) {', '.join(unknown)}; the settings are: "
                f"{', '.join(SETTINGS)}."
            ) from None

    # -- the command line of a worker process -----------------------------------------

    def to_argv(self) -> list[str]:
        """Options that ``from_argv`` reads back into an equal config.

        ``--option=value`` always, so that a value starting with ``-`` stays a value.
        """
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            flag = _flag(f.name)
            if isinstance(value, bool):
                if value != f.default:  # a switch away from its default
                    argv.append(flag if value else _no_flag(f.name))
            elif value is None:
                continue
            elif isinstance(value, float):
                argv.append(f"{flag}={value!r}")  # repr: the same float back
            else:
                argv.append(f"{flag}={value}")
        return argv

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> WorkerConfig:
        """The config that ``argv`` (as made by ``to_argv``) describes."""
        parser = argparse.ArgumentParser(prog="WorkerConfig.from_argv", add_help=False)
        cls.add_arguments(parser)
        return cls.from_namespace(parser.parse_args(list(argv)))

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add an option for each setting to ``parser`` (the worker CLI adds its own)."""
        for f in dataclasses.fields(cls):
            help_text = f.metadata.get("help")
            if f.type in ("bool",):
                if f.default is True:
                    parser.add_argument(
                        _no_flag(f.name),
                        dest=f.name,
                        action="store_false",
                        help=f"do not {help_text}",
                    )
                else:
                    parser.add_argument(
                        _flag(f.name), dest=f.name, action="store_true", help=help_text
                    )
                continue
            kind = _ARG_TYPES[str(f.type)]
            if f.name == "memory_limit":
                # started by hand, a worker takes the machine's memory as its limit
                parser.add_argument("--memory-limit", default="auto", help=help_text)
            else:
                default = f.default_factory() if callable(f.default_factory) else f.default
                parser.add_argument(_flag(f.name), type=kind, default=default, help=help_text)
        parser.add_argument(
            "--memory-fractions",
            help="target,spill,pause fractions at once (overrides the three options)",
        )
        return parser

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> WorkerConfig:
        """The config in parsed arguments (ValueError naming a bad setting)."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        values["memory_limit"] = parse_memory_limit(_maybe_int(values["memory_limit"]), 1)
        if getattr(args, "memory_fractions", None):
            parts = args.memory_fractions.split(",")
            if len(parts) != 3:
                raise ValueError(
                    f"--memory-fractions takes target,spill,pause, got {args.memory_fractions!r}."
                )
            for name, part in zip(
                ("memory_target_fraction", "memory_spill_fraction", "memory_pause_fraction"),
                parts,
                strict=True,
            ):
                try:
                    values[name] = float(part)
                except ValueError:
                    raise ValueError(
                        f"--memory-fractions takes three numbers, got {args.memory_fractions!r}."
                    ) from None
        return cls(**values)


SETTINGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(WorkerConfig))

_ARG_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "str | None": str,
    "int | None": int,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _no_flag(name: str) -> str:
    return "--no-" + name.replace("_", "-")


def _maybe_int(text: Any) -> Any:
    return int(text) if isinstance(text, str) and text.isdigit() else text


def _whole(
    name: str, value: Any, least: int, what: str = "a whole number", optional: bool = False
) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        none = " or None" if optional else ""
        raise ValueError(f"{name} must be {what} >= {least}{none}, got {value!r}.")


def _text(name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or "\0" in value:
        none = " or None" if optional else ""
        raise ValueError(f"{name} must be a string without NUL characters{none}, got {value!r}.")


# -- the cluster's own settings ------------------------------------------------------------

# a worker process uses about this much to start: a limit below restarts it for ever
MIN_PROCESS_MEMORY = 32 * 2**20


def check_cluster_settings(
    *,
    n_workers: Any,
    processes: Any,
    worker_saturation: Any,
    queue_seconds: Any,
    allowed_failures: Any,
    death_timeout: Any,
    worker_start_timeout: Any,
    task_stream_length: Any,
    cancelled_task_timeout: Any,
    no_workers_timeout: Any,
) -> dict[str, Any]:
    """KernelCluster's settings that are not the workers': ValueError naming the first
    bad one, its value and what it accepts; otherwise the values, numbers of seconds
    as floats. Called before anything starts."""
    _whole("n_workers", n_workers, 0)
    if not isinstance(processes, bool):
        raise ValueError(
            f"processes must be True or False, got {processes!r} (True: worker processes; "
            "False: threads in this process)."
        )
    if not _number(worker_saturation) or not worker_saturation > 0:
        raise ValueError(
            "worker_saturation must be a number > 0 (tasks sent to a worker per thread "
            f"before the rest wait on the scheduler; inf: no limit), got {worker_saturation!r}."
        )
    _whole("allowed_failures", allowed_failures, 0)  # worker deaths a task may survive
    _whole("task_stream_length", task_stream_length, 0)  # records kept
    out = {
        "n_workers": n_workers,
        "processes": processes,
        "worker_saturation": float(worker_saturation),
        "allowed_failures": allowed_failures,
        "task_stream_length": task_stream_length,
    }
    if not _number(queue_seconds) or not 0 <= queue_seconds < math.inf:
        raise ValueError(f"queue_seconds must be a number of seconds >= 0, got {queue_seconds!r}.")
    out["queue_seconds"] = float(queue_seconds)
    for name, value in (
        ("death_timeout", death_timeout),
        ("worker_start_timeout", worker_start_timeout),
    ):
        if not _number(value) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
        out[name] = float(value)
    if cancelled_task_timeout is not None:
        if not _number(cancelled_task_timeout) or not 0 < cancelled_task_timeout < math.inf:
            raise ValueError(
                "cancelled_task_timeout must be a positive number of seconds or None, got "
                f"{cancelled_task_timeout!r}."
            )
        if not processes:
            raise ValueError(
                f"cancelled_task_timeout={cancelled_task_timeout!r} needs worker processes "
                "(processes=True): a thread running a cancelled task cannot be stopped, only "
                "a process restarted."
            )
        cancelled_task_timeout = float(cancelled_task_timeout)
    out["cancelled_task_timeout"] = cancelled_task_timeout
    if no_workers_timeout is not None:
        if not _number(no_workers_timeout) or not 0 < no_workers_timeout < math.inf:
            raise ValueError(
                "no_workers_timeout must be a positive number of seconds or None (wait for "
                f"ever), got {no_workers_timeout!r}."
            )
        no_workers_timeout = float(no_workers_timeout)
    out["no_workers_timeout"] = no_workers_timeout
    return out


def check_process_memory(memory_limit: Any, limit: int) -> None:
    """A worker process cannot live under ``MIN_PROCESS_MEMORY``: refuse a limit below
    (``memory_limit=4`` is 4 bytes, surely not what was meant)."""
    if 0 < limit < MIN_PROCESS_MEMORY:
        raise ValueError(
            f"memory_limit={memory_limit!r} is {limit} bytes per worker; a worker process "
            "needs at least 32 MiB (below what it uses to start it would be restarted over "
            "and over). Give a size with its unit, e.g. '4 GiB', or 0 for no limit."
        )


def make_local_directory(path: str) -> None:
    """Make ``local_directory`` (and its parents) if need be; ValueError naming it."""
    if os.path.isfile(path):
        raise ValueError(f"local_directory={path!r} is a file, not a directory.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"local_directory={path!r} cannot be made: {exc.strerror or exc}; give a "
            "directory you can write to, or None for the system's temporary directory."
        ) from None


def _number(value: Any) -> bool:
    """A real number (not a bool, not NaN)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value == value


# -- memory sizes -----------------------------------------------------------------------


def parse_memory_limit(memory_limit: int | float | str | None, n_workers: int) -> int:
    """Bytes per worker; ``"auto"`` shares the machine's memory between the workers."""
    total = psutil.virtual_memory().total
    if isinstance(memory_limit, bool) or (
        isinstance(memory_limit, float) and not math.isfinite(memory_limit)
    ):
        raise ValueError(
            f"memory_limit={memory_limit!r} is not understood: use 'auto', a byte count, "
            "a string such as '2 GiB', a fraction of the machine's memory between 0 and 1, "
            "or 0 for no limit."
        )
    if memory_limit is None or memory_limit == 0:
        return 0
    if memory_limit == "auto":
        return total // max(n_workers, 1)
    if isinstance(memory_limit, str):
        try:
            return parse_bytes(memory_limit)
        except ValueError as exc:
            raise ValueError(f"memory_limit: {exc}") from None
    if isinstance(memory_limit, float) and 0 < memory_limit <= 1:
        return int(total * memory_limit)
    if isinstance(memory_limit, int | float) and memory_limit > 0:
        return int(memory_limit)
    raise ValueError(
        f"memory_limit={memory_limit!r} is not understood: use 'auto', a byte count, a string "
        "such as '2 GiB', or a fraction of the machine's memory between 0 and 1."
    )


_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    s = text.strip().lower().replace(" ", "")
    number = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(number) :] or "b"
    if unit not in _UNITS or not number:
        raise ValueError(f"Cannot read {text!r} as a size; write e.g. '512 MiB' or '2GB'.")
    return int(float(number) * _UNITS[unit])
