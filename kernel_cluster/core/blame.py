"""Which tasks a worker's death is blamed on.

A worker process writes the key of each task its threads are running into slots
(engine/slots.py); after it dies, the scheduler learns the texts found there.
Tasks that merely waited on the worker are run again without blame.

A task found running becomes a suspect: from then on it runs alone (the worker
starts nothing beside it), so that a death while it runs is its own. A death with
one task running counts toward that task's ``allowed_failures``; a death with
several running is ambiguous (one of them, or their memory together) and counts
for none of them, but a suspect running alone cannot be in such a death again. So
every task is charged at most one death it may not have caused, and a task that
kills every worker it runs on still ends in KilledWorker, after at most
``allowed_failures + 2`` deaths.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SLOT_SIZE = 256  # bytes per task thread: a 2-byte length, then the key's text


def key_text(key: Any) -> bytes:
    """The bytes a task thread writes for ``key``; matched by prefix, as long keys are cut."""
    return (key if type(key) is str else repr(key)).encode(errors="backslashreplace")


def running_tasks(processing: Iterable[Any], texts: Iterable[bytes]) -> set[Any]:
    """The tasks of ``processing`` (anything with a ``key``) whose key is in ``texts``.

    A text cut to the slot's size matches every key that begins with it: a cut key
    may blame one task too many, never one too few.
    """
    limit = SLOT_SIZE - 2
    texts = set(texts)
    if not texts:
        return set()
    return {ts for ts in processing if key_text(ts.key)[:limit] in texts}
