"""A persistent (immutable, path-copying) hash map: a 32-way hash-array-mapped trie.

Theory of operation
-------------------
1. ``PMap`` is an immutable ``Mapping``. ``set`` and ``remove`` return a new map that shares
   every untouched node with the old one; only the nodes on the path to the key are copied,
   so an update costs O(log32 n) (at most 13 levels of a 64-bit hash), never O(n).
2. A branch node holds a 32-bit ``bitmap`` of occupied slots and a packed tuple of entries.
   An entry is a leaf ``(hash, key, value)``, a sub-branch, or a collision bucket holding
   leaves whose full hashes are equal.
3. A branch left with a single leaf collapses into that leaf, and a bucket left with a single
   leaf becomes that leaf, so the trie never keeps empty or degenerate interior nodes.
4. The core's machines keep their per-Activation records in a ``PMap`` so that the cost of
   one event does not grow with the number of live Activations.
5. ``items()`` and ``values()`` are the ``Mapping`` views, except that iterating them walks
   the leaves once instead of looking every key up again (a full walk stays O(n)).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from typing import Final, Generic, TypeAlias, TypeVar, cast, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_BITS: Final = 5
_MASK: Final = (1 << _BITS) - 1
_HASH_MASK: Final = (1 << 64) - 1


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


def _hash(key: object) -> int:
    return hash(key) & _HASH_MASK


def _merge(shift: int, a: _Leaf, b: _Leaf) -> _Entry:
    """A node holding two leaves of different hashes that met at ``shift``."""
    bit_a = 1 << ((a.hash >> shift) & _MASK)
    bit_b = 1 << ((b.hash >> shift) & _MASK)
    if bit_a == bit_b:
        return _Branch(bit_a, (_merge(shift + _BITS, a, b),))
    ordered = (a, b) if bit_a < bit_b else (b, a)
    return _Branch(bit_a | bit_b, ordered)


def _replaced(entries: tuple[_Entry, ...], index: int, entry: _Entry) -> tuple[_Entry, ...]:
    """``entries`` with the one at ``index`` replaced (one copy, no slicing)."""
    copy = list(entries)
    copy[index] = entry
    return tuple(copy)


def _set(node: _Entry, shift: int, leaf: _Leaf) -> tuple[_Entry, bool]:
    """Insert or replace ``leaf`` below ``node``; returns the new node and whether it grew."""
    if isinstance(node, _Branch):  # the common case first: a path of branches to the leaf
        bit = 1 << ((leaf.hash >> shift) & _MASK)
        bitmap = node.bitmap
        index = (bitmap & (bit - 1)).bit_count()
        if not bitmap & bit:
            entries = node.entries
            return _Branch(bitmap | bit, (*entries[:index], leaf, *entries[index:])), True
        child, grew = _set(node.entries[index], shift + _BITS, leaf)
        return _Branch(bitmap, _replaced(node.entries, index, child)), grew
    if isinstance(node, _Leaf):
        if node.key == leaf.key:
            return leaf, False
        if node.hash != leaf.hash:
            return _merge(shift, node, leaf), True
        return _Bucket(node.hash, (node, leaf)), True
    if node.hash != leaf.hash:
        return _merge_bucket(shift, node, leaf), True
    for index, old in enumerate(node.leaves):
        if old.key == leaf.key:
            leaves = (*node.leaves[:index], leaf, *node.leaves[index + 1 :])
            return _Bucket(node.hash, leaves), False
    return _Bucket(node.hash, (*node.leaves, leaf)), True


def _merge_bucket(shift: int, bucket: _Bucket, leaf: _Leaf) -> _Entry:
    """A branch separating a bucket from a leaf of a different hash."""
    bit_a = 1 << ((bucket.hash >> shift) & _MASK)
    bit_b = 1 << ((leaf.hash >> shift) & _MASK)
    if bit_a == bit_b:
        return _Branch(bit_a, (_merge_bucket(shift + _BITS, bucket, leaf),))
    ordered: tuple[_Entry, ...] = (bucket, leaf) if bit_a < bit_b else (leaf, bucket)
    return _Branch(bit_a | bit_b, ordered)


def _remove(node: _Entry, shift: int, h: int, key: object) -> _Entry | None:
    """``node`` without ``key`` (``node`` itself when absent, None when left empty)."""
    if isinstance(node, _Branch):  # the common case first
        bit = 1 << ((h >> shift) & _MASK)
        bitmap = node.bitmap
        if not bitmap & bit:
            return node
        index = (bitmap & (bit - 1)).bit_count()
        old = node.entries[index]
        child = _remove(old, shift + _BITS, h, key)
        if child is old:
            return node
        if child is None:
            entries = node.entries[:index] + node.entries[index + 1 :]
            bitmap &= ~bit
        else:
            entries = _replaced(node.entries, index, child)
        if not entries:
            return None
        if len(entries) == 1 and not isinstance(entries[0], _Branch):
            return entries[0]
        return _Branch(bitmap, entries)
    if isinstance(node, _Leaf):
        return None if node.key == key else node
    kept = tuple(leaf for leaf in node.leaves if leaf.key != key)
    if len(kept) == len(node.leaves):
        return node
    return kept[0] if len(kept) == 1 else _Bucket(node.hash, kept)


def _find(node: _Entry, h: int, key: object) -> _Leaf | None:
    shift = 0
    while isinstance(node, _Branch):
        bit = 1 << ((h >> shift) & _MASK)
        bitmap = node.bitmap
        if not bitmap & bit:
            return None
        node = node.entries[(bitmap & (bit - 1)).bit_count()]
        shift += _BITS
    if isinstance(node, _Leaf):
        return node if node.key == key else None
    return next((leaf for leaf in node.leaves if leaf.key == key), None)


def _leaves(root: _Entry) -> Iterator[_Leaf]:
    stack: list[_Entry] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, _Leaf):
            yield node
        elif isinstance(node, _Bucket):
            yield from node.leaves
        else:
            stack.extend(reversed(node.entries))


class PMap(Mapping[K, V], Generic[K, V]):
    """An immutable hash map with O(log32 n) path-copying ``set`` and ``remove``."""

    __slots__ = ("_len", "_root")

    _root: _Entry
    _len: int

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        root: _Entry = _EMPTY
        size = 0
        for key, value in (items or {}).items():
            root, grew = _set(root, 0, _Leaf(_hash(key), key, value))
            size += grew
        self._root = _as_root(root)
        self._len = size

    @classmethod
    def _make(cls, root: _Entry, size: int) -> PMap[K, V]:
        new: PMap[K, V] = cls.__new__(cls)
        new._root = _as_root(root)
        new._len = size
        return new

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        return (cast(K, leaf.key) for leaf in _leaves(self._root))

    def __getitem__(self, key: K) -> V:
        leaf = _find(self._root, hash(key) & _HASH_MASK, key)
        if leaf is None:
            raise KeyError(key)
        return cast(V, leaf.value)

    def __contains__(self, key: object) -> bool:
        return _find(self._root, hash(key) & _HASH_MASK, key) is not None

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...

    def get(self, key: K, default: V | D | None = None, /) -> V | D | None:
        leaf = _find(self._root, hash(key) & _HASH_MASK, key)
        return default if leaf is None else cast(V, leaf.value)

    def items(self) -> ItemsView[K, V]:
        """A view whose iteration walks the leaves once (no lookup per key)."""
        return _Items(self)

    def values(self) -> ValuesView[V]:
        """A view whose iteration walks the leaves once (no lookup per key)."""
        return _Values(self)

    def set(self, key: K, value: V) -> PMap[K, V]:
        """A map with ``key`` bound to ``value``."""
        root, grew = _set(self._root, 0, _Leaf(hash(key) & _HASH_MASK, key, value))
        return self._make(root, self._len + grew)

    def remove(self, key: K) -> PMap[K, V]:
        """A map without ``key``; the same map when ``key`` is absent."""
        root = _remove(self._root, 0, hash(key) & _HASH_MASK, key)
        if root is self._root:
            return self
        return self._make(_EMPTY if root is None else root, self._len - 1)

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"


def _as_root(node: _Entry) -> _Entry:
    """The root is always a branch, so lookups start from one shape."""
    if isinstance(node, _Branch):
        return node
    return _set(_EMPTY, 0, node)[0] if isinstance(node, _Leaf) else _rebucket(node)


def _rebucket(bucket: _Bucket) -> _Entry:
    root: _Entry = _EMPTY
    for leaf in bucket.leaves:
        root = _set(root, 0, leaf)[0]
    return root


class _Items(ItemsView[K, V]):
    __slots__ = ()
    _mapping: PMap[K, V]  # set by ``MappingView.__init__``

    def __iter__(self) -> Iterator[tuple[K, V]]:
        leaves = _leaves(self._mapping._root)
        return ((cast(K, leaf.key), cast(V, leaf.value)) for leaf in leaves)


class _Values(ValuesView[V]):
    __slots__ = ()
    _mapping: PMap[object, V]  # set by ``MappingView.__init__``

    def __iter__(self) -> Iterator[V]:
        return (cast(V, leaf.value) for leaf in _leaves(self._mapping._root))
