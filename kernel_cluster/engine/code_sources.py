"""Notebook code in worker processes: its real file name and the lines of its cell.

A function defined in a notebook cell (or in ``__main__``, or in a module registered
with ``cloudpickle.register_pickle_by_value``) travels to worker processes by value:
its code object is rebuilt there. Two things the statistical profiler reads from a
frame (and a traceback too) would be lost on the way:

- the code's file name: cloudpickle 3.1 renames it ``<dynamic-code>`` (so that its
  payloads do not depend on where a function was defined). ``dumps`` pickles code
  objects with their real file name, and tells which files it met;
- the file's lines: a cell's source lives in the kernel's line cache (IPython puts
  it there), not on disk, so a worker process cannot read it. ``lines_only_here``
  reads them; the client hands them to the scheduler once per file
  (``Scheduler.add_code_sources``), which sends them to every worker, and to every
  worker that joins later, ahead of any task (``wire.CodeSources``); ``install``
  puts them in the worker's line cache, where the profiler and ``traceback`` look.

Files on disk (a script's ``__main__``, a test module) are read by the workers
themselves: they run on the same machine.
"""

from __future__ import annotations

import io
import linecache
import os
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import cloudpickle

__all__ = ["MAX_FILES", "dumps", "install", "lines_only_here"]

# how many files' lines a scheduler keeps for the workers joining later, and a worker
# keeps in its line cache (the oldest go first): a long notebook session runs many cells
MAX_FILES = 1000

# cloudpickle's own reduction of a code object: (types.CodeType, constructor arguments)
_reduce_code: Callable[[types.CodeType], tuple[Any, tuple]] = cloudpickle.Pickler.dispatch_table[
    types.CodeType
]


def _code_in_file(make: Any, args: tuple, filename: str) -> types.CodeType:
    """A code object rebuilt by cloudpickle, given back its file name."""
    code: types.CodeType = make(*args)
    return code if code.co_filename == filename else code.replace(co_filename=filename)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with code objects pickled by value keeping their file name; the
    names met go into ``files``."""

    def __init__(self, file: Any, protocol: int, files: set[str] | None) -> None:
        super().__init__(file, protocol=protocol)
        self.files = files

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            filename = obj.co_filename
            if self.files is not None:
                self.files.add(filename)
            make, args = _reduce_code(obj)
            # nested code objects (in co_consts) come through here too
            return _code_in_file, (make, args, filename)
        return super().reducer_override(obj)


def dumps(obj: Any, protocol: int = 5, files: set[str] | None = None) -> bytes:
    """``cloudpickle.dumps(obj, protocol)``, but code pickled by value keeps its file
    name; the names of those files are added to ``files`` when given."""
    with io.BytesIO() as buffer:
        _Pickler(buffer, protocol, files).dump(obj)
        return buffer.getvalue()


def lines_only_here(filename: str) -> list[str] | None:
    """The lines of ``filename`` that only this process knows: those of a notebook cell
    (in the line cache, not on disk). None for a file on disk, or with no lines known."""
    if not filename or os.path.isfile(filename):
        return None
    lines = linecache.getlines(filename)
    return list(lines) if lines else None


_installed: OrderedDict[str, None] = OrderedDict()


def install(sources: Mapping[str, Iterable[str]]) -> None:
    """Put the lines of each file in this process's line cache (a worker process's).

    An entry with no modification time is one ``linecache.checkcache`` keeps: there is
    no file to compare it with. Past ``MAX_FILES`` files the oldest are dropped."""
    for filename, lines in sources.items():
        text = [str(line) for line in lines]
        linecache.cache[filename] = (sum(map(len, text)), None, text, filename)
        _installed[filename] = None
        _installed.move_to_end(filename)
    while len(_installed) > MAX_FILES:
        old, _ = _installed.popitem(last=False)
        linecache.cache.pop(old, None)
