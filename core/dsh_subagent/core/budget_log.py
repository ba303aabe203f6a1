"""Tree budgets in a child's log: the records a cold resume restores its budget from.

Theory of operation
-------------------
1. ``budget/set`` records a child's own caps (``Dimension`` values as keys, absent for
   uncapped): written when its budget node opens and whenever the host raises it. The last
   one wins.
2. A settled model request's charge (model requests, input and output tokens) is written
   in the same span as the settlement: as the ``charged`` of the ``assistant/message`` that
   records its answer (no record of its own), or as a ``budget/charged`` record when no
   answer is recorded (a failed or aborted request). Logs written before the charge moved
   into the answer hold one ``budget/charged`` per request; they fold the same.
3. ``fold_budget`` is the projection: the last caps and the sum of every charge. Nothing of
   a budget is kept only in memory; a restarted process reopens the node from this fold.
4. ``budget/exhausted`` turn ends name the limit reached (``turn/end.limit``);
   ``exhausted_limit`` reads it back for the notice and the tool result.
5. ``stored_remaining`` is the listing projection of a cold child: its own caps less its
   charges, read from the stored log without loading the child.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from dsh_subagent.core.budget import COUNTED_NAMES, DIMENSIONS, Amounts, Budget, Dimension
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TURN_END,
    JsonObject,
    JsonValue,
    SessionEvent,
    TurnEndReason,
)

BUDGET_SET: Final = "budget/set"
BUDGET_CHARGED: Final = "budget/charged"


def budget_data(budget: Budget) -> JsonObject:
    """The ``budget/set`` payload: each capped dimension by its wire name."""
    return {
        d.value: getattr(budget, d.value)
        for d in DIMENSIONS
        if getattr(budget, d.value) is not None
    }


CHARGED: Final = "charged"
"""The ``assistant/message`` key holding its request's charge (rule 2)."""


def charged_data(used: tuple[int, int, int]) -> JsonObject:
    """The charge of one settled request (in ``COUNTED`` order: an ``Amounts`` or a plain
    tuple): a ``budget/charged`` payload or the ``charged`` of an ``assistant/message``
    (rule 2)."""
    requests, input_tokens, output_tokens = used  # a literal: no ``zip`` call per request
    return {
        COUNTED_NAMES[0]: requests,
        COUNTED_NAMES[1]: input_tokens,
        COUNTED_NAMES[2]: output_tokens,
    }


def _count(data: Mapping[str, JsonValue], key: str, field: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise invalid(f"{field}.{key}", f"must be a non-negative integer, got {value!r}")
    return value


def _object(event: SessionEvent) -> Mapping[str, JsonValue]:
    if not isinstance(event.data, Mapping):
        raise invalid(f"events[{event.seq}].data", "not an object")
    return event.data


def decode_budget(data: JsonValue, field: str) -> Budget:
    """A ``budget/set`` payload (or any budget object) as a ``Budget``, naming ``field``.

    raises: SubagentError
    """
    if not isinstance(data, Mapping):
        raise invalid(field, "must be an object")
    unknown = sorted(set(data) - {d.value for d in DIMENSIONS})
    if unknown:
        raise invalid(f"{field}.{unknown[0]}", "is not a budget dimension")
    return Budget(*(_count(data, d.value, field) for d in DIMENSIONS))


@attrs.frozen
class BudgetRecord:
    """A log's budget projection: the last recorded caps (None: none) and the charges."""

    budget: Budget | None = None
    consumed: Amounts = attrs.field(factory=Amounts)


def fold_budget(events: Sequence[SessionEvent]) -> BudgetRecord:
    """The last ``budget/set`` and the sum of every charge, ``budget/charged`` records and
    ``assistant/message`` ``charged`` keys alike (rule 3).

    raises: SubagentError
    """
    budget: Budget | None = None
    totals = [0, 0, 0]
    try:
        for event in events:
            kind = event.type
            if kind == BUDGET_SET:
                budget = decode_budget(event.data, f"events[{event.seq}].data")
                continue
            if kind == BUDGET_CHARGED:
                data, field = _object(event), f"events[{event.seq}]"
            elif kind == ASSISTANT_MESSAGE:
                charged = _object(event).get(CHARGED)
                if charged is None:
                    continue  # an unmetered request
                if not isinstance(charged, Mapping):
                    raise invalid(f"events[{event.seq}].data.{CHARGED}", "not an object")
                data, field = charged, f"events[{event.seq}].{CHARGED}"
            else:
                continue
            for index, name in enumerate(COUNTED_NAMES):
                totals[index] += _count(data, name, field) or 0
    except SubagentError as exc:
        raise SubagentError(ErrorCode.CORRUPT_SESSION, str(exc), field=exc.field) from exc
    return BudgetRecord(budget, Amounts(*totals))


def stored_remaining(events: Sequence[SessionEvent]) -> Budget | None:
    """What a stored (cold) child may still spend by its own caps, folded from its log
    (rule 5): each recorded cap less the charges, never below 0. None when the log records
    no counted cap (nothing of its own to show); a dimension it shares with its parent and
    wall time are None (they are known only where its node is open).

    raises: SubagentError
    """
    record = fold_budget(events)
    if record.budget is None:
        return None
    caps = record.budget.counted()
    if caps == (None, None, None):
        return None
    left = [
        None if cap is None else max(cap - used, 0)
        for cap, used in zip(caps, record.consumed, strict=True)
    ]
    return Budget(left[0], left[1], left[2], None)


def exhausted_limit(events: Sequence[SessionEvent]) -> Dimension | None:
    """The limit the last ``turn/end`` names when it ended ``budget-exhausted`` (rule 4)."""
    for event in reversed(events):
        if event.type != TURN_END:
            continue
        data = event.data
        if (
            not isinstance(data, Mapping)
            or data.get("reason") != TurnEndReason.BUDGET_EXHAUSTED.value
        ):
            return None
        limit = data.get("limit")
        return next((d for d in DIMENSIONS if d.value == limit), None)
    return None


__all__ = [
    "BUDGET_CHARGED",
    "BUDGET_SET",
    "CHARGED",
    "BudgetRecord",
    "budget_data",
    "charged_data",
    "decode_budget",
    "exhausted_limit",
    "fold_budget",
    "stored_remaining",
]
