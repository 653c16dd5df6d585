"""Task keys and the readable names derived from them.

A key is a ``str`` or a tuple whose first element is a ``str`` (``("x-abc", 0)``).
Every instrument groups by the *prefix* of a key (``inc`` for ``inc-3f2a...``),
so the prefix rule lives here, once.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, TypeAlias

Key: TypeAlias = str | tuple[Any, ...]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_OBJECT_REPR = re.compile(r"^<(?:[\w.]*\.)?(\w+) object at 0x[0-9a-f]+>$")


def key_split(key: object) -> str:
    """The human part of a key: ``inc-<token>`` -> ``inc``; ``("x-<token>", 0)`` -> ``x``.

    Words joined by ``-`` are kept while they are alphabetic and do not look like a
    token; the first word that is a number or a hash ends the name.
    """
    if type(key) is tuple:
        # collections share their name across many keys: worth caching
        return _split_cached(key[0]) if key else "Other"
    if type(key) is str:
        return _split_str(key)
    if isinstance(key, bytes):
        return _split_str(key.decode(errors="replace"))
    if isinstance(key, str):
        return _split_str(str(key))
    return "Other"


@lru_cache(maxsize=4096)
def _split_cached(name: object) -> str:
    return key_split(name) if not isinstance(name, str) else _split_str(name)


def _split_str(key: str) -> str:
    # "name-<token>" and "name-<index>" are by far the most common keys: whatever the
    # last word is, if it is not a name part the answer is the (cached) one for the rest
    head, sep, tail = key.rpartition("-")
    if sep and head and not (tail.isalpha() and not _token_like(tail)):
        return _split_cached(head)
    return _split_words(key)


def _token_like(word: str) -> bool:
    """Whether an alphabetic word ends a name as a token would: eight letters starting
    with a-f. dask's rule too (``finalize`` in ``sum-aggregate-finalize-<token>``), so
    prefixes of dask's keys here are the ones dask's own diagnostics show."""
    return len(word) == 8 and word[0] in "abcdef"


def _split_words(key: str) -> str:
    if not key:
        return key
    if key[0] == "<":
        match = _OBJECT_REPR.match(key)
        if match:
            return match.group(1)
    words = key.split("-")
    first = words[0]
    if first and not first[0].isalpha():
        # stringified tuple keys such as "('x-1', 0)"
        first = first.split(",")[0].strip("_'()\" ")
    if len(words) == 1:
        result = first
    else:
        parts = [first]
        for word in words[1:]:
            if word.isalpha() and not _token_like(word):
                parts.append(word)
            else:
                break
        result = "-".join(parts)
    if len(result) == 32 and _HEX32.match(result):
        return "data"
    return result


def key_group(key: Key) -> str:
    """The name of a key's TaskGroup: the collection name for tuple keys, else the prefix.

    Futures made one by one (``inc-<token>``) share their prefix's group, so a map of
    10,000 tasks makes one group, not 10,000.
    """
    if type(key) is tuple:
        return str(key[0]) if key else "Other"
    return key_split(key)


def _check_text(text: str, key: object) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"Task key {key!r} holds a lone surrogate ({text[exc.start]!r} at position "
            f"{exc.start}), which is not valid Unicode text: no message, file or view "
            "could carry it. Give a key of valid text (e.g. decode bytes with "
            "errors='replace'), or bytes."
        ) from None


def validate_key(key: object) -> None:
    """Reject keys that cannot travel in messages or be compared reliably.

    NaN is not equal to itself: a key holding one could be stored but never found.
    Text with a lone surrogate (``"x-\\ud800"``) has no UTF-8 form: no message to a
    worker process, no file and no view could carry it.
    """
    if type(key) is str:
        if not key.isascii():
            _check_text(key, key)
        return
    if type(key) is float and key != key:
        raise ValueError(
            f"Task key {key!r} is NaN, which equals nothing (not even itself), so its result "
            "could never be looked up; use a str or int key."
        )
    if type(key) is tuple:
        if not key:
            raise TypeError("Task keys may not be empty tuples; use a string or ('name', index).")
        for part in key:
            if type(part) not in (str, int, float, bytes, tuple):
                raise TypeError(
                    f"Task key {key!r} contains {type(part).__name__} {part!r}; tuple keys may "
                    "only hold str, int, float, bytes or nested tuples of those."
                )
            if type(part) is str and not part.isascii():
                _check_text(part, key)
            if type(part) is float and part != part:
                raise ValueError(
                    f"Task key {key!r} holds a NaN, which equals nothing (not even itself), "
                    "so its result could never be looked up; use str or int parts."
                )
            if type(part) is tuple:
                validate_key(part)
        return
    if type(key) in (int, float, bytes):
        return
    raise TypeError(
        f"Task key {key!r} has type {type(key).__name__}; keys must be str, int, float, bytes "
        "or tuples of those."
    )
