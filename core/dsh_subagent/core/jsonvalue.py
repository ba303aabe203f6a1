"""Lossless-JSON validation for values that cross a persistence or model boundary.

Theory of operation
-------------------
1. A value is *lossless JSON* when ``json.dumps`` → ``json.loads`` returns an equal value
   of the same shape: ``None``, ``bool``, ``int``, finite ``float``, ``str`` without lone
   surrogates, lists/tuples of such, and mappings with ``str`` keys of such.
2. Validation is pure and total: it returns nothing on success and raises
   ``SubagentError(INVALID_ARGUMENT)`` naming the offending path otherwise (the path is
   ``field`` plus ``[index]`` / ``.key`` segments), before any side effect.
3. ``require_int`` refuses ``bool`` where an int is required (``True`` is an ``int`` in
   Python but never a count, seq or depth).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dsh_subagent.core.errors import SubagentError, invalid


def _has_lone_surrogate(text: str) -> bool:
    # A str holds a lone surrogate exactly when it cannot be encoded as UTF-8; the codec
    # checks in C, far faster than a per-character scan on long texts. ASCII (the common
    # case: event types, ids, keys) is answered without building the encoded copy.
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_json(value: object, field: str) -> None:
    """Raise ``INVALID_ARGUMENT`` naming the path unless ``value`` is lossless JSON.

    Iterative (explicit stack), so deep values never hit the recursion limit.
    """
    stack: list[tuple[object, str]] = [(value, field)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise invalid(path, f"{item!r} is not representable in JSON")
            continue
        if isinstance(item, str):
            if _has_lone_surrogate(item):
                raise invalid(path, "string contains a lone surrogate")
            continue
        if isinstance(item, Mapping):
            for key, sub in item.items():
                if not isinstance(key, str):
                    raise invalid(path, f"object key {key!r} is not a string")
                if _has_lone_surrogate(key):
                    raise invalid(path, "object key contains a lone surrogate")
                stack.append((sub, f"{path}.{key}"))
            continue
        if isinstance(item, Sequence) and not isinstance(item, bytes | bytearray):
            stack.extend((sub, f"{path}[{i}]") for i, sub in enumerate(item))
            continue
        raise invalid(path, f"{type(item).__name__} is not a JSON value")


def require_int(value: object, field: str, *, minimum: int | None = None) -> int:
    """Return ``value`` as an int, refusing bools, non-ints and values below ``minimum``.

    post: minimum is None or __return__ >= minimum
    raises: SubagentError
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"expected an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise invalid(field, f"must be >= {minimum}, got {value}")
    return value


def require_str(value: object, field: str, *, non_empty: bool = False) -> str:
    """Return ``value`` as a str, refusing other types and (optionally) the empty string.

    raises: SubagentError
    """
    if not isinstance(value, str):
        raise invalid(field, f"expected a string, got {type(value).__name__}")
    if non_empty and not value.strip():
        raise invalid(field, "must not be empty")
    if _has_lone_surrogate(value):
        raise invalid(field, "string contains a lone surrogate")
    return value


__all__ = ["SubagentError", "check_json", "require_int", "require_str"]
