"""Projection rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.projections import Identity, identity_from_view
from dsh_subagent.core.values import Mode


def test_proj_5_a_seed_position_of_zero_reads_back() -> None:
    assert identity_from_view({"mode": "one-shot", "seq": 0}) == Identity(Mode.ONE_SHOT, None, 0)


def test_proj_5_a_malformed_identity_view_is_corrupt_naming_subagent() -> None:
    with pytest.raises(SubagentError) as info:
        identity_from_view({"mode": "one-shot", "seq": -1})
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    assert info.value.field == "subagent"
    assert info.value.message == "malformed subagent identity {'mode': 'one-shot', 'seq': -1}"
