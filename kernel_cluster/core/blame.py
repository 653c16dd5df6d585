"""Which tasks a worker's death is blamed on.

A worker process writes the key of each task its threads are running into slots
(engine/slots.py); after it dies, the scheduler learns the texts found there.
Only those tasks count the death toward their ``allowed_failures``; tasks that
merely waited on the worker are run again without blame.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SLOT_SIZE = 256  # bytes per task thread: a 2-byte length, then the key's text


def key_text(key: Any) -> bytes:
    """The bytes a task thread writes for ``key``; matched by prefix, as long keys are cut."""
    return (key if type(key) is str else repr(key)).encode(errors="backslashreplace")


def running_tasks(processing: Iterable[Any], texts: Iterable[bytes]) -> set:
    """The tasks of ``processing`` (anything with a ``key``) whose key is in ``texts``.

    A text cut to the slot's size matches every key that begins with it: a cut key
    may blame one task too many, never one too few.
    """
    limit = SLOT_SIZE - 2
    texts = set(texts)
    if not texts:
        return set()
    return {ts for ts in processing if key_text(ts.key)[:limit] in texts}
