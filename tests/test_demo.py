"""The demo is the README's first command: it must run, print its table and check itself."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def test_demo_runs_and_prints_table():
    # a few seconds on an idle machine, half a minute beside busy processes: bounded, not timed
    proc = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("sensor"))
    assert header.split() == ["sensor", "rows", "mean", "C", "max", "C", "mean", "dew", "pt", "C"]
    assert "check: matches a serial recomputation" in proc.stdout


def test_demo_check_catches_a_wrong_answer():
    # The self-check is what makes exit status 0 mean something: a result with
    # one task's rows lost must fail it.
    spec = importlib.util.spec_from_file_location("kc_demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    sys.modules["kc_demo"] = demo  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(demo)
    finally:
        del sys.modules["kc_demo"]
    chunk = demo.transform_chunk(demo.parse_chunk(demo.generate_chunk(0)))
    partial = demo.aggregate_chunk(chunk)  # one chunk where the check expects all of them
    assert any("counts differ" in p for p in demo.serial_check(partial))
