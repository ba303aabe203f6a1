"""Lossless-JSON validation for values that cross a persistence or model boundary.

Theory of operation
-------------------
1. A value is *lossless JSON* when ``json.dumps`` → ``json.loads`` returns an equal value
   of the same shape: ``None``, ``bool``, ``int``, finite ``float``, ``str`` without lone
   surrogates, lists/tuples of such, and mappings with ``str`` keys of such. A container
   that holds itself (a cycle) is not JSON; the same container reached twice is.
2. Validation is pure and total: it raises ``SubagentError(INVALID_ARGUMENT)`` naming the
   offending path otherwise (the path is ``field`` plus ``[index]`` / ``.key`` segments),
   before any side effect.
3. ``check_json`` walks with an explicit stack and keeps each path as a parent link, rendered
   only for an error, so it is linear in the size of the value at any depth and never hits
   the recursion limit. The containers on the current path are tracked, so a cycle is
   refused instead of walked forever.
4. Optional bounds (the service's ``Limits`` supply them): ``max_depth`` nested containers,
   ``safe_ints`` (integers within ±(2**53-1), the range every JSON reader keeps exactly) and
   ``max_size``: the walk stops as soon as the measured size exceeds it, so an oversize or
   widely shared value costs no more than the bound. The size is the UTF-8 bytes of every
   string and key plus one per value.
5. ``require_int`` refuses ``bool`` where an int is required (``True`` is an ``int`` in
   Python but never a count, seq or depth).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from dsh_subagent.core.errors import SubagentError, invalid

SAFE_INT: Final = 2**53 - 1
"""The largest integer magnitude every JSON reader represents exactly."""

_Path: TypeAlias = "tuple[_Path | None, str | int]"


def _has_lone_surrogate(text: str) -> bool:
    return utf8_size(text) is None


def utf8_size(text: str) -> int | None:
    """The UTF-8 length of ``text``, or ``None`` when it holds a lone surrogate.

    A str holds a lone surrogate exactly when it cannot be encoded as UTF-8; the codec
    checks in C, far faster than a per-character scan on long texts. ASCII (the common
    case: event types, ids, keys) is answered without building the encoded copy.
    """
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def _render(path: _Path) -> str:
    parts: list[str] = []
    node: _Path | None = path
    while node is not None:
        parent, segment = node
        if parent is None:
            parts.append(str(segment))
        elif isinstance(segment, int):
            parts.append(f"[{segment}]")
        else:
            parts.append(f".{segment}")
        node = parent
    return "".join(reversed(parts))


def check_json(
    value: object,
    field: str,
    *,
    max_depth: int | None = None,
    max_size: int | None = None,
    safe_ints: bool = False,
) -> int:
    """Raise ``INVALID_ARGUMENT`` naming the path unless ``value`` is lossless JSON (rule 1).

    Returns the measured size (rule 4); with ``max_size``, a size above it as soon as the
    walk passes it (the caller names the refusal). Iterative and cycle-safe (rule 3).
    """
    size = 0
    on_path: set[int] = set()
    # An entry with a path visits ``item``; one without leaves the container ``item``.
    stack: list[tuple[object, _Path | None, int]] = [(value, (None, field), 0)]
    while stack:
        item, path, depth = stack.pop()
        if path is None:
            on_path.discard(id(item))
            continue
        size += 1
        if item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if safe_ints and not -SAFE_INT <= item <= SAFE_INT:
                raise invalid(_render(path), "integer is outside the JSON-safe range ±(2**53-1)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise invalid(_render(path), f"{item!r} is not representable in JSON")
        elif isinstance(item, str):
            measured = utf8_size(item)
            if measured is None:
                raise invalid(_render(path), "string contains a lone surrogate")
            size += measured
        elif isinstance(item, Mapping | Sequence) and not isinstance(item, bytes | bytearray):
            if id(item) in on_path:
                raise invalid(_render(path), "the value contains itself (a cycle)")
            if max_depth is not None and depth >= max_depth:
                raise invalid(_render(path), f"nests deeper than {max_depth} levels")
            on_path.add(id(item))
            stack.append((item, None, depth))
            if isinstance(item, Mapping):
                for key, sub in item.items():
                    if not isinstance(key, str):
                        raise invalid(_render(path), f"object key {key!r} is not a string")
                    measured = utf8_size(key)
                    if measured is None:
                        raise invalid(_render(path), "object key contains a lone surrogate")
                    size += measured
                    stack.append((sub, (path, key), depth + 1))
            else:
                stack.extend((sub, (path, i), depth + 1) for i, sub in enumerate(item))
        else:
            raise invalid(_render(path), f"{type(item).__name__} is not a JSON value")
        if max_size is not None and size > max_size:
            return size
    return size


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


__all__ = ["SAFE_INT", "SubagentError", "check_json", "require_int", "require_str", "utf8_size"]
