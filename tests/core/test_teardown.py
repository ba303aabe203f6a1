"""Child-first teardown planning, failure aggregation and durability (TEAR-*)."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping

from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.teardown import (
    Boundary,
    DurabilityReport,
    FlushOutcome,
    aggregate_branches,
    boundary_failure,
    combine_failures,
    durability_report,
    forest_roots,
    plan_teardown,
    teardown_failure,
)
from dsh_subagent.core.values import SessionId

Forest = Mapping[SessionId, Collection[SessionId]]


def s(name: str | int) -> SessionId:
    return SessionId(str(name))


def tree() -> Forest:
    return {
        s("a"): [s("b"), s("c")],
        s("b"): [s("d")],
        s("c"): [],
        s("d"): [],
        s("x"): [],
    }


def test_tear_3_cancel_top_down_release_bottom_up() -> None:
    plan = plan_teardown(tree(), [s("a")])
    assert plan.cancel_order == (s("a"), s("b"), s("d"), s("c"))
    assert plan.release_order == (s("d"), s("b"), s("c"), s("a"))


def test_tear_11_absent_and_duplicate_roots_are_noops() -> None:
    plan = plan_teardown(tree(), [s("missing"), s("c"), s("c"), s("x")])
    assert plan.cancel_order == (s("c"), s("x"))
    # Owned ids that are no longer live are skipped.
    assert plan_teardown({s("p"): [s("gone")]}, [s("p")]).release_order == (s("p"),)


def test_tear_13_forest_roots_are_unowned_activations() -> None:
    assert forest_roots(tree()) == (s("a"), s("x"))


@st.composite
def forests(draw: st.DrawFn) -> dict[SessionId, list[SessionId]]:
    size = draw(st.integers(1, 30))
    forest: dict[SessionId, list[SessionId]] = {s(n): [] for n in range(size)}
    for node in range(1, size):
        parent = draw(st.one_of(st.none(), st.integers(0, node - 1)))
        if parent is not None:
            forest[s(parent)].append(s(node))
    return forest


@given(forests())
def test_tear_3_every_child_released_before_its_parent(
    forest: dict[SessionId, list[SessionId]],
) -> None:
    plan = plan_teardown(forest, forest_roots(forest))
    assert sorted(plan.cancel_order) == sorted(forest)
    cancel_at = {node: i for i, node in enumerate(plan.cancel_order)}
    release_at = {node: i for i, node in enumerate(plan.release_order)}
    for parent, children in forest.items():
        for child in children:
            assert cancel_at[parent] < cancel_at[child]
            assert release_at[child] < release_at[parent]


def test_tear_3_deep_chain_plans_without_recursion() -> None:
    depth = sys.getrecursionlimit() * 20
    chain = {s(n): [s(n + 1)] for n in range(depth)}
    chain[s(depth)] = []
    plan = plan_teardown(chain, [s(0)])
    assert plan.release_order[0] == s(depth)
    assert plan.release_order[-1] == s(0)
    assert len(plan.cancel_order) == depth + 1


def test_tear_5_one_failure_as_is_several_wrapped_with_count() -> None:
    assert combine_failures([]) is None
    one = boundary_failure(Boundary.HANDLE, "boom")
    assert combine_failures([one]) is one
    assert one.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
    assert "handle disposal failed" in one.message
    two = combine_failures([one, boundary_failure(Boundary.CHILDREN, "child x")])
    assert two is not None
    assert two.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
    assert "failed at 2 boundaries" in two.message
    assert isinstance(two.cause, ExceptionGroup)
    assert len(two.cause.exceptions) == 2


def test_tear_12_root_disposal_aggregates_every_failed_branch() -> None:
    assert aggregate_branches("scoped", []) is None
    failures = [SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, f"b{n}") for n in range(3)]
    error = aggregate_branches("whole manager", failures)
    assert error is not None
    assert error.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
    assert "whole manager" in error.message
    assert "3 branch" in error.message
    assert all(f"b{n}" in error.message for n in range(3))


def test_tear_12_a_branch_failure_stays_typed_and_a_raw_one_is_wrapped() -> None:
    typed = SubagentError(ErrorCode.DURABILITY_FAILED, "flush refused")
    assert teardown_failure(typed) is typed
    raw = OSError("disk gone")
    wrapped = teardown_failure(raw)
    assert wrapped.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
    assert wrapped.cause is raw
    assert "disk gone" in wrapped.message


def test_tear_4_flush_false_or_raise_reports_durability_failed() -> None:
    assert durability_report(s("c"), FlushOutcome.OK) is None
    for outcome in (FlushOutcome.UNCONFIRMED, FlushOutcome.FAILED):
        report = durability_report(s("c"), outcome)
        assert report == DurabilityReport(s("c"), outcome)
        assert report.code is ErrorCode.DURABILITY_FAILED
        assert "stale" in report.message
