"""Deterministic keys for pure function calls: the same call gets the same key.

Arguments are hashed through pickle; anything pickle cannot handle (lambdas,
local functions, open files) gets a token unique to that object for as long as
it lives, which makes such calls distinct rather than wrongly shared.
"""

from __future__ import annotations

import hashlib
import pickle
import uuid
import weakref
from typing import Any

_object_tokens: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
_function_tokens: dict[int, tuple[Any, str]] = {}


def tokenize(*args: Any, **kwargs: Any) -> str:
    h = hashlib.blake2b(digest_size=16)
    for arg in args:
        h.update(_token_bytes(arg))
    if kwargs:
        h.update(_token_bytes(sorted(kwargs.items())))
    return h.hexdigest()


def function_token(fn: Any) -> str:
    """Cached per function object: pickling a function by reference costs more than a call."""
    entry = _function_tokens.get(id(fn))
    if entry is not None and entry[0] is fn:
        return entry[1]
    if getattr(fn, "__module__", None) == "__main__":
        # a notebook cell may redefine it under the same name: tell the versions apart
        raw = _unique_token(fn)
    else:
        raw = _token_bytes(fn)
    token = hashlib.blake2b(raw, digest_size=8).hexdigest()
    if len(_function_tokens) > 10_000:
        _function_tokens.clear()
    _function_tokens[id(fn)] = (fn, token)  # holding fn keeps its id from being reused
    return token


def _token_bytes(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        pass
    # one unpicklable item should not make the whole call unique: hash item by item
    t = type(obj)
    if t is tuple or t is list:
        return b"(" + b",".join(_token_bytes(x) for x in obj) + b")"
    if t is dict:
        return b"{" + b",".join(_token_bytes(kv) for kv in obj.items()) + b"}"
    return _unique_token(obj)


def _unique_token(obj: Any) -> bytes:
    try:
        token = _object_tokens.get(obj)
        if token is None:
            token = _object_tokens[obj] = uuid.uuid4().bytes
        return token
    except TypeError:  # neither picklable nor weak-referenceable
        return uuid.uuid4().bytes


def funcname(fn: Any) -> str:
    """A readable name for keys: ``inc``, ``lambda``, the wrapped name of a partial."""
    while hasattr(fn, "func") and not hasattr(fn, "__name__"):
        fn = fn.func
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if name == "<lambda>":
        return "lambda"
    return name.strip("<>").replace("-", "_") or "task"
