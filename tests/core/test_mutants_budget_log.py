"""Budget-log rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pytest

from dsh_subagent.core import wire
from dsh_subagent.core.budget_log import fold_budget
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import ASSISTANT_MESSAGE, SessionEvent, TextBlock


def test_budget_15_an_answers_charge_that_is_not_an_object_is_a_corrupt_session_by_reason() -> None:
    data = wire.assistant_message_data((TextBlock("ok"),), charged=7)  # type: ignore[arg-type]
    with pytest.raises(SubagentError) as caught:
        fold_budget([SessionEvent(ASSISTANT_MESSAGE, 4, 0.0, data)])
    assert (caught.value.code, caught.value.field, caught.value.message) == (
        ErrorCode.CORRUPT_SESSION,
        "events[4].data.charged",
        "INVALID_ARGUMENT [events[4].data.charged]: events[4].data.charged: not an object",
    )
