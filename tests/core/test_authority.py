"""Authority decisions (AUTH-*): returned as data, never raised."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.authority import (
    ALLOWED,
    EMPTY_LINEAGE,
    AgentRef,
    AncestorInterrupt,
    Denied,
    Lineage,
    ParentAuthority,
    Presented,
    TargetFacts,
    UserAuthority,
    UserInterrupt,
    authorize_drain_children,
    authorize_followup,
    authorize_interrupt,
    authorize_question,
    authorize_report,
    interrupt_cause,
    live_lineage,
    live_roots,
)
from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.values import CancelKind, SessionId

P = SessionId("parent")
C = SessionId("child")
PARENT = AgentRef(P, 1)
GRAND = AgentRef(SessionId("grand"), 1)
CHILD = AgentRef(C, 7)


def test_auth_7_lineage_is_a_persistent_set_equal_to_any_set_with_its_members() -> None:
    parent = EMPTY_LINEAGE.with_member(GRAND).with_member(PARENT)
    child = parent.with_member(CHILD)
    assert len(parent) == 2  # adding to a lineage leaves it unchanged
    expected: AbstractSet[AgentRef] = frozenset({GRAND, PARENT, CHILD})
    assert child == expected
    assert expected == Lineage([CHILD, PARENT, GRAND])
    assert set(child) == {GRAND, PARENT, CHILD}
    assert CHILD in child
    assert CHILD not in parent
    not_a_ref: object = "parent"
    assert not_a_ref not in child
    assert hash(child) == hash(Lineage([GRAND, PARENT, CHILD]))
    assert not child.isdisjoint(frozenset({CHILD}))
    assert parent.isdisjoint(frozenset({CHILD}))
    assert child | {AgentRef(C, 8)} == frozenset({GRAND, PARENT, CHILD, AgentRef(C, 8)})
    assert repr(EMPTY_LINEAGE.with_member(CHILD)) == f"Lineage([{CHILD!r}])"


@given(st.lists(st.integers(0, 30), max_size=40))
def test_auth_7_lineage_with_member_agrees_with_a_frozenset(tokens: list[int]) -> None:
    lineage = EMPTY_LINEAGE
    plain: AbstractSet[AgentRef] = frozenset()
    for token in tokens:
        ref = AgentRef(SessionId(f"a{token % 7}"), token)
        lineage, plain = lineage.with_member(ref), plain | {ref}
        assert lineage == plain
        assert len(lineage) == len(plain)


def test_auth_1_exact_live_direct_parent_only() -> None:
    assert authorize_followup(ParentAuthority(Presented(PARENT, 1)), P) is ALLOWED
    stale = authorize_followup(ParentAuthority(Presented(PARENT, 2)), P)
    gone = authorize_followup(ParentAuthority(Presented(PARENT, None)), P)
    other = authorize_followup(ParentAuthority(Presented(GRAND, 1)), P)
    for decision in (stale, gone, other):
        assert isinstance(decision, Denied)
        assert decision.code is ErrorCode.UNAUTHORIZED
    assert isinstance(other, Denied)
    assert "another parent" in other.reason


def test_auth_2_inspected_header_decides_cold_resume() -> None:
    # The adapter asks once against the inspected header, again at admission.
    assert authorize_followup(ParentAuthority(Presented(PARENT, 1)), P) is ALLOWED
    replaced = ParentAuthority(Presented(PARENT, 3))
    assert isinstance(authorize_followup(replaced, P), Denied)
    assert isinstance(authorize_followup(ParentAuthority(Presented(PARENT, 1)), None), Denied)


def test_auth_4_user_grant_must_be_genuine() -> None:
    assert authorize_followup(UserAuthority(grant_genuine=True), None) is ALLOWED
    assert authorize_followup(UserAuthority(grant_genuine=True), P) is ALLOWED
    forged = authorize_followup(UserAuthority(grant_genuine=False), P)
    assert isinstance(forged, Denied)
    assert forged.code is ErrorCode.UNAUTHORIZED


def test_auth_5_user_interrupt_presents_durable_parent_address() -> None:
    target = TargetFacts(P, frozenset({CHILD, PARENT}))
    assert authorize_interrupt(C, UserInterrupt(P, grant_genuine=True), target) is ALLOWED
    wrong = authorize_interrupt(C, UserInterrupt(SessionId("x"), grant_genuine=True), target)
    assert isinstance(wrong, Denied)
    forged = authorize_interrupt(C, UserInterrupt(P, grant_genuine=False), target)
    assert isinstance(forged, Denied)


def test_auth_6_ancestor_interrupt_order() -> None:
    target = TargetFacts(P, frozenset({CHILD, PARENT, GRAND}))
    assert authorize_interrupt(C, AncestorInterrupt(Presented(GRAND, 1)), target) is ALLOWED
    # A stale caller is refused even when the target is absent.
    assert isinstance(authorize_interrupt(C, AncestorInterrupt(Presented(GRAND, 2)), None), Denied)
    # Self-target refused before lookup.
    self_target = authorize_interrupt(C, AncestorInterrupt(Presented(CHILD, 7)), None)
    assert isinstance(self_target, Denied)
    sibling = AgentRef(SessionId("sibling"), 1)
    assert isinstance(
        authorize_interrupt(C, AncestorInterrupt(Presented(sibling, 1)), target), Denied
    )


def test_auth_7_live_lineage_follows_registry_and_stops_at_gaps_and_cycles() -> None:
    headers = {P: SessionId("grand"), SessionId("grand"): SessionId("top")}
    registry = {SessionId("grand"): GRAND}
    assert frozenset(live_lineage(PARENT, headers, registry)) == frozenset({PARENT, GRAND})
    cyclic = {P: SessionId("grand"), SessionId("grand"): P}
    both = {P: PARENT, SessionId("grand"): GRAND}
    assert frozenset(live_lineage(PARENT, cyclic, both)) == frozenset({PARENT, GRAND})
    assert frozenset(live_lineage(PARENT, {}, {})) == frozenset({PARENT})


def test_auth_7_replacement_is_never_a_member() -> None:
    target = TargetFacts(P, frozenset({CHILD, PARENT}))
    replacement = AgentRef(P, 2)
    decision = authorize_interrupt(C, AncestorInterrupt(Presented(replacement, 2)), target)
    assert isinstance(decision, Denied)


def test_auth_8_interrupt_wider_than_delivery() -> None:
    target = TargetFacts(P, frozenset({CHILD, PARENT, GRAND}))
    assert authorize_interrupt(C, AncestorInterrupt(Presented(GRAND, 1)), target) is ALLOWED
    assert isinstance(authorize_followup(ParentAuthority(Presented(GRAND, 1)), P), Denied)
    assert interrupt_cause(UserInterrupt(P, grant_genuine=True)) is CancelKind.USER
    assert interrupt_cause(AncestorInterrupt(Presented(GRAND, 1))) is CancelKind.PARENT


def test_auth_9_report_only_from_exact_resident_child() -> None:
    assert authorize_report(CHILD, CHILD, closing=False) is ALLOWED
    assert isinstance(authorize_report(CHILD, None, closing=False), Denied)
    forged = authorize_report(AgentRef(C, 8), CHILD, closing=False)
    assert isinstance(forged, Denied)
    assert forged.code is ErrorCode.UNAUTHORIZED
    closing = authorize_report(CHILD, CHILD, closing=True)
    assert isinstance(closing, Denied)
    assert closing.code is ErrorCode.ACTIVATION_CLOSING


def test_auth_10_drain_children_all_or_nothing() -> None:
    mine = TargetFacts(P, frozenset({CHILD, PARENT}))
    theirs = TargetFacts(SessionId("other"), frozenset({PARENT}))
    not_in_lineage = TargetFacts(P, frozenset({CHILD}))
    assert authorize_drain_children(Presented(PARENT, 1), [mine, None]) is ALLOWED
    assert isinstance(authorize_drain_children(Presented(PARENT, 1), [mine, theirs]), Denied)
    assert isinstance(authorize_drain_children(Presented(PARENT, 1), [not_in_lineage]), Denied)
    assert isinstance(authorize_drain_children(Presented(PARENT, 9), [mine]), Denied)


def test_auth_11_scoped_drain_ignores_stale_roots() -> None:
    roots = [
        Presented(PARENT, 1),
        Presented(GRAND, 5),
        Presented(PARENT, 1),
        Presented(CHILD, None),
    ]
    assert live_roots(roots) == (PARENT,)


def test_auth_13_absent_target_is_an_allowed_noop_but_wrong_address_on_live_is_not() -> None:
    user = UserInterrupt(SessionId("wrong"), grant_genuine=True)
    assert authorize_interrupt(C, user, None) is ALLOWED
    assert isinstance(authorize_interrupt(C, user, TargetFacts(P, frozenset())), Denied)


@given(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 3)), st.booleans())
def test_auth_1_allowed_implies_exact_live_and_header_match(
    token: int, registry: int | None, header_is_parent: bool
) -> None:
    header = P if header_is_parent else SessionId("x")
    decision = authorize_followup(ParentAuthority(Presented(AgentRef(P, token), registry)), header)
    assert (decision is ALLOWED) == (registry == token and header_is_parent)


def test_ask_1_only_an_exact_live_root_may_ask_the_human() -> None:
    assert authorize_question(Presented(PARENT, 1), {PARENT}) is ALLOWED
    for stale in (None, Presented(PARENT, 2), Presented(PARENT, None)):
        refused = authorize_question(stale, {PARENT})
        assert isinstance(refused, Denied)
        assert refused.code is ErrorCode.UNAUTHORIZED
    owned = authorize_question(Presented(CHILD, 7), {PARENT})
    assert isinstance(owned, Denied)
    assert owned.code is ErrorCode.DELEGATED_CALLER
    assert "final result" in owned.reason


def test_ask_2_authority_is_runtime_ownership_not_lineage() -> None:
    # A resumed child with lineage but no live owner is a root; a live owned child is not.
    assert authorize_question(Presented(CHILD, 7), {CHILD}) is ALLOWED
    assert isinstance(authorize_question(Presented(CHILD, 7), set()), Denied)
    # A same-id replacement of a root is not that root.
    assert isinstance(authorize_question(Presented(AgentRef(C, 8), 8), {CHILD}), Denied)
