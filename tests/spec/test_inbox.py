"""HARNESS-11: every accepted message leaves the inbox exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import MessageId
from dsh_subagent.spec.inbox import InboxEvent, MessageLedger, MessageState, ledger_of, step

M1, M2 = MessageId("m1"), MessageId("m2")


def test_harness_11_a_message_is_claimed_or_discarded_once() -> None:
    assert step(MessageState.ACCEPTED, InboxEvent.CLAIMED) is MessageState.CLAIMED
    assert step(MessageState.ACCEPTED, InboxEvent.DISCARDED) is MessageState.DISCARDED
    for end in (MessageState.CLAIMED, MessageState.DISCARDED):
        for event in InboxEvent:
            with pytest.raises(SubagentError) as info:
                step(end, event)
            assert info.value.code is ErrorCode.ILLEGAL_TRANSITION


def test_harness_11_ledger_tracks_pending_and_refuses_double_exits() -> None:
    ledger = ledger_of([("inserted", M1), ("inserted", M2), ("claimed", M1)])
    assert ledger.pending() == {M2}
    assert ledger.count(MessageState.CLAIMED) == 1
    assert ledger.left(M2, InboxEvent.DISCARDED).pending() == frozenset()
    with pytest.raises(SubagentError, match="accepted twice"):
        ledger.accepted(M1)
    with pytest.raises(SubagentError, match="never accepted"):
        MessageLedger().left(M1, InboxEvent.CLAIMED)
    with pytest.raises(SubagentError):
        ledger_of([("inserted", M1), ("claimed", M1), ("discarded", M1)])


@given(st.lists(st.sampled_from(["claimed", "discarded"]), max_size=20))
def test_harness_11_each_message_leaves_exactly_once(exits: list[str]) -> None:
    ids = [MessageId(f"m{i}") for i in range(len(exits))]
    ledger = ledger_of([*(("inserted", m) for m in ids), *zip(exits, ids, strict=True)])
    assert ledger.pending() == frozenset()
    assert ledger.count(MessageState.CLAIMED) + ledger.count(MessageState.DISCARDED) == len(ids)
