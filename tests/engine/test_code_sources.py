"""Code pickled by value keeps its file name, and worker processes get the lines of
files they cannot read (a notebook cell's), once each, also when they join later.

tests/test_notebook_code.py runs the same in a real kernel; here a "cell" is code
compiled under a file name that is not on disk, its lines in this process's line
cache, as IPython keeps a cell's.
"""

from __future__ import annotations

import linecache
import pickle
import time
import uuid

from kernel_cluster import Client, KernelCluster
from kernel_cluster.core.profile_tree import iter_nodes
from kernel_cluster.engine import code_sources

CELL = """\
def cell_inner(seconds):
    time.sleep(seconds)  # the cell's sleeping line

def cell_task(i):
    def nested(seconds):
        return cell_inner(seconds) or i
    return nested(0.3)
"""


def define_cell() -> tuple[str, dict]:
    """The cell's functions, as a notebook defines them (module ``__main__``, lines in
    the line cache only)."""
    filename = f"/nonexistent/ipykernel_test/{uuid.uuid4().hex}.py"
    lines = CELL.splitlines(keepends=True)
    linecache.cache[filename] = (len(CELL), None, lines, filename)
    namespace = {"__name__": "__main__", "time": time}
    exec(compile(CELL, filename, "exec"), namespace)
    return filename, namespace


def test_code_pickled_by_value_keeps_its_file_name():
    filename, ns = define_cell()
    files: set[str] = set()
    fn = pickle.loads(code_sources.dumps(ns["cell_task"], files=files))
    assert fn.__code__.co_filename == filename
    # nested code (a function's own functions) and the functions it calls too
    nested = [c for c in fn.__code__.co_consts if hasattr(c, "co_filename")]
    assert nested and all(c.co_filename == filename for c in nested)
    assert fn.__globals__["cell_inner"].__code__.co_filename == filename
    assert files == {filename}
    assert code_sources.lines_only_here(filename) == CELL.splitlines(keepends=True)
    assert code_sources.lines_only_here(__file__) is None  # the workers read it themselves


def lines_of(tree: dict) -> set[tuple[str, str, str]]:
    return {
        (n["description"]["filename"], n["description"]["name"], n["description"]["line"])
        for _, n in iter_nodes(tree)
        if n is not tree
    }


def test_worker_processes_show_a_cells_lines_also_when_they_join_later():
    filename, ns = define_cell()
    expected = {
        (filename, "cell_task", "return nested(0.3)"),
        (filename, "nested", "return cell_inner(seconds) or i"),
        (filename, "cell_inner", "time.sleep(seconds)  # the cell's sleeping line"),
    }
    with (
        KernelCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        (first,) = client.scheduler_info()["workers"]
        t0 = time.time()
        assert client.submit(ns["cell_task"], 1).result() == 1
        assert lines_of(client.profile(start=t0, prefix="cell_task")) == expected
        assert list(cluster.scheduler.code_sources) == [filename]  # kept for newcomers

        cluster.scale(2)
        (second,) = set(client.scheduler_info()["workers"]) - {first}
        t1 = time.time()
        assert client.submit(ns["cell_task"], 2, workers=[second]).result() == 2
        tree = client.profile(start=t1, prefix="cell_task", workers=[second])
        assert lines_of(tree) == expected
