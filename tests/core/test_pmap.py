"""Model tests of the persistent hash map against ``dict``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.pmap import PMap


class Clashing:
    """A key whose hash is chosen by the test, to force shared prefixes and full collisions."""

    def __init__(self, name: int, hashed: int) -> None:
        self.name = name
        self.hashed = hashed

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Clashing) and other.name == self.name

    def __repr__(self) -> str:
        return f"Clashing({self.name}, {self.hashed})"


# Hashes drawn from a tiny set (full collisions) or sharing long low-bit prefixes.
HASHES = [0, 1, 32, 1 << 30, (1 << 60) | 3, (1 << 61) | 3, -1, 7, 1 << 35]
keys = st.integers(0, 40).map(lambda n: Clashing(n, HASHES[n % len(HASHES)])) | st.integers(
    -50, 50
).map(lambda n: Clashing(n + 100, n))
ops = st.lists(st.tuples(st.booleans(), keys, st.integers()), max_size=60)

# Runs that cross the small/trie threshold both ways, twice: 17 or more distinct keys set
# (past the 16 of the small form), all removed in some order (past the demotion point, 8),
# set again in that order, then mixed updates. A quarter of the pool shares nine hashes, so
# buckets form on both sides of the threshold.
pool = st.integers(0, 79).map(
    lambda n: Clashing(n, HASHES[n % len(HASHES)] if n < 20 else n * 977 - 25_000)
)
grown = st.lists(pool, min_size=17, max_size=40, unique_by=lambda key: key.name)
mixed = st.lists(st.tuples(st.booleans(), pool, st.integers()), max_size=60)
crossing = grown.flatmap(
    lambda keys: st.tuples(st.permutations(keys), mixed).map(
        lambda tail: (
            [(True, key, key.name) for key in keys]
            + [(False, key, 0) for key in tail[0]]
            + [(True, key, -key.name) for key in tail[0]]
            + tail[1]
        )
    )
)


def check_against_dict(operations: list[tuple[bool, Clashing, int]]) -> None:
    model: dict[Clashing, int] = {}
    pmap: PMap[Clashing, int] = PMap()
    history = []
    for is_set, key, value in operations:
        before = pmap
        if is_set:
            model[key] = value
            pmap = pmap.set(key, value)
        else:
            model.pop(key, None)
            pmap = pmap.remove(key)
        history.append((before, dict(before.items())))
        assert len(pmap) == len(model)
        assert dict(pmap.items()) == model
        assert all(pmap[k] == v and k in pmap for k, v in model.items())
        assert key in pmap or pmap.get(key) is None
    # Persistence: every earlier version still holds its own content.
    for version, content in history:
        assert dict(version.items()) == content


@given(ops)
def test_pmap_matches_dict_model(operations: list[tuple[bool, Clashing, int]]) -> None:
    check_against_dict(operations)


@given(crossing)
def test_pmap_matches_dict_model_across_the_small_threshold(
    operations: list[tuple[bool, Clashing, int]],
) -> None:
    check_against_dict(operations)


@given(st.dictionaries(st.integers(), st.integers(), max_size=80))
def test_pmap_built_from_mapping_equals_it(content: dict[int, int]) -> None:
    pmap = PMap(content)
    assert pmap == content
    assert sorted(pmap) == sorted(content)
    assert repr(pmap) == f"PMap({dict(pmap.items())!r})"


def test_pmap_missing_keys() -> None:
    pmap: PMap[str, int] = PMap({"a": 1})
    assert pmap.get("b") is None
    assert pmap.get("b", 5) == 5
    assert pmap.remove("b") is pmap
    try:
        pmap["b"]
    except KeyError:
        pass
    else:  # pragma: no cover - the assertion above must raise
        raise AssertionError("missing key did not raise")
    assert len(pmap.remove("a")) == 0


def test_pmap_large_map_stays_consistent() -> None:
    pmap: PMap[int, int] = PMap()
    for n in range(5000):
        pmap = pmap.set(n, n * 2)
    for n in range(0, 5000, 2):
        pmap = pmap.remove(n)
    assert len(pmap) == 2500
    assert all(pmap[n] == n * 2 for n in range(1, 5000, 2))
    assert 0 not in pmap


def test_pmap_full_hash_collisions_share_a_bucket() -> None:
    a, b, c = Clashing(1, 99), Clashing(2, 99), Clashing(3, 99)
    other = Clashing(4, 99 + 32)
    pmap: PMap[Clashing, int] = PMap({a: 1, b: 2})
    pmap = pmap.set(c, 3).set(b, 20).set(other, 4)
    assert dict(pmap.items()) == {a: 1, b: 20, c: 3, other: 4}
    assert pmap.get(Clashing(5, 99)) is None
    assert pmap.remove(Clashing(5, 99)) is pmap
    only_bucket = pmap.remove(other)
    assert dict(only_bucket.items()) == {a: 1, b: 20, c: 3}
    pair = only_bucket.remove(c)
    assert dict(pair.items()) == {a: 1, b: 20}
    single = pair.remove(a)
    assert dict(single.items()) == {b: 20}
    # A bucket meeting a leaf whose hash differs only deep down splits into branches.
    deep = Clashing(6, 99 | (1 << 40))
    assert dict(pair.set(deep, 6).items()) == {a: 1, b: 20, deep: 6}
    assert dict(PMap({deep: 6}).set(a, 1).set(b, 2).items()) == {deep: 6, a: 1, b: 2}


def test_pmap_promotes_past_the_small_size_and_demotes_back() -> None:
    small: PMap[str, int] = PMap({f"k{n}": n for n in range(16)})
    large = small.set("k16", 16)
    assert small == {f"k{n}": n for n in range(16)}
    assert large == {f"k{n}": n for n in range(17)}
    assert large.set("k0", 100)["k0"] == 100
    assert large["k0"] == 0
    assert sorted(large.values()) == list(range(17))
    assert sorted(small.values()) == list(range(16))
    assert sorted(large) == sorted(f"k{n}" for n in range(17))
    shrunk = large
    for n in range(17, 0, -1):
        shrunk = shrunk.remove(f"k{n}")
        assert dict(shrunk.items()) == {f"k{m}": m for m in range(n)}
    assert list(shrunk) == ["k0"]
    assert PMap(large) == large
    assert PMap(small) == small
    assert len(PMap(dict(large.items()))) == 17


def test_pmap_trie_lookups_and_removals_of_absent_keys() -> None:
    large: PMap[int, int] = PMap({n: -n for n in range(1000)})
    assert large.get(5000) is None
    assert large.get(5000, 7) == 7
    assert large.get(999) == -999
    assert 5000 not in large
    assert 1024 not in large  # same low bits as 0: its slot holds a leaf of another key
    assert 1000 not in large  # its second-level slot is empty
    assert large.remove(1000) is large
    assert large.remove(5000) is large
    assert large.remove(1024) is large
    try:
        large[5000]
    except KeyError:
        pass
    else:  # pragma: no cover - the lookup above must raise
        raise AssertionError("missing key did not raise")


def test_pmap_trie_of_one_bucket() -> None:
    """Forty keys of one hash: the trie's root holds a single bucket, before and after."""
    same = [Clashing(n, 12345) for n in range(40)]
    pmap: PMap[Clashing, int] = PMap({key: n for n, key in enumerate(same)})
    assert pmap.get(Clashing(99, 12345)) is None
    assert pmap.remove(Clashing(99, 12345)) is pmap
    fewer = pmap.remove(same[0]).set(same[1], -1)
    assert dict(fewer.items()) == {key: -1 if n == 1 else n for n, key in enumerate(same) if n}
    # A key of another hash splits the bucket off, then its removal re-roots the bucket.
    other = Clashing(100, 12345 | (1 << 50))
    split = fewer.set(other, 0)
    assert split[other] == 0
    assert dict(split.remove(other).items()) == dict(fewer.items())


def test_pmap_trie_buckets_meet_leaves() -> None:
    """Buckets inside a large trie: grow, replace in, shrink to a leaf, split deep down."""
    base: PMap[Clashing, int] = PMap({Clashing(1000 + n, 64 * n + 1): n for n in range(40)})
    a, b, c = Clashing(1, 7), Clashing(2, 7), Clashing(3, 7)
    deep = Clashing(4, 7 | (1 << 45))
    pmap = base.set(a, 1).set(b, 2).set(c, 3).set(b, 20).set(deep, 4)
    assert {key: pmap[key] for key in (a, b, c, deep)} == {a: 1, b: 20, c: 3, deep: 4}
    assert pmap.get(Clashing(5, 7)) is None
    assert pmap.remove(Clashing(5, 7)) is pmap
    pair = pmap.remove(deep).remove(c)
    single = pair.remove(a)
    assert single[b] == 20
    assert a not in single
    assert len(single) == 41
