"""examples/dashboard.ipynb runs top to bottom in a real kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

pytest.importorskip("anywidget")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "dashboard.ipynb"


@pytest.mark.timeout(180)
def test_dashboard_notebook_runs(tmp_path):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    examples = str(ROOT / "examples")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), examples]))
    # run where the notebook would write its report, without touching examples/
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        errors, outputs, printed = [], [], []

        def hook(msg):
            if msg["msg_type"] == "error":
                errors.append("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] in ("execute_result", "display_data"):
                outputs.append(msg["content"]["data"])
            elif msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])

        # the kernel must run the code under test: this checkout's package
        assert _run(kc, "import kernel_cluster; print(kernel_cluster.__file__)", hook) == "ok"
        package = Path("".join(printed).strip()).resolve()
        assert package == ROOT / "kernel_cluster" / "__init__.py", package
        for source in code:
            assert _run(kc, source, hook) == "ok", errors
        widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o]
        assert len(widgets) >= 4  # dashboard, tree, fine metrics, progress
        report = (tmp_path / "sensors-report.html").read_text()
        assert "kc-report-data" in report
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run(kc, source: str, hook) -> str:
    reply = kc.execute_interactive(source, output_hook=hook, timeout=120)
    return reply["content"]["status"]
