"""One version everywhere: the Python package and the front-end packages it ships."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import kernel_cluster

ROOT = Path(__file__).resolve().parent.parent


def test_python_and_front_end_versions_agree():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    front_end = {
        str(path.relative_to(ROOT)): json.loads(path.read_text())["version"]
        for path in [ROOT / "package.json", *sorted(ROOT.glob("*/package.json"))]
        if "node_modules" not in path.parts
    }
    assert kernel_cluster.__version__ == pyproject
    assert front_end and set(front_end.values()) == {pyproject}, front_end
