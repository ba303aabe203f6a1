"""Persistent-map behaviour the mutation check found unpinned (docs/mutation.md lists each)."""

from __future__ import annotations

import pytest

from dsh_subagent.core.pmap import PMap


@pytest.mark.parametrize("size", [3, 40])  # the small form and the trie
def test_pmap_a_missing_key_raises_a_key_error_naming_it(size: int) -> None:
    pmap: PMap[int, int] = PMap({n: n for n in range(size)})
    with pytest.raises(KeyError) as info:
        pmap[size + 7]
    assert info.value.args == (size + 7,)
