"""Tree budgets in the pure core: carving, reservation, settlement and closing."""

from __future__ import annotations

import pytest

from dsh_subagent.core import budget as b
from dsh_subagent.core.budget import Amounts, Budget, Dimension, Exhausted, Ledger
from dsh_subagent.core.errors import ErrorCode, SubagentError

ONE_REQUEST = Amounts(model_requests=1)


def code_of(call: object) -> ErrorCode:
    assert callable(call)
    with pytest.raises(SubagentError) as caught:
        call()
    return caught.value.code


def reserved(result: tuple[Ledger, b.Reservation] | Exhausted) -> tuple[Ledger, b.Reservation]:
    assert not isinstance(result, Exhausted), result
    return result


def test_budget_1_caps_are_validated_naming_the_dimension() -> None:
    with pytest.raises(SubagentError) as caught:
        b.open_root(Ledger(), "root", Budget(input_tokens=-1), 0)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "budget.input_tokens"
    with pytest.raises(SubagentError) as caught:
        b.validate_budget(Budget(model_requests=True), "request.budget")
    assert caught.value.field == "request.budget.model_requests"
    with pytest.raises(SubagentError) as caught:
        b.validate_budget({"model_requests": 1}, "request.budget")
    assert caught.value.field == "request.budget"


def test_budget_2_a_child_carves_its_cap_and_returns_the_unused_part_on_close() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=4), 0)
    assert b.remaining(ledger, "root").model_requests == 6
    ledger, grant = reserved(b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 0))
    ledger = b.settle(ledger, grant, ONE_REQUEST)
    assert b.remaining(ledger, "kid").model_requests == 3
    ledger = b.close(ledger, "kid")
    assert b.remaining(ledger, "root").model_requests == 9
    assert b.close(ledger, "root").nodes == {}


def test_budget_3_carving_is_clamped_to_what_is_left_and_refused_when_nothing_is() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(output_tokens=100), 0)
    ledger = b.open_child(ledger, "root", "a", Budget(output_tokens=80), 0)
    ledger = b.open_child(ledger, "root", "b", Budget(output_tokens=80), 0)
    assert b.remaining(ledger, "b").output_tokens == 20
    assert code_of(lambda: b.open_child(ledger, "root", "c", Budget(output_tokens=1), 0)) is (
        ErrorCode.BUDGET_EXHAUSTED
    )
    zero = b.open_child(ledger, "root", "z", Budget(output_tokens=0), 0)
    assert b.remaining(zero, "z").output_tokens == 0


def test_budget_4_an_uncapped_child_shares_its_payers_account() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=2), 0)
    ledger = b.open_child(ledger, "root", "a", Budget(), 0)
    ledger = b.open_child(ledger, "a", "a1", Budget(), 0)
    ledger, first = reserved(b.reserve(ledger, "a1", ONE_REQUEST, ONE_REQUEST, 0))
    ledger, second = reserved(b.reserve(ledger, "root", ONE_REQUEST, ONE_REQUEST, 0))
    assert b.reserve(ledger, "a", ONE_REQUEST, ONE_REQUEST, 0) == Exhausted(
        Dimension.MODEL_REQUESTS
    )
    ledger = b.settle(ledger, first, Amounts())
    assert b.remaining(ledger, "a").model_requests == 1
    ledger = b.settle(ledger, second, None)
    ledger = b.close(b.close(ledger, "a1"), "a")
    assert b.remaining(ledger, "root").model_requests == 1


def test_budget_4_a_joined_child_meters_through_its_parent_which_cannot_close_under_it() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3, wall_ms=10), 0)
    ledger = b.open_child(ledger, "root", "a", Budget(), 0)
    joined = b.join(ledger, "a", 5)  # a child asking for nothing: no node of its own
    assert set(joined.nodes) == {"root", "a"}
    assert code_of(lambda: b.close(joined, "a")) is ErrorCode.ILLEGAL_TRANSITION
    joined, grant = reserved(b.reserve(joined, "a", ONE_REQUEST, ONE_REQUEST, 5))
    joined = b.settle(joined, grant, ONE_REQUEST)
    left = b.leave(joined, "a")
    assert b.remaining(b.close(left, "a"), "root").model_requests == 2
    assert code_of(lambda: b.leave(left, "a")) is ErrorCode.ILLEGAL_TRANSITION
    assert code_of(lambda: b.join(ledger, "a", 10)) is ErrorCode.BUDGET_EXHAUSTED
    assert code_of(lambda: b.join(ledger, "nobody", 0)) is ErrorCode.NOT_FOUND


def test_budget_5_an_own_cap_under_an_uncapped_parent_is_the_childs_own() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(input_tokens=50), 0)
    assert b.remaining(ledger, "root") == Budget()
    ledger, grant = reserved(
        b.reserve(ledger, "kid", Amounts(input_tokens=40), Amounts(input_tokens=40), 0)
    )
    assert grant.granted.input_tokens == 40
    assert b.reserve(ledger, "kid", Amounts(input_tokens=20), Amounts(input_tokens=20), 0) == (
        Exhausted(Dimension.INPUT_TOKENS)
    )
    ledger = b.close(b.settle(ledger, grant, Amounts(input_tokens=30)), "kid")
    assert b.remaining(ledger, "root") == Budget()


def test_budget_6_output_grants_shrink_to_what_is_left_and_are_all_or_nothing() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=5, output_tokens=10), 0)
    want = Amounts(model_requests=1, output_tokens=8)
    least = Amounts(model_requests=1, output_tokens=1)
    ledger, first = reserved(b.reserve(ledger, "root", want, least, 0))
    ledger, second = reserved(b.reserve(ledger, "root", want, least, 0))
    assert second.granted == Amounts(model_requests=1, output_tokens=2)
    before = ledger
    assert b.reserve(ledger, "root", want, least, 0) == Exhausted(Dimension.OUTPUT_TOKENS)
    assert b.remaining(before, "root").model_requests == 3
    assert first.granted.output_tokens == 8


def test_budget_6_reserve_grants_what_grant_from_grants() -> None:
    """``reserve`` computes ``grant_from`` inline: the same grant or refusal, also for a
    payer overdrawn by usage past its grants (its remaining below zero)."""
    for limit in range(4):
        for spent in range(limit + 3):
            ledger = b.open_root(Ledger(), "root", Budget(output_tokens=limit), 0)
            ledger = b.charge(ledger, "root", Amounts(output_tokens=spent))
            left = limit - spent
            for wanted in range(4):
                for least in range(wanted + 1):
                    want, at_least = Amounts(output_tokens=wanted), Amounts(output_tokens=least)
                    result = b.reserve(ledger, "root", want, at_least, 0)
                    expected = b.grant_from(left, wanted, least)
                    if expected is None:
                        assert result == Exhausted(Dimension.OUTPUT_TOKENS)
                    else:
                        assert reserved(result)[1].granted.output_tokens == expected
    ledger = b.open_root(Ledger(), "root", Budget(output_tokens=5), 0)
    for wanted in range(8):
        for least in range(wanted + 1):
            want, at_least = Amounts(output_tokens=wanted), Amounts(output_tokens=least)
            result = b.reserve(ledger, "root", want, at_least, 0)
            expected = b.grant_from(5, wanted, least)
            granted = None if isinstance(result, Exhausted) else result[1].granted
            assert granted == (None if expected is None else Amounts(output_tokens=expected))


def test_budget_7_wall_time_is_a_deadline_never_past_the_parents() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(wall_ms=1_000), 100)
    ledger = b.open_child(ledger, "root", "kid", Budget(wall_ms=5_000), 200)
    assert ledger.nodes["kid"].deadline_ms == 1_100
    ledger = b.open_child(ledger, "root", "quick", Budget(wall_ms=10), 200)
    assert ledger.nodes["quick"].deadline_ms == 210
    assert isinstance(b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 1_099), tuple)
    assert b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 1_100) == Exhausted(
        Dimension.WALL_TIME
    )
    assert code_of(lambda: b.open_child(ledger, "root", "late", Budget(), 1_100)) is (
        ErrorCode.BUDGET_EXHAUSTED
    )
    free = b.open_root(Ledger(), "r", Budget(wall_ms=None), 0)
    free = b.open_child(free, "r", "k", Budget(wall_ms=7), 3)
    assert free.nodes["k"].deadline_ms == 10


def test_budget_8_misuse_is_typed() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(), 0)
    assert code_of(lambda: b.open_root(ledger, "root", Budget(), 0)) is ErrorCode.DUPLICATE_CHILD
    assert code_of(lambda: b.open_child(ledger, "nobody", "x", Budget(), 0)) is (
        ErrorCode.NOT_FOUND
    )
    assert code_of(lambda: b.close(ledger, "root")) is ErrorCode.ILLEGAL_TRANSITION
    never = b.Reservation(99, "root", Amounts())
    assert code_of(lambda: b.settle(ledger, never, None)) is ErrorCode.ILLEGAL_TRANSITION
    bad = Amounts(model_requests=2)
    assert code_of(lambda: b.reserve(ledger, "kid", ONE_REQUEST, bad, 0)) is (
        ErrorCode.INVALID_ARGUMENT
    )
    held, grant = reserved(b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 0))
    assert code_of(lambda: b.close(held, "kid")) is ErrorCode.ILLEGAL_TRANSITION
    negative = Amounts(model_requests=-1)
    assert code_of(lambda: b.settle(held, grant, negative)) is ErrorCode.INVALID_ARGUMENT
    forged = grant._replace(granted=Amounts(model_requests=5))  # not the one reserved
    assert code_of(lambda: b.settle(held, forged, None)) is ErrorCode.ILLEGAL_TRANSITION
    assert code_of(lambda: b.settle(held, grant._replace(node="root"), None)) is (
        ErrorCode.ILLEGAL_TRANSITION
    )


def test_budget_9_usage_past_a_grant_is_charged_not_hidden() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(input_tokens=10), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(input_tokens=5), 0)
    ledger, grant = reserved(
        b.reserve(ledger, "kid", Amounts(input_tokens=5), Amounts(input_tokens=5), 0)
    )
    ledger = b.close(b.settle(ledger, grant, Amounts(input_tokens=9)), "kid")
    assert b.remaining(ledger, "root").input_tokens == 1


def test_budget_10_pure_helpers_honour_their_bounds() -> None:
    assert b.grant_from(5, 8, 1) == 5
    assert b.grant_from(1, 8, 1) == 1
    assert b.grant_from(-3, 8, 1) is None
    assert b.grant_from(0, 0, 0) == 0
    assert b.carve_from(0, 0) == 0
    assert b.carve_from(-1, 4) is None
    assert b.child_deadline(10, None, None) is None
    assert b.child_deadline(10, 5, None) == 15


def test_budget_14_the_host_raises_owned_caps_carving_the_extra_from_the_payer() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10, output_tokens=5), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2, wall_ms=50), 0)
    assert b.short_of(ledger, "kid", 0) is None
    ledger, grant = reserved(b.reserve(ledger, "kid", ONE_REQUEST, ONE_REQUEST, 0))
    ledger = b.settle(ledger, grant, ONE_REQUEST)
    ledger = b.charge(ledger, "kid", Amounts(model_requests=1, output_tokens=0))
    assert b.short_of(ledger, "kid", 0) is Dimension.MODEL_REQUESTS
    assert b.short_of(ledger, "kid", 50) is Dimension.WALL_TIME
    raised = b.raise_caps(ledger, "kid", Budget(model_requests=5, wall_ms=100), 10)
    assert b.caps(raised, "kid") == Budget(model_requests=5)
    assert b.remaining(raised, "root").model_requests == 5
    assert raised.nodes["kid"].deadline_ms == 110
    assert b.short_of(raised, "kid", 60) is None
    same = b.raise_caps(raised, "kid", Budget(model_requests=1, wall_ms=1), 10)
    assert b.caps(same, "kid") == Budget(model_requests=5)
    assert same.nodes["kid"].deadline_ms == 110
    assert b.raise_caps(raised, "root", Budget(model_requests=20), 0).nodes["root"].own[0] == (
        b.Account(limit=20, carved=5)
    )
    free = b.open_root(Ledger(), "r", Budget(model_requests=1), 0)
    assert b.raise_caps(free, "r", Budget(wall_ms=5), 0).nodes["r"].deadline_ms is None


def test_budget_14_raising_is_refused_when_the_payer_is_short_or_the_cap_is_shared() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2), 0)
    ledger = b.open_child(ledger, "root", "shared", Budget(), 0)
    assert code_of(lambda: b.raise_caps(ledger, "kid", Budget(model_requests=4), 0)) is (
        ErrorCode.BUDGET_EXHAUSTED
    )
    with pytest.raises(SubagentError) as caught:
        b.raise_caps(ledger, "shared", Budget(model_requests=4), 0)
    assert caught.value.field == "budget.model_requests"
    assert code_of(lambda: b.charge(ledger, "kid", Amounts(input_tokens=-1))) is (
        ErrorCode.INVALID_ARGUMENT
    )
    assert b.charge(ledger, "shared", Amounts(model_requests=1)).nodes["root"].own[0] == (
        b.Account(limit=3, consumed=1, carved=2)
    )
    assert b.charge(ledger, "kid", Amounts(input_tokens=7)) == ledger


def test_budget_11_a_node_keeps_plain_rows_read_as_accounts() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3, output_tokens=9), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2), 0)
    ledger, _ = reserved(b.reserve(ledger, "root", Amounts(1, 0, 4), Amounts(1, 0, 1), 0))
    root = ledger.nodes["root"]
    assert root.own == ((3, 0, 1, 2), None, (9, 0, 4, 0))
    assert type(root.own[0]) is tuple  # a row, not a named tuple (rule 11)
    first, second, third = root.accounts
    assert first == b.Account(limit=3, reserved=1, carved=2)
    assert first.remaining == 0
    assert second is None
    assert third == b.Account(limit=9, reserved=4)
    assert third.remaining == 5
    assert ledger.nodes["kid"].accounts == (b.Account(limit=2), None, None)


def test_budget_8_a_lone_reservation_is_kept_as_it_is_more_in_a_map() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=5), 0)
    assert not ledger.nodes["root"].outstanding
    one, first = reserved(b.reserve(ledger, "root", ONE_REQUEST, ONE_REQUEST, 0))
    assert one.nodes["root"].outstanding is first
    assert one.nodes["root"].reservations == {first.id: first}
    two, second = reserved(b.reserve(one, "root", ONE_REQUEST, ONE_REQUEST, 0))
    assert two.nodes["root"].reservations == {first.id: first, second.id: second}
    assert two.reservations == {first.id: first, second.id: second}
    assert code_of(lambda: b.close(two, "root")) is ErrorCode.ILLEGAL_TRANSITION
    forged = second._replace(granted=Amounts(model_requests=2))
    assert code_of(lambda: b.settle(two, forged, None)) is ErrorCode.ILLEGAL_TRANSITION
    left = b.settle(two, first, None)
    assert left.nodes["root"].outstanding is second  # back to a lone one
    assert code_of(lambda: b.settle(left, first, None)) is ErrorCode.ILLEGAL_TRANSITION
    assert code_of(lambda: b.settle(left, forged, None)) is ErrorCode.ILLEGAL_TRANSITION
    none = b.settle(left, second, ONE_REQUEST)
    assert not none.nodes["root"].outstanding
    assert none.nodes["root"].reservations == {}
    assert code_of(lambda: b.settle(none, second, None)) is ErrorCode.ILLEGAL_TRANSITION
    assert b.remaining(none, "root").model_requests == 3
    three, third = reserved(b.reserve(none, "root", ONE_REQUEST, ONE_REQUEST, 0))
    assert three.nodes["root"].outstanding is third
    assert "root" not in b.close(b.settle(three, third, None), "root").nodes


def test_budget_14_raised_caps_stay_plain_rows() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=10), 0)
    ledger = b.open_child(ledger, "root", "kid", Budget(model_requests=2), 0)
    ledger = b.raise_caps(ledger, "kid", Budget(model_requests=4), 0)
    assert ledger.nodes["kid"].own[0] == (4, 0, 0, 0)
    assert ledger.nodes["root"].own[0] == (10, 0, 0, 4)
    assert type(ledger.nodes["kid"].own[0]) is tuple  # a row, not an ``Account`` (rule 11)
    assert type(ledger.nodes["root"].own[0]) is tuple
