"""Deeply immutable JSON values for session event data, validated as they are frozen.

Theory of operation
-------------------
1. ``FrozenDict`` and ``FrozenList`` refuse mutation and compare equal to the plain dict and
   list they copy. Anyone may build one; what is *inside* it is then not vouched for.
2. ``freeze_checked(value, field)`` validates lossless JSON (``INVALID_ARGUMENT`` naming the
   path, as ``check_json`` does) and returns a deep-frozen copy, in one pass over the common
   shapes (exact ``dict``/``list``/``tuple``/``str``/number types, ASCII keys, shallow
   nesting). Anything else takes the general path: ``check_json``, then ``freeze_json``.
3. Every container the freezer builds is *certified*: an instance of a private subclass
   (``_CheckedDict``, ``_CheckedList``) that only this module creates. A certified value was
   validated and frozen all the way down, so freezing it again returns it as it is, in O(1):
   a fork seed taken from a parent's log, a re-appended payload or a cached decoded one cost
   nothing. A hand-built ``FrozenDict`` is walked like any other mapping.
4. The empty object and the empty array are each one shared certified instance (immutable,
   so sharing is safe): an empty payload part costs no allocation per event.
5. ``freeze_json`` is iterative (an explicit stack of open containers): any depth is frozen
   without recursion. ``freeze_content`` freezes the data blocks of content the boundary
   validated (``core.limits.check_content``), so a caller's later mutation changes nothing;
   ``frozen_intent`` does so for a start's prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

import attrs

from dsh_subagent.core.jsonvalue import check_json
from dsh_subagent.core.values import Content, DataBlock, JsonValue, SubagentIntent


class FrozenList(list[JsonValue]):
    """A list that refuses mutation; equal to the plain list it copies."""

    __slots__ = ()

    def _refuse(self, *_args: object, **_kwargs: object) -> None:
        raise TypeError("session event data is immutable")

    append = extend = insert = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = _refuse  # type: ignore[assignment]
    pop = _refuse


class FrozenDict(dict[str, JsonValue]):
    """A dict that refuses mutation; equal to the plain dict it copies."""

    __slots__ = ()

    def _refuse(self, *_args: object, **_kwargs: object) -> None:
        raise TypeError("session event data is immutable")

    __setitem__ = __delitem__ = clear = update = setdefault = _refuse
    pop = popitem = __ior__ = _refuse  # type: ignore[assignment]


class _CheckedList(FrozenList):
    """A ``FrozenList`` built by this module's freezer: valid and frozen all the way down."""

    __slots__ = ()


class _CheckedDict(FrozenDict):
    """A ``FrozenDict`` built by this module's freezer: valid and frozen all the way down."""

    __slots__ = ()


EMPTY: Final[FrozenDict] = _CheckedDict()
_EMPTY_LIST: Final[FrozenList] = _CheckedList()


def _container(value: object) -> bool:
    # A container the freezer has not certified: it needs copying (rule 3).
    if type(value) is _CheckedDict or type(value) is _CheckedList:
        return False
    return isinstance(value, Mapping) or (
        isinstance(value, Sequence) and not isinstance(value, str)
    )


def _items(value: JsonValue) -> Iterator[tuple[str | int, JsonValue]]:
    if isinstance(value, Mapping):
        return iter(value.items())
    assert isinstance(value, Sequence)
    return enumerate(value)


def freeze_json(value: JsonValue) -> JsonValue:
    """A detached, deeply immutable copy of a (validated) JSON value.

    Iterative (an explicit stack of open containers), so depth never hits the recursion limit.
    """
    if not _container(value):
        return value
    # Each frame: the open container's items, its copied members, the key being descended.
    frames: list[tuple[Iterator[tuple[str | int, JsonValue]], dict[str | int, JsonValue], bool]]
    frames = [(_items(value), {}, isinstance(value, Mapping))]
    pending: list[str | int] = []
    while True:
        items, copied, is_object = frames[-1]
        for key, sub in items:
            if _container(sub):
                pending.append(key)
                frames.append((_items(sub), {}, isinstance(sub, Mapping)))
                break
            copied[key] = sub
        else:
            frames.pop()
            built: JsonValue = (
                _CheckedDict(copied) if is_object else _CheckedList(copied.values())  # type: ignore[arg-type]
            )
            if not frames:
                return built
            frames[-1][1][pending.pop()] = built


class _Unusual(Exception):
    """Raised inside the fast path for anything it does not decide itself."""


_FAST_DEPTH: Final = 64


def _fast_frozen(value: object, depth: int) -> JsonValue:
    # Exact-type dispatch over the common shapes in one pass (rule 2). Containers first: the
    # members decided inline below never come here, so a call is mostly for a container.
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        if depth > _FAST_DEPTH:
            raise _Unusual
        if not value:
            return EMPTY
        copied: dict[str, JsonValue] = {}
        for key, sub in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or not key.isascii():
                raise _Unusual
            # The commonest members are decided inline, without a call.
            if (type(sub) is str and sub.isascii()) or type(sub) is int or sub is None:
                copied[key] = sub
            else:
                copied[key] = _fast_frozen(sub, depth + 1)
        return _CheckedDict(copied)
    if kind is list or kind is tuple or kind is FrozenList:
        if depth > _FAST_DEPTH:
            raise _Unusual
        if not value:
            return _EMPTY_LIST
        members: list[JsonValue] = []  # a loop, not a comprehension: no frame of its own
        for sub in value:  # type: ignore[attr-defined]
            if (type(sub) is str and sub.isascii()) or type(sub) is int or sub is None:
                members.append(sub)
            else:
                members.append(_fast_frozen(sub, depth + 1))
        return _CheckedList(members)
    if kind is str:
        if not value.isascii():  # type: ignore[attr-defined]
            value.encode("utf-8")  # type: ignore[attr-defined]  # a lone surrogate raises
        return value  # type: ignore[return-value]
    if value is None or kind is int or kind is bool:
        return value  # type: ignore[return-value]
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    if kind is _CheckedDict or kind is _CheckedList:
        return value  # type: ignore[return-value]  # certified (rule 3)
    raise _Unusual


def freeze_checked(value: object, field: str) -> JsonValue:
    """Validate lossless JSON (``INVALID_ARGUMENT`` naming the path) and deep-freeze it.

    One pass over the common shapes; anything else (subclasses, non-ASCII keys, deep
    nesting, an invalid value) takes the general path: ``check_json``, then ``freeze_json``.
    """
    try:
        return _fast_frozen(value, 0)
    except (_Unusual, UnicodeEncodeError):
        check_json(value, field)
        return freeze_json(value)  # type: ignore[arg-type]  # check_json proved it JSON


def freeze_decoded(value: JsonValue, depth: int = 0) -> JsonValue:
    """Deep-freeze what ``json`` just decoded from text that re-encodes to itself.

    Such a value is lossless JSON already (string keys, finite numbers, no lone surrogates:
    the codec's round trip proved it) and its containers are fresh plain dicts and lists,
    unshared, so they are certified without a check; past ``_FAST_DEPTH`` the general path
    takes over."""
    if isinstance(value, dict):
        if not value:
            return EMPTY
        if depth > _FAST_DEPTH:
            return freeze_json(value)
        for key, sub in value.items():
            if type(sub) is dict or type(sub) is list:
                value[key] = freeze_decoded(sub, depth + 1)
        return _CheckedDict(value)
    if isinstance(value, list):
        if not value:
            return _EMPTY_LIST
        if depth > _FAST_DEPTH:
            return freeze_json(value)
        members: list[JsonValue] = []
        for sub in value:
            if type(sub) is dict or type(sub) is list:
                members.append(freeze_decoded(sub, depth + 1))
            else:
                members.append(sub)
        return _CheckedList(members)
    return value


def freeze_content(content: Content) -> Content:
    """``content`` with every data block's (validated) value deep-frozen and detached."""
    return tuple(
        DataBlock(freeze_json(block.value)) if isinstance(block, DataBlock) else block
        for block in content
    )


def frozen_intent(intent: SubagentIntent) -> SubagentIntent:
    """A validated start intent with its prompt frozen and detached (``freeze_content``)."""
    return attrs.evolve(intent, prompt=freeze_content(tuple(intent.prompt)))


def is_certified(value: object) -> bool:
    """Whether ``value`` needs no freezing: a scalar, or a container the freezer built."""
    return type(value) is _CheckedDict or type(value) is _CheckedList or value is None


__all__ = [
    "EMPTY",
    "FrozenDict",
    "FrozenList",
    "freeze_checked",
    "freeze_content",
    "freeze_decoded",
    "frozen_intent",
    "freeze_json",
    "is_certified",
]
