"""Tree budgets in a child's log: ``budget/set``, the charges (``budget/charged``, an answer's
``charged``) and the fold."""

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
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TURN_END,
    JsonValue,
    SessionEvent,
    TextBlock,
    TurnEndReason,
)


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


def answer(charged: JsonValue | None) -> tuple[str, JsonValue]:
    return (ASSISTANT_MESSAGE, wire.assistant_message_data((TextBlock("ok"),), charged=charged))  # type: ignore[arg-type]


def test_budget_15_a_charge_carried_by_its_answer_folds_like_an_old_budget_charged_record() -> None:
    caps = budget_data(Budget(model_requests=9))
    # The log format before the charge moved into the answer: one record per request.
    old = log(
        (BUDGET_SET, caps),
        (ASSISTANT_MESSAGE, wire.assistant_message_data((TextBlock("ok"),))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 10, 3))),
        (ASSISTANT_MESSAGE, wire.assistant_message_data((TextBlock("ok"),))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 5, 2))),
    )
    new = log(
        (BUDGET_SET, caps),
        answer(charged_data(Amounts(1, 10, 3))),
        answer(charged_data(Amounts(1, 5, 2))),
    )
    mixed = log(  # an old log continued by this version; a failed request's own record
        (BUDGET_SET, caps),
        (BUDGET_CHARGED, charged_data(Amounts(1, 10, 3))),
        answer(charged_data(Amounts(1, 5, 2))),
        (BUDGET_CHARGED, charged_data(Amounts(1, 1, 7))),
        answer(None),  # an unmetered request is charged nothing
    )
    record = BudgetRecord(Budget(model_requests=9), Amounts(2, 15, 5))
    assert fold_budget(old) == fold_budget(new) == record
    assert fold_budget(mixed) == BudgetRecord(Budget(model_requests=9), Amounts(3, 16, 12))
    assert stored_remaining(new) == Budget(model_requests=7)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ((BUDGET_SET, [1]), "events[0].data"),
        ((BUDGET_SET, {"coffee": 1}), "events[0].data.coffee"),
        ((BUDGET_SET, {"model_requests": -1}), "events[0].data.model_requests"),
        ((BUDGET_CHARGED, "x"), "events[0].data"),
        ((BUDGET_CHARGED, {"input_tokens": True}), "events[0].input_tokens"),
        ((ASSISTANT_MESSAGE, "x"), "events[0].data"),
        (answer("x"), "events[0].data.charged"),
        (answer({"output_tokens": -2}), "events[0].charged.output_tokens"),
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
