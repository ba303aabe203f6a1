"""A persistent (immutable) hash map: a small dict copied on write, a 32-way trie above it.

Theory of operation
-------------------
1. ``PMap`` is an immutable ``Mapping``. ``set`` and ``remove`` return a new map and never
   change the old one. A map holds one of two forms, chosen by its size:
2. *Small* (at most ``_SMALL`` entries, the common case: a delegation's ledger, a session's
   jobs): a plain ``dict`` that is never mutated once stored. An update copies it (a C-level
   copy of a few entries costs less than one trie level in Python) and a lookup is a single
   ``dict`` probe. Maps may share one such dict, since nobody writes to it.
3. *Large*: a hash-array-mapped trie. ``set`` and ``remove`` share every untouched node and
   copy only the nodes on the path to the key (one call per level), so an update costs
   O(log32 n) (at most 13 levels of a 64-bit hash), never O(n). A branch node holds a 32-bit
   ``bitmap`` of occupied slots and a packed tuple of entries: a leaf ``(hash, key, value)``,
   a sub-branch, or a collision bucket of leaves whose full hashes are equal. A branch left
   with a single leaf (or bucket) collapses into it and a bucket left with one leaf becomes
   that leaf, so no branch is ever empty and the root, always a branch, is the only one that
   may hold a lone leaf or bucket.
4. The small form promotes to the trie when a ``set`` would pass ``_SMALL`` entries and a trie
   demotes back when a ``remove`` leaves ``_SMALL // 2``. The gap between the two keeps a map
   that hovers at the threshold from converting on every update: each conversion (O(_SMALL))
   is paid for by at least ``_SMALL // 2`` updates since the previous one.
5. Keys match as in a ``dict``: the same object, or equal with equal hashes. ``hash`` is
   Python's own (64-bit signed); shifting a negative hash right still yields its bits, so no
   mask is needed.
6. The core's machines keep their per-Activation records in a ``PMap`` so that the cost of
   one event does not grow with the number of live Activations.
7. Iteration order is the dict's insertion order in the small form and hash order in the
   trie; callers must not rely on either. ``items()`` and ``values()`` walk the entries once
   instead of looking every key up again (a full walk stays O(n)).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from typing import Final, Generic, TypeAlias, TypeVar, cast, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_BITS: Final = 5
_MASK: Final = (1 << _BITS) - 1
_SMALL: Final = 16
"""The largest size kept as a dict; a trie demotes at half of it."""


class _Leaf:
    __slots__ = ("hash", "key", "value")

    def __init__(self, h: int, key: object, value: object) -> None:
        self.hash = h
        self.key = key
        self.value = value


class _Bucket:
    """Leaves whose full 64-bit hashes are equal."""

    __slots__ = ("hash", "leaves")

    def __init__(self, h: int, leaves: tuple[_Leaf, ...]) -> None:
        self.hash = h
        self.leaves = leaves


class _Branch:
    __slots__ = ("bitmap", "entries")

    def __init__(self, bitmap: int, entries: tuple[_Entry, ...]) -> None:
        self.bitmap = bitmap
        self.entries = entries


_Entry: TypeAlias = "_Leaf | _Bucket | _Branch"
_EMPTY: Final = _Branch(0, ())


def _merge(shift: int, a: _Leaf | _Bucket, b: _Leaf) -> _Branch:
    """A branch separating ``a`` from a leaf of a different hash that met it at ``shift``."""
    bit_a = 1 << ((a.hash >> shift) & _MASK)
    bit_b = 1 << ((b.hash >> shift) & _MASK)
    if bit_a == bit_b:
        return _Branch(bit_a, (_merge(shift + _BITS, a, b),))
    return _Branch(bit_a | bit_b, (a, b) if bit_a < bit_b else (b, a))


def _set(node: _Branch, shift: int, leaf: _Leaf) -> tuple[_Branch, bool]:
    """``node`` with ``leaf`` inserted or replaced below it; and whether it grew."""
    bit = 1 << ((leaf.hash >> shift) & _MASK)
    bitmap = node.bitmap
    index = (bitmap & (bit - 1)).bit_count()
    entries = node.entries
    if not bitmap & bit:
        return _Branch(bitmap | bit, (*entries[:index], leaf, *entries[index:])), True
    child = entries[index]
    new: _Entry
    if type(child) is _Branch:
        new, grew = _set(child, shift + _BITS, leaf)
    else:
        new, grew = _set_below(cast("_Leaf | _Bucket", child), shift + _BITS, leaf, leaf.key)
    copy = list(entries)
    copy[index] = new
    return _Branch(bitmap, tuple(copy)), grew


def _set_below(node: _Leaf | _Bucket, shift: int, leaf: _Leaf, key: object) -> tuple[_Entry, bool]:
    """The entry replacing ``node`` (a leaf or bucket met at ``shift``) once ``leaf`` is in."""
    if node.hash != leaf.hash:
        return _merge(shift, node, leaf), True
    if type(node) is _Leaf:
        old = node.key
        if old is key or old == key:
            return leaf, False
        return _Bucket(node.hash, (node, leaf)), True
    leaves = cast(_Bucket, node).leaves
    for index, other in enumerate(leaves):
        old = other.key
        if old is key or old == key:
            return _Bucket(node.hash, (*leaves[:index], leaf, *leaves[index + 1 :])), False
    return _Bucket(node.hash, (*leaves, leaf)), True


def _remove(node: _Branch, shift: int, h: int, key: object) -> _Entry:
    """``node`` without ``key`` (``node`` itself when absent); a branch left with one leaf or
    bucket collapses into it. A branch never empties: it holds two entries or a branch."""
    bit = 1 << ((h >> shift) & _MASK)
    bitmap = node.bitmap
    if not bitmap & bit:
        return node
    index = (bitmap & (bit - 1)).bit_count()
    entries = node.entries
    old = entries[index]
    child: _Entry | None
    if type(old) is _Branch:
        child = _remove(old, shift + _BITS, h, key)
    elif type(old) is _Leaf:
        found = old.key
        child = None if found is key or found == key else old
    else:
        child = _unbucket(cast(_Bucket, old), key)
    if child is old:
        return node
    if child is None:  # the branch keeps another entry: a lone leaf would have collapsed
        entries = entries[:index] + entries[index + 1 :]
        bitmap &= ~bit
    else:
        copy = list(entries)
        copy[index] = child
        entries = tuple(copy)
    if len(entries) == 1 and type(entries[0]) is not _Branch:
        return entries[0]
    return _Branch(bitmap, entries)


def _unbucket(bucket: _Bucket, key: object) -> _Entry:
    """``bucket`` without ``key`` (``bucket`` itself when absent, its leaf when one is left)."""
    leaves = bucket.leaves
    kept = tuple(leaf for leaf in leaves if not (leaf.key is key or leaf.key == key))
    if len(kept) == len(leaves):
        return bucket
    return kept[0] if len(kept) == 1 else _Bucket(bucket.hash, kept)


def _as_root(node: _Entry) -> _Branch:
    """The root is always a branch, so every walk starts from one shape."""
    if type(node) is _Branch:
        return node
    return _Branch(1 << (cast("_Leaf | _Bucket", node).hash & _MASK), (node,))


def _find(root: _Branch, h: int, key: object) -> _Leaf | None:
    node: _Entry = root
    shift = 0
    while type(node) is _Branch:
        bit = 1 << ((h >> shift) & _MASK)
        bitmap = node.bitmap
        if not bitmap & bit:
            return None
        node = node.entries[(bitmap & (bit - 1)).bit_count()]
        shift += _BITS
    if type(node) is _Leaf:
        old = node.key
        return node if old is key or old == key else None
    leaves = cast(_Bucket, node).leaves
    return next((leaf for leaf in leaves if leaf.key is key or leaf.key == key), None)


def _leaves(node: _Entry) -> Iterator[_Leaf]:
    stack: list[_Entry] = [node]
    while stack:
        node = stack.pop()
        if type(node) is _Leaf:
            yield node
        elif type(node) is _Bucket:
            yield from node.leaves
        else:
            stack.extend(reversed(cast(_Branch, node).entries))


def _trie(small: Mapping[object, object]) -> _Branch:
    """A trie holding ``small``'s entries, built in one pass (not key by key)."""
    return _as_root(_build([_Leaf(hash(key), key, value) for key, value in small.items()], 0))


def _build(leaves: list[_Leaf], shift: int) -> _Entry:
    """A node holding ``leaves`` (distinct keys whose hashes agree below ``shift``)."""
    if len(leaves) == 1:
        return leaves[0]
    first = leaves[0].hash
    if all(leaf.hash == first for leaf in leaves):
        return _Bucket(first, tuple(leaves))
    slots: dict[int, list[_Leaf]] = {}
    for leaf in leaves:
        slots.setdefault((leaf.hash >> shift) & _MASK, []).append(leaf)
    bitmap = 0
    for slot in slots:
        bitmap |= 1 << slot
    return _Branch(bitmap, tuple([_build(slots[slot], shift + _BITS) for slot in sorted(slots)]))


class PMap(Mapping[K, V], Generic[K, V]):
    """An immutable hash map: a dict copied on write up to ``_SMALL`` entries, above that a
    trie with O(log32 n) path-copying ``set`` and ``remove``."""

    __slots__ = ("_len", "_root", "_small")

    _small: dict[K, V] | None  # the small form; None when the trie holds the entries
    _root: _Branch  # the trie (``_EMPTY`` in the small form)
    _len: int

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        if isinstance(items, PMap):
            self._small, self._root, self._len = items._small, items._root, items._len
            return
        small = dict(items) if items else {}
        if len(small) <= _SMALL:
            self._small, self._root = small, _EMPTY
        else:
            self._small, self._root = None, _trie(cast("dict[object, object]", small))
        self._len = len(small)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        small = self._small
        if small is not None:
            return iter(small)
        return (cast(K, leaf.key) for leaf in _leaves(self._root))

    def __getitem__(self, key: K) -> V:
        small = self._small
        if small is not None:
            return small[key]
        leaf = _find(self._root, hash(key), key)
        if leaf is None:
            raise KeyError(key)
        return cast(V, leaf.value)

    def __contains__(self, key: object) -> bool:
        small = self._small
        if small is not None:
            return key in small
        return _find(self._root, hash(key), key) is not None

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...

    def get(self, key: K, default: V | D | None = None, /) -> V | D | None:
        small = self._small
        if small is not None:
            return small.get(key, default)
        leaf = _find(self._root, hash(key), key)
        return default if leaf is None else cast(V, leaf.value)

    def items(self) -> ItemsView[K, V]:
        """A view whose iteration walks the entries once (no lookup per key)."""
        return _Items(self)

    def values(self) -> ValuesView[V]:
        """A view whose iteration walks the entries once (no lookup per key)."""
        return _Values(self)

    def set(self, key: K, value: V) -> PMap[K, V]:
        """A map with ``key`` bound to ``value``."""
        small = self._small
        if small is not None:
            if self._len < _SMALL or key in small:
                copy = small.copy()
                copy[key] = value
                # ``_new`` inline: the commonest update of the core's maps pays no second call
                new: PMap[K, V] = _object_new(PMap)
                new._small, new._root, new._len = copy, _EMPTY, len(copy)
                return new
            root = _trie(cast("dict[object, object]", small))
        else:
            root = self._root
        root, grew = _set(root, 0, _Leaf(hash(key), key, value))
        return _new(None, root, self._len + grew)

    def remove(self, key: K) -> PMap[K, V]:
        """A map without ``key``; the same map when ``key`` is absent."""
        small = self._small
        if small is not None:
            if key not in small:
                return self
            copy = small.copy()
            del copy[key]
            return _new(copy, _EMPTY, len(copy))
        found = _remove(self._root, 0, hash(key), key)
        if found is self._root:
            return self
        if self._len - 1 > _SMALL // 2:
            return _new(None, _as_root(found), self._len - 1)
        demoted = {cast(K, leaf.key): cast(V, leaf.value) for leaf in _leaves(found)}
        return _new(demoted, _EMPTY, len(demoted))

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"


def _new(small: dict[K, V] | None, root: _Branch, size: int) -> PMap[K, V]:
    """A map of the given parts (``object.__new__`` and three slots: no ``__init__`` call)."""
    new: PMap[K, V] = _object_new(PMap)
    new._small = small
    new._root = root
    new._len = size
    return new


_object_new: Final = object.__new__


class _Items(ItemsView[K, V]):
    __slots__ = ()
    _mapping: PMap[K, V]  # set by ``MappingView.__init__``

    def __iter__(self) -> Iterator[tuple[K, V]]:
        small = self._mapping._small
        if small is not None:
            return iter(small.items())
        leaves = _leaves(self._mapping._root)
        return ((cast(K, leaf.key), cast(V, leaf.value)) for leaf in leaves)


class _Values(ValuesView[V]):
    __slots__ = ()
    _mapping: PMap[object, V]  # set by ``MappingView.__init__``

    def __iter__(self) -> Iterator[V]:
        small = self._mapping._small
        if small is not None:
            return iter(small.values())
        return (cast(V, leaf.value) for leaf in _leaves(self._mapping._root))
