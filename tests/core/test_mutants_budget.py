"""Budget rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dsh_subagent.core import budget as b
from dsh_subagent.core.budget import Amounts, Budget, Exhausted, Ledger
from dsh_subagent.core.budget_log import (
    BUDGET_CHARGED,
    BUDGET_SET,
    budget_data,
    charged_data,
    decode_budget,
    fold_budget,
    stored_remaining,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import JsonValue, SessionEvent

ONE_REQUEST = Amounts(model_requests=1)


def _refusal(call: Callable[..., object], *args: object) -> tuple[ErrorCode, str | None, str]:
    with pytest.raises(SubagentError) as caught:
        call(*args)
    return caught.value.code, caught.value.field, caught.value.message


def test_budget_1_a_budget_that_is_not_a_budget_is_refused_naming_the_field() -> None:
    assert _refusal(b.validate_budget, {"model_requests": 1}, "request.budget") == (
        ErrorCode.INVALID_ARGUMENT,
        "request.budget",
        "request.budget: must be a Budget",
    )


def test_budget_8_an_unknown_or_duplicate_node_is_refused_naming_the_node() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(), 0)
    assert _refusal(b.open_root, ledger, "root", Budget(), 0) == (
        ErrorCode.DUPLICATE_CHILD,
        "node",
        "budget node 'root' is already open",
    )
    assert _refusal(b.caps, ledger, "ghost") == (
        ErrorCode.NOT_FOUND,
        "node",
        "no open budget node 'ghost'",
    )


def test_budget_7_a_child_opened_past_its_parents_deadline_names_the_parent() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(wall_ms=10), 0)
    assert _refusal(b.open_child, ledger, "root", "kid", Budget(), 10) == (
        ErrorCode.BUDGET_EXHAUSTED,
        "budget.wall_ms",
        "the budget of 'root' is exhausted: no wall_ms left",
    )


def test_budget_8_reservations_get_distinct_ids_and_each_settles_once() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    grants = []
    for _ in range(3):
        result = b.reserve(ledger, "root", ONE_REQUEST, ONE_REQUEST, 0)
        assert not isinstance(result, Exhausted)
        ledger, grant = result
        grants.append(grant)
    assert len({grant.id for grant in grants}) == 3
    for grant in grants:
        ledger = b.settle(ledger, grant, None)
    assert ledger.reservations == {}
    assert ledger.nodes["root"].own[0] == b.Account(limit=3, consumed=3)


def test_budget_15_a_negative_folded_charge_is_refused_naming_the_dimension() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(output_tokens=5), 0)
    assert _refusal(b.charge, ledger, "root", Amounts(output_tokens=-3)) == (
        ErrorCode.INVALID_ARGUMENT,
        "used.output_tokens",
        "used.output_tokens: must be non-negative, got -3",
    )


def test_budget_14_caps_report_each_owned_dimension_in_place() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(1, 2, 3, 40), 0)
    assert b.caps(ledger, "root") == Budget(1, 2, 3, None)


def test_budget_14_a_bad_raise_is_refused_naming_the_field_and_the_payer() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=3), 0)
    ledger = b.open_child(ledger, "root", "shared", Budget(), 0)
    assert _refusal(b.raise_caps, ledger, "kid", Budget(input_tokens=-1), 0) == (
        ErrorCode.INVALID_ARGUMENT,
        "budget.input_tokens",
        "budget.input_tokens: must be a non-negative integer or None, got -1",
    )
    assert _refusal(b.raise_caps, ledger, "shared", Budget(model_requests=4), 0) == (
        ErrorCode.INVALID_ARGUMENT,
        "budget.model_requests",
        "budget.model_requests: 'shared' has no cap of its own here; raise its payer's",
    )
    assert _refusal(b.raise_caps, ledger, "kid", Budget(model_requests=4), 0) == (
        ErrorCode.BUDGET_EXHAUSTED,
        "budget.model_requests",
        "the budget of 'root' is exhausted: no model_requests left",
    )


def test_budget_14_each_owned_dimension_is_raised_on_its_own_even_by_one() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=2, input_tokens=5), 0)
    raised = b.raise_caps(ledger, "root", Budget(input_tokens=6), 0)
    assert b.caps(raised, "root") == Budget(model_requests=2, input_tokens=6)
    raised = b.raise_caps(raised, "root", Budget(model_requests=2, input_tokens=9), 0)
    assert b.caps(raised, "root") == Budget(model_requests=2, input_tokens=9)


def test_budget_14_a_raised_deadline_never_passes_the_parents() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(wall_ms=100), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(wall_ms=10), 0)
    raised = b.raise_caps(ledger, "kid", Budget(wall_ms=500), 20)
    assert raised.nodes["kid"].deadline_ms == 100
    assert b.raise_caps(ledger, "root", Budget(wall_ms=500), 20).nodes["root"].deadline_ms == 520


def test_budget_15_a_zero_cap_in_the_log_decodes() -> None:
    assert decode_budget({"model_requests": 0, "wall_ms": 0}, "d") == Budget(0, None, None, 0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], "budget: must be an object"),
        ({"coffee": 1}, "budget.coffee: is not a budget dimension"),
        ({"input_tokens": -1}, "budget.input_tokens: must be a non-negative integer, got -1"),
    ],
)
def test_budget_15_a_damaged_budget_names_its_reason(data: JsonValue, message: str) -> None:
    assert _refusal(decode_budget, data, "budget")[2] == message


def test_budget_15_a_damaged_charge_is_a_corrupt_session_naming_the_record() -> None:
    damaged = [SessionEvent(BUDGET_CHARGED, 3, 0.0, "x")]
    assert _refusal(fold_budget, damaged) == (
        ErrorCode.CORRUPT_SESSION,
        "events[3].data",
        "INVALID_ARGUMENT [events[3].data]: events[3].data: not an object",
    )


# The whole-core run at 7d8972a (docs/mutation.md): the tree's carve and counters.


def _reserve(
    ledger: Ledger, node: str, want: Amounts = ONE_REQUEST
) -> tuple[Ledger, b.Reservation]:
    result = b.reserve(ledger, node, want, want, 0)
    assert not isinstance(result, Exhausted)
    return result


def test_budget_8_reservation_ids_stay_distinct_across_every_ledger_operation() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=20), 0)
    ledger = b.open_root(ledger, "other", Budget(model_requests=1), 0)
    ledger, first = _reserve(ledger, "root")  # stays outstanding throughout
    ids = [first]
    steps: list[Callable[[Ledger], Ledger]] = [
        lambda led: b.open_child(led, "root", "kid", Budget(model_requests=2), 0),
        lambda led: b.close(led, "kid"),
        lambda led: b.close(led, "other"),  # a root's close keeps the others' reservations
        lambda led: b.join(led, "root", 0),
        lambda led: b.leave(led, "root"),
        lambda led: b.charge(led, "root", ONE_REQUEST),
        lambda led: b.settle(led, ids[-1], None),
    ]
    for step in steps:
        ledger, grant = _reserve(step(ledger), "root")
        ids.append(grant)
    assert len({grant.id for grant in ids}) == len(ids)
    assert len(ledger.reservations) == len(ids) - 1  # one settled: none overwritten
    assert ledger.reservations[first.id] == first


def test_budget_3_a_payers_carve_survives_its_own_reservations_and_settlements() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=4), 0)
    ledger, grant = _reserve(ledger, "root")
    assert b.remaining(ledger, "root").model_requests == 10 - 4 - 1
    ledger = b.settle(ledger, grant, None)
    assert b.remaining(ledger, "root").model_requests == 10 - 4 - 1
    assert ledger.nodes["root"].own[0] == b.Account(limit=10, consumed=1, carved=4)


def test_budget_6_closing_a_child_keeps_the_payers_reservations_and_other_carves() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "a", Budget(model_requests=4), 0)
    ledger = b.open_child(ledger, "root", "b", Budget(model_requests=3), 0)
    ledger, _ = _reserve(ledger, "root")
    ledger = b.close(ledger, "a")
    assert ledger.nodes["root"].own[0] == b.Account(limit=10, reserved=1, carved=3)


def test_budget_3_a_grandchild_carves_from_a_payer_above_its_uncapped_parent() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "mid", Budget(), 0)  # shares root's account
    ledger = b.open_child(ledger, "mid", "leaf", Budget(model_requests=4), 0)
    assert ledger.nodes["root"].own[0] == b.Account(limit=10, carved=4)
    ledger, grant = _reserve(ledger, "leaf")
    ledger = b.close(b.settle(ledger, grant, None), "leaf")
    assert ledger.nodes["root"].own[0] == b.Account(limit=10, consumed=1)


def test_budget_6_open_and_joined_children_are_counted_until_each_ends() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2), 0)
    ledger = b.join(ledger, "root", 0)
    assert ledger.nodes["root"].open_children == 2
    ledger = b.close(ledger, "kid")
    assert ledger.nodes["root"].open_children == 1
    assert _refusal(b.close, ledger, "root")[0] is ErrorCode.ILLEGAL_TRANSITION
    ledger = b.leave(ledger, "root")
    assert ledger.nodes["root"].open_children == 0
    assert "root" not in b.close(ledger, "root").nodes


def test_budget_10_a_join_keeps_the_nodes_parent_deadline_and_reservations() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10, wall_ms=100), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2), 0)
    ledger, grant = _reserve(ledger, "kid")
    ledger = b.leave(b.join(ledger, "kid", 0), "kid")
    assert ledger.nodes["kid"] == b.Node(
        "root",
        ledger.nodes["kid"].own,
        ("kid", None, None),
        100,
        open_children=0,
        outstanding=grant,  # a lone reservation is kept as it is
    )
    assert ledger.nodes["kid"].reservations == PMap({grant.id: grant})
    assert _refusal(b.close, ledger, "kid")[0] is ErrorCode.ILLEGAL_TRANSITION
    assert b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 100) == Exhausted(
        b.Dimension.WALL_TIME
    )
    ledger = b.close(b.settle(ledger, grant, None), "kid")
    assert ledger.nodes["root"].open_children == 0


def test_budget_10_a_join_past_the_deadline_and_a_leave_without_a_join_name_the_node() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(wall_ms=10), 0)
    assert _refusal(b.join, ledger, "root", 10) == (
        ErrorCode.BUDGET_EXHAUSTED,
        "budget.wall_ms",
        "the budget of 'root' is exhausted: no wall_ms left",
    )
    assert _refusal(b.leave, ledger, "root") == (
        ErrorCode.ILLEGAL_TRANSITION,
        "node",
        "budget node 'root' has no open child",
    )


def test_budget_16_a_stored_input_token_cap_folds_its_remaining() -> None:
    events = [
        SessionEvent(BUDGET_SET, 0, 0.0, budget_data(Budget(input_tokens=100))),
        SessionEvent(BUDGET_CHARGED, 1, 0.0, charged_data(Amounts(1, 30, 2))),
    ]
    assert stored_remaining(events) == Budget(input_tokens=70)


ONE_EACH = Amounts(1, 1, 1)


# Issue 25's third round (reserve's inline grant, its whole-grant shortcut, the lookups
# inlined in reserve, join and leave).


def test_budget_6_a_partial_grant_is_what_was_granted_never_the_want() -> None:
    caps = Budget(model_requests=9, input_tokens=3, output_tokens=9)
    result = b.reserve(b.open_root(Ledger(), "a", caps, 0), "a", Amounts(1, 5, 3), ONE_EACH, 0)
    assert not isinstance(result, Exhausted)
    assert result[1].granted == Amounts(1, 3, 3)
    caps = Budget(model_requests=1, input_tokens=9, output_tokens=9)
    result = b.reserve(b.open_root(Ledger(), "b", caps, 0), "b", Amounts(2, 1, 3), ONE_EACH, 0)
    assert not isinstance(result, Exhausted)
    assert result[1].granted == Amounts(1, 1, 3)


def test_budget_3_a_payers_carve_bounds_its_own_grants() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(output_tokens=5), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(output_tokens=4), 0)
    want, least = Amounts(output_tokens=5), Amounts(output_tokens=1)
    result = b.reserve(ledger, "root", want, least, 0)
    assert not isinstance(result, Exhausted)
    assert result[1].granted.output_tokens == 1


def test_budget_8_reserve_join_and_leave_name_an_unknown_node() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=1), 0)
    refused = (ErrorCode.NOT_FOUND, "node", "no open budget node 'nobody'")
    assert _refusal(b.reserve, ledger, "nobody", ONE_REQUEST, ONE_REQUEST, 0) == refused
    assert _refusal(b.join, ledger, "nobody", 0) == refused
    assert _refusal(b.leave, ledger, "nobody") == refused


def test_budget_8_a_node_holding_its_reservations_in_a_map_settles_them_all() -> None:
    # a node built with its lone reservation in a map (any form a caller may build)
    # settles it to none: x__kept__mutmut_4
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    ledger, grant = _reserve(ledger, "root")
    node = ledger.nodes["root"]
    in_map = ledger._replace(
        nodes=ledger.nodes.set("root", node._replace(outstanding=PMap({grant.id: grant})))
    )
    settled = b.settle(in_map, grant, None)
    assert not settled.nodes["root"].outstanding
    assert "root" not in b.close(settled, "root").nodes


def test_budget_8_a_reservation_of_a_closed_node_is_not_outstanding() -> None:
    # x_settle__mutmut_5: the node's absence is checked before its reservations are read
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=1), 0)
    _, grant = _reserve(ledger, "kid")
    closed = b.close(ledger, "kid")  # the reservation was never made on this ledger
    assert _refusal(b.settle, closed, grant, None) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "reservation",
        f"reservation {grant.id} is not outstanding",
    )
