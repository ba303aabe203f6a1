"""Tree budgets in a child's log: ``budget/set``, ``budget/charged`` and the fold."""

from __future__ import annotations

import pytest

from dsh_subagent.core import wire
from dsh_subagent.core.budget import Amounts, Budget, Dimension
from dsh_subagent.core.budget_log import (
    BUDGET_CHARGED,
    BUDGET_SET,
    BudgetRecord,
    budget_data,
    charged_data,
    decode_budget,
    exhausted_limit,
    fold_budget,
    stored_remaining,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import TURN_END, JsonValue, SessionEvent, TurnEndReason


def log(*items: tuple[str, JsonValue]) -> list[SessionEvent]:
    return [SessionEvent(kind, seq, 0.0, data) for seq, (kind, data) in enumerate(items)]


def test_budget_15_caps_and_charges_fold_from_the_log() -> None:
    caps = Budget(model_requests=4, wall_ms=9)
    assert budget_data(caps) == {"model_requests": 4, "wall_ms": 9}
    assert decode_budget(budget_data(caps), "d") == caps
    events = log(
        (BUDGET_SET, budget_data(Budget(model_requests=1))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 10, 3))),
        ("other", {}),
        (BUDGET_SET, budget_data(caps)),
        (BUDGET_CHARGED, {"model_requests": 1, "output_tokens": 2}),
    )
    assert fold_budget(events) == BudgetRecord(caps, Amounts(2, 10, 5))
    assert fold_budget([]) == BudgetRecord()


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ((BUDGET_SET, [1]), "events[0].data"),
        ((BUDGET_SET, {"coffee": 1}), "events[0].data.coffee"),
        ((BUDGET_SET, {"model_requests": -1}), "events[0].data.model_requests"),
        ((BUDGET_CHARGED, "x"), "events[0].data"),
        ((BUDGET_CHARGED, {"input_tokens": True}), "events[0].input_tokens"),
    ],
)
def test_budget_15_a_damaged_record_is_a_corrupt_session(
    event: tuple[str, JsonValue], field: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        fold_budget(log(event))
    assert (caught.value.code, caught.value.field) == (ErrorCode.CORRUPT_SESSION, field)


def test_budget_16_a_stored_log_folds_the_remaining_of_its_own_caps() -> None:
    assert stored_remaining([]) is None  # no budget recorded
    assert stored_remaining(log((BUDGET_SET, budget_data(Budget(wall_ms=5))))) is None
    events = log(
        (BUDGET_SET, budget_data(Budget(model_requests=3, output_tokens=10, wall_ms=5))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 40, 4))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 40, 9))),
    )
    # Own caps less the charges (never below 0); the shared input and wall time are unknown.
    assert stored_remaining(events) == Budget(model_requests=1, output_tokens=0)
    with pytest.raises(SubagentError) as caught:
        stored_remaining(log((BUDGET_SET, {"coffee": 1})))
    assert caught.value.code is ErrorCode.CORRUPT_SESSION


def test_budget_13_the_last_turn_end_names_the_exhausted_limit() -> None:
    exhausted = wire.turn_end_data(1, TurnEndReason.BUDGET_EXHAUSTED, limit="output_tokens")
    assert exhausted == {"turn": 1, "reason": "budget-exhausted", "limit": "output_tokens"}
    assert exhausted_limit(log((TURN_END, exhausted), ("step/start", {}))) is (
        Dimension.OUTPUT_TOKENS
    )
    completed = wire.turn_end_data(2, TurnEndReason.COMPLETED, limit="output_tokens")
    assert exhausted_limit(log((TURN_END, exhausted), (TURN_END, completed))) is None
    assert exhausted_limit(log((TURN_END, {"turn": 1, "reason": "budget-exhausted"}))) is None
    assert exhausted_limit(log((TURN_END, "bad"))) is None
    assert exhausted_limit([]) is None
