"""``context_meter`` and ``span`` imported at the top of a script work in tasks run
by worker processes: a function defined in ``__main__`` is pickled by value with
what it refers to, and the meter must travel as a reference to the process-wide one
(its ContextVars cannot be pickled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import pytest

from kernel_cluster import context_meter, span
from kernel_cluster.core.metrics import ContextMeter

ROOT = Path(__file__).resolve().parents[2]

# README's "Where did the time go?" example, as a user's script, plus the decorator form
SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    import time

    from kernel_cluster import Client, KernelCluster, context_meter, span


    def load(i):
        with context_meter.meter("I/O"):  # label part of a task's time yourself
            time.sleep(0.02)
        context_meter.digest_metric("rows", 100, "count")
        return list(range(1000))


    @context_meter.meter("crunching")
    def crunch(xs):
        return sum(x * x for x in xs)


    def in_a_span(x):
        with span("inside"):  # captured at the top of the script, used in the task
            return x


    if __name__ == "__main__":
        processes = sys.argv[1] == "processes"
        with KernelCluster(n_workers=2, threads_per_worker=1, processes=processes) as cluster:
            with Client(cluster) as client:
                with span("my workflow"):
                    with span("data load"):
                        data = client.map(load, range(4))
                    with span("compute"):
                        results = client.gather(client.map(crunch, data))
                assert client.submit(in_a_span, 3).result() == 3
                frame = client.fine_metrics(unit=None)
                rows = frame[frame.context == "execute"]
                out = {
                    "results": results,
                    "activities": sorted(set(rows.activity)),
                    "io": float(rows[rows.activity == "I/O"].value.sum()),
                    "crunching": float(rows[rows.activity == "crunching"].value.sum()),
                    "rows": float(rows[rows.activity == "rows"].value.sum()),
                    "spans": sorted({" / ".join(s.name) for s in client.spans()}),
                }
        print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.parametrize("mode", ["embedded", "processes"])
def test_a_scripts_main_functions_use_context_meter_and_span(tmp_path, mode):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(script), mode],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    assert out["results"] == [sum(x * x for x in range(1000))] * 4
    assert {"I/O", "crunching", "rows"} <= set(out["activities"])
    assert out["io"] >= 4 * 0.02 * 0.9
    assert out["crunching"] > 0
    assert out["rows"] == 400
    assert {"my workflow / data load", "my workflow / compute"} <= set(out["spans"])


def test_context_meter_pickles_as_the_process_wide_one():
    assert cloudpickle.loads(cloudpickle.dumps(context_meter)) is context_meter
    meter = context_meter.meter("x")
    assert cloudpickle.loads(cloudpickle.dumps(meter)).label == "x"
    assert cloudpickle.loads(cloudpickle.dumps(span)) is span


def test_a_private_context_meter_says_why_it_cannot_be_pickled():
    mine = ContextMeter(wall=lambda: 0.0, cpu=lambda: 0.0)
    with pytest.raises(TypeError, match=r"kernel_cluster\.context_meter"):
        cloudpickle.dumps(mine)


def test_a_client_captured_by_a_task_says_what_to_do_instead(client, processes):
    def uses_client(x):
        return client.submit(abs, x)

    if not processes:
        return  # nothing is pickled
    from kernel_cluster.engine.comm import SerializationError

    with pytest.raises(SerializationError, match="cannot be pickled: a task in a worker process"):
        client.submit(uses_client, 1)
    assert client.submit(abs, -1).result(timeout=10) == 1
