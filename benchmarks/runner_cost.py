"""The task runner's own cost per trivial task, by path: deterministic counts.

    .venv/bin/python benchmarks/runner_cost.py bytecodes
    .venv/bin/python benchmarks/runner_cost.py instructions [stream handed ...]

``TaskRunner.run`` alone, called on this thread (no engine, no pool), on ``inc(1)``
in the shapes that take its different paths:

  stream     inputs in hand, the same group as the task before (the inline shortcut)
  handed     handed to the pool after the thread was free (idle, then executor)
  newgroup   groups alternating (``ThreadAccount.totals_for``)
  pickled    the spec as bytes, as from another process
  long       inputs through a callable, as from a spill buffer (the full path)
  fails      the task raises (``TaskTiming`` and ``ThreadAccount.add``)
  unmetered  ``run_task_unmetered``, for reference

``bytecodes`` counts the bytecodes executed below the harness (``sys.settrace``
opcode events) with scripted clocks (C-level counters, so no clock adds a frame):
the same decisions every run. ``instructions`` runs each shape 2,000 and 6,000
times under ``valgrind --tool=callgrind`` with the real clocks, the time thresholds
stretched as ``instructions.py`` does, and prints the difference per task.
To compare with another checkout, put its root first on PYTHONPATH; code from
before ``Clocks`` existed gets the scripted clocks through its module globals.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable

SHAPES = ["stream", "handed", "newgroup", "pickled", "long", "fails", "unmetered"]
VALGRIND_SLOWDOWN = 50


def inc(x: int) -> int:
    return x + 1


def fails(x: int) -> int:
    raise ValueError(x)


def setup(scripted: bool) -> Callable[[str, int], None]:
    """A runner on this thread, and a function running one task of a shape."""
    import cloudpickle

    from kernel_cluster.core.spec import Call, TaskSpec
    from kernel_cluster.core.thread_accounts import ThreadTimeline
    from kernel_cluster.engine import execute

    wall = itertools.count(1.0, 2.0**-20).__next__ if scripted else time.perf_counter
    timeline = ThreadTimeline(busy=True)
    timeline.add_threads([threading.get_ident()], wall())
    account = timeline.accounts[threading.get_ident()]
    if not scripted:
        execute._SHORT_TASK *= VALGRIND_SLOWDOWN
        execute._STALE_READING *= VALGRIND_SLOWDOWN
        runner = execute.TaskRunner(account)
    else:
        cpu = itertools.count(0.0, 2.0**-20).__next__
        if hasattr(execute, "Clocks"):
            runner = execute.TaskRunner(account, execute.Clocks(wall=wall, thread_cpu=cpu))
        else:  # a checkout from before injected clocks
            execute._wall, execute._cpu = wall, cpu
            runner = execute.TaskRunner(account)
    spec = TaskSpec(Call(inc, (1,)), frozenset())
    bad = TaskSpec(Call(fails, (1,)), frozenset())
    pickled = cloudpickle.dumps(spec)
    data: dict = {}
    loader = data.copy  # inputs through a callable
    groups = [(None, "a"), (None, "b")]
    g = (None, "inc")
    run = runner.run

    def one(shape: str, i: int) -> None:
        if shape == "stream":
            run("k", spec, data, 0.0, g)
        elif shape == "handed":
            run("k", spec, data, wall(), g)
        elif shape == "newgroup":
            run("k", spec, data, 0.0, groups[i & 1])
        elif shape == "pickled":
            run("k", pickled, data, 0.0, g)
        elif shape == "long":
            run("k", spec, loader, 0.0, g)
        elif shape == "fails":
            run("k", bad, data, 0.0, g)
        else:
            execute.run_task_unmetered("k", spec, data)

    return one


def bytecodes(shape: str, n: int = 2000) -> float:
    one = setup(scripted=True)
    for i in range(200):  # let the interpreter specialise
        one(shape, i)
    harness = one.__code__
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
        return local

    def trace(frame, event, arg):
        if frame.f_code is harness:
            return None
        frame.f_trace_opcodes = True
        return local

    sys.settrace(trace)
    for i in range(n):
        one(shape, i)
    sys.settrace(None)
    return count / n


def instructions(shape: str, n: int = 2000) -> float:
    def collected(k: int) -> int:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        cmd += [__file__, "--child", shape, str(k)]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    return (collected(3 * n) - collected(n)) / (2 * n)


def main() -> None:
    if sys.argv[1] == "--child":
        one = setup(scripted=False)
        for i in range(200 + int(sys.argv[3])):
            one(sys.argv[2], i)
    elif sys.argv[1] == "bytecodes":
        for shape in sys.argv[2:] or SHAPES:
            print(f"{shape:10s} {bytecodes(shape):8.1f} bytecodes per task")
    elif sys.argv[1] == "instructions":
        for shape in sys.argv[2:] or SHAPES:
            print(f"{shape:10s} {instructions(shape):10,.0f} instructions per task", flush=True)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
