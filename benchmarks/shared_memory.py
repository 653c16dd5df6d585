"""Large values between worker processes, and gathered by the client: next to distributed.

Both sides: two worker processes with one thread each on this machine,
``KernelCluster(n_workers=2, threads_per_worker=1, processes=True)`` and
``LocalCluster(n_workers=2, threads_per_worker=1)``. Rounds alternate the sides
(``interleave.rounds``), each run timing only the transfer:

  move      16 arrays of 32 MB (random float64: lz4 leaves them as they are) made on
            worker A, then 16 tasks on worker B that read them (their size back):
            MB/s = 512 MB / seconds from the submission of those 16 until their results
  gather    one array of 1 GB made on worker A, then ``client.gather`` of it in the
            kernel: MB/s = 1,000 MB / seconds of the gather; ``gather+read`` also
            reads one float per page of the result (pages of a mapping are faulted in
            as they are first read)

Also per CPU second: MB moved per second of CPU that this process and the worker
processes used meanwhile (user and system), a measure that other work on a shared
machine disturbs far less than wall time.

    .venv/bin/python benchmarks/shared_memory.py [--rounds N] [--label after] [--socket-too]

``--socket-too`` adds a third side, interleaved with the others: the same checkout with
``shared_memory_limit=0`` (every value over the socket, as before shared memory).

The kernel-cluster checkout measured is the one first on ``sys.path``: put another
checkout first on ``PYTHONPATH`` to measure it (``--label before``). Results go to
``results/shared_memory_<label>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent))
from interleave import rounds

RESULTS = Path(__file__).resolve().parent / "results"
N_VALUES = 16
VALUE_BYTES = 32_000_000
GATHER_BYTES = 1_000_000_000


def nbytes_of(x: Any) -> int:
    return int(x.nbytes)


def ready(*values: Any) -> None:
    """Run where the values are: they are all made, and none moved."""


def make(n: int, seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed).random(n)


class Side:
    label = ""
    client: Any

    def __init__(self) -> None:
        self.cpu: dict[str, list[float]] = {"move": [], "gather": []}

    def addresses(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    def processes(self) -> list[Any]:
        """This process (client, scheduler) and the worker processes."""
        import psutil

        pids = self.client.run(os.getpid)
        return [psutil.Process(), *(psutil.Process(p) for p in pids.values())]

    @staticmethod
    def cpu_seconds(processes: list[Any]) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in processes)

    def move(self) -> float:
        a, b = self.addresses()
        xs = [
            self.client.submit(make, VALUE_BYTES // 8, i, workers=[a], pure=False)
            for i in range(N_VALUES)
        ]
        self.client.submit(ready, *xs, workers=[a], pure=False).result()
        processes = self.processes()
        cpu = self.cpu_seconds(processes)
        t = time.perf_counter()
        sizes = self.client.gather(
            [self.client.submit(nbytes_of, x, workers=[b], pure=False) for x in xs]
        )
        dt = time.perf_counter() - t
        self.cpu["move"].append(self.cpu_seconds(processes) - cpu)
        assert sizes == [VALUE_BYTES] * N_VALUES
        del xs
        return dt

    def gather(self) -> tuple[float, float]:
        a, _ = self.addresses()
        x = self.client.submit(make, GATHER_BYTES // 8, 0, workers=[a], pure=False)
        self.client.submit(ready, x, workers=[a], pure=False).result()
        processes = self.processes()
        cpu = self.cpu_seconds(processes)
        t = time.perf_counter()
        value = self.client.gather(x)
        dt = time.perf_counter() - t
        value[::512].sum()  # one float per 4 KiB page
        dt_read = time.perf_counter() - t
        self.cpu["gather"].append(self.cpu_seconds(processes) - cpu)
        assert value.nbytes == GATHER_BYTES
        del value, x
        return dt, dt_read


class Ours(Side):
    label = "kernel-cluster"

    def __init__(self, **settings: Any) -> None:
        """``settings``: the workers' (``shared_memory_limit=0``: the socket)."""
        super().__init__()
        from kernel_cluster import Client, KernelCluster

        self.cluster = KernelCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit=0, **settings
        )
        self.client = Client(self.cluster, set_as_default=False)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


class Dask(Side):
    label = "distributed"

    def __init__(self) -> None:
        super().__init__()
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster, set_as_default=False)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def _ratios(ours: list[float], theirs: list[float]) -> dict[str, float]:
    """Per round, ours' MB/s over theirs' (seconds the other way round)."""
    per_round = sorted(t / o for o, t in zip(ours, theirs, strict=True))
    return {"median": statistics.median(per_round), "min": per_round[0], "max": per_round[-1]}


def _mbs(seconds: list[float], nbytes: int) -> dict[str, float]:
    rates = sorted(nbytes / 1e6 / s for s in seconds)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="after")
    parser.add_argument(
        "--socket-too",
        action="store_true",
        help="a third side: kernel-cluster with shared_memory_limit=0 (the socket)",
    )
    args = parser.parse_args(argv)

    import dask
    import distributed

    import kernel_cluster

    checkout = Path(kernel_cluster.__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    load_before = os.getloadavg()
    sides: dict[str, Side] = {"kernel-cluster": Ours()}
    if args.socket_too:
        sides["kernel-cluster (socket)"] = Ours(shared_memory_limit=0)
    sides["distributed"] = Dask()
    gathers: dict[str, list[float]] = {name: [] for name in sides}

    def gather_of(name: str) -> Any:
        def run() -> float:
            dt, dt_read = sides[name].gather()
            gathers[name].append(dt_read)
            return dt

        return run

    try:
        move = rounds({name: side.move for name, side in sides.items()}, args.rounds)
        gather = rounds({name: gather_of(name) for name in sides}, args.rounds)
        gathers = {k: v[-args.rounds :] for k, v in gathers.items()}  # not the warm-up's
    finally:
        for side in sides.values():
            side.close()

    moved = N_VALUES * VALUE_BYTES
    cpu = {name: {k: v[1:] for k, v in side.cpu.items()} for name, side in sides.items()}
    measures = {
        "move_16x32MB": (move, moved),
        "gather_1GB": (gather, GATHER_BYTES),
        "gather_1GB_and_read": (gathers, GATHER_BYTES),
        "move_16x32MB_per_cpu_second": ({n: c["move"] for n, c in cpu.items()}, moved),
        "gather_1GB_per_cpu_second": ({n: c["gather"] for n, c in cpu.items()}, GATHER_BYTES),
    }
    table: dict[str, dict] = {}
    for measure, (seconds, nbytes) in measures.items():
        row: dict[str, Any] = {name: _mbs(seconds[name], nbytes) for name in sides}
        for name in sides:
            if name != "distributed":
                row[f"{name} / distributed"] = _ratios(seconds[name], seconds["distributed"])
        if args.socket_too:
            row["shared memory / socket"] = _ratios(
                seconds["kernel-cluster"], seconds["kernel-cluster (socket)"]
            )
        table[measure] = row
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "label": args.label,
        "kernel_cluster": {"checkout": str(checkout), "commit": commit},
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "note": "shared with other work: interleaved rounds, compare ratios",
        },
        "rounds": args.rounds,
        "seconds": {"move": move, "gather": gather, "gather_and_read": gathers},
        # CPU seconds of this process and the workers while the transfers ran (the
        # warm-up's left out): what a transfer costs, whatever else runs beside it
        "cpu_seconds": cpu,
        "mb_per_s": table,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"shared_memory_{args.label}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.label} ({checkout}, {commit}); load {load_before} -> {os.getloadavg()}")
    for measure, row in table.items():
        print(measure)
        for name, v in row.items():
            unit = "" if "/" in name else " MB/s"
            print(f"  {name:40} {v['median']:10,.2f}{unit} [{v['min']:,.2f} - {v['max']:,.2f}]")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
