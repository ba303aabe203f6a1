"""Lifecycle rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from dsh_subagent.core import budget as b
from dsh_subagent.core import lifecycle
from dsh_subagent.core.authority import (
    AgentRef,
    AncestorInterrupt,
    Denied,
    Lineage,
    TargetFacts,
    UserInterrupt,
    authorize_interrupt,
    live_lineage,
)
from dsh_subagent.core.budget import Amounts, Budget, Ledger
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager.effects import (
    AwaitBranches,
    AwaitRelease,
    CancelAgent,
    DeliverReport,
    Effect,
    EmitEnd,
    FlushSession,
    PostToMailbox,
    Reject,
    ReleaseOwnership,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager.events import (
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    ColdResumeStarted,
    DescendantsOf,
    DescriptorSnapshotted,
    DrainRequested,
    FollowupRequested,
    InterruptRequested,
    LeaseRefused,
    MailboxArrived,
    Phase,
    ReportDelivery,
    ReportRequested,
    SelectedChildren,
    WholeManager,
)
from dsh_subagent.core.manager.state import activation_state_of
from dsh_subagent.core.notices import EpochOutcome, NoticeRoute, notice_content, notice_source
from dsh_subagent.core.teardown import (
    Boundary,
    aggregate_branches,
    boundary_failure,
    combine_failures,
    plan_teardown,
)
from dsh_subagent.core.values import (
    CancelKind,
    EventId,
    KnownStop,
    MessageId,
    RunId,
    SessionId,
    TextBlock,
)
from tests.core.test_budget import ONE_REQUEST, reserved
from tests.core.test_manager import (
    ROOT,
    Driver,
    agent,
    as_parent,
    eid,
    finish,
    kinds,
    live,
    settle,
    sid,
)

A, B, C, D = (SessionId(name) for name in "abcd")


def test_tear_3_a_child_reachable_twice_is_planned_once() -> None:
    plan = plan_teardown({A: [B, C], B: [D], C: [D], D: []}, [A])
    assert plan.cancel_order == (A, B, D, C)
    assert plan.release_order == (D, B, C, A)


def test_tear_5_several_boundary_failures_are_grouped_in_order() -> None:
    failures = [boundary_failure(Boundary.HANDLE, "x"), boundary_failure(Boundary.CHILDREN, "y")]
    combined = combine_failures(failures)
    assert combined is not None
    assert isinstance(combined.cause, ExceptionGroup)
    assert combined.cause.message == "teardown boundaries"
    assert list(combined.cause.exceptions) == failures


def test_tear_12_root_disposal_names_every_branch_chain_in_order() -> None:
    failures = [SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, f"b{n}") for n in range(2)]
    error = aggregate_branches("scoped", failures)
    assert error is not None
    assert error.message == (
        "scoped teardown failed in 2 branch(es): "
        "ACTIVATION_TEARDOWN_FAILED: b0; ACTIVATION_TEARDOWN_FAILED: b1"
    )
    assert isinstance(error.cause, ExceptionGroup)
    assert error.cause.message == "scoped teardown"
    assert list(error.cause.exceptions) == failures


def test_cont_30_each_report_refusal_names_its_reason() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    forged = ReportRequested(eid(), agent("c", 5), MessageId("r"), ReportDelivery.QUIET)
    assert d(forged) == (
        Reject(forged.event_id, ErrorCode.UNAUTHORIZED, "reports come only from a resident child"),
    )
    gone = ReportRequested(
        eid(), child, MessageId("r"), ReportDelivery.QUIET, parent_registered=False
    )
    assert d(gone) == (
        Reject(gone.event_id, ErrorCode.PARENT_UNAVAILABLE, "the child's parent is not registered"),
    )
    delivered = ReportRequested(eid(), child, MessageId("s"), ReportDelivery.QUIET)
    assert [effect.cause for effect in d(delivered)] == [delivered.event_id]
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    closed = ReportRequested(eid(), child, MessageId("r"), ReportDelivery.QUIET)
    assert d(closed) == (Reject(closed.event_id, ErrorCode.DRAINING, "admission is closed"),)


def test_auth_6_an_agent_cannot_interrupt_itself_through_the_manager() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    itself = InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(child)))
    assert d(itself) == (
        Reject(itself.event_id, ErrorCode.UNAUTHORIZED, "an agent cannot interrupt itself"),
    )
    by_root = InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT)))
    assert d(by_root) == (
        CancelAgent(by_root.event_id, sid("c"), CancelKind.PARENT, keep_inbox=True),
    )


def test_auth_10_a_denied_selected_drain_names_its_reason() -> None:
    d = Driver()
    d.start("c", ROOT)
    stranger = agent("stranger")
    drain = DrainRequested(eid(), SelectedChildren(live(stranger), (sid("c"),)))
    assert d(drain) == (
        Reject(drain.event_id, ErrorCode.UNAUTHORIZED, "a selected child is not this parent's"),
    )


def test_tear_1_a_whole_drain_skips_a_disposing_root_and_opens_the_rest() -> None:
    d = Driver()
    d.start("a", ROOT)
    d.start("b", ROOT)
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("a"),))))
    whole = DrainRequested(eid(), WholeManager())
    assert d(whole) == (
        CancelAgent(whole.event_id, sid("b"), CancelKind.PARENT, keep_inbox=False),
        FlushSession(whole.event_id, sid("b")),
        AwaitBranches(whole.event_id, (sid("a"), sid("b"))),
    )


def test_tear_2_a_parent_flushes_when_its_last_child_is_released() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    effects = finish(d, "c")
    assert effects[-1] == FlushSession(effects[-2].cause, sid("p"))


def test_res_1_an_absent_child_has_no_activation_state() -> None:
    assert activation_state_of(Driver().state, sid("absent")) is None


def test_auth_7_live_lineage_walks_every_live_ancestor_and_stops_on_any_cycle() -> None:
    parent, grand, top = (AgentRef(SessionId(name), 1) for name in ("p", "g", "t"))
    registry = {ref.session_id: ref for ref in (grand, top)}
    chain = {parent.session_id: grand.session_id, grand.session_id: top.session_id}
    assert frozenset(live_lineage(parent, chain, registry)) == {parent, grand, top}
    # A cycle above the parent (g -> t -> g) ends the walk too.
    cyclic = {**chain, top.session_id: grand.session_id}
    assert frozenset(live_lineage(parent, cyclic, registry)) == {parent, grand, top}


def test_auth_7_a_lineage_reads_in_token_order() -> None:
    first, second = AgentRef(SessionId("z"), 1), AgentRef(SessionId("a"), 2)
    assert repr(Lineage([second, first])) == f"Lineage([{first!r}, {second!r}])"


def test_auth_13_an_unpublished_target_is_an_allowed_noop() -> None:
    d = Driver()
    d(ChildIdReserved(eid(), sid("c"), ROOT))
    assert d(InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT)))) == ()


def test_tear_10_a_scoped_drain_closes_only_the_lineages_below_its_roots() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(agent("elsewhere")),))))
    report = ReportRequested(eid(), child, MessageId("r"), ReportDelivery.QUIET)
    assert kinds(d(report)) == [DeliverReport]


def test_auth_5_a_user_interrupt_at_the_wrong_address_names_its_reason() -> None:
    target = TargetFacts(SessionId("parent"), frozenset())
    wrong = UserInterrupt(SessionId("other"), grant_genuine=True)
    assert authorize_interrupt(SessionId("c"), wrong, target) == Denied(
        ErrorCode.UNAUTHORIZED, "not the child's durable direct parent"
    )


def _refusal(call: Callable[..., object], *args: object) -> tuple[ErrorCode, str | None, str]:
    with pytest.raises(SubagentError) as caught:
        call(*args)
    return caught.value.code, caught.value.field, caught.value.message


def test_budget_3_a_payer_with_one_left_carves_one_and_then_refuses_naming_the_dimension() -> None:
    assert b.carve_from(1, 5) == 1
    ledger = b.open_root(Ledger(), "root", Budget(output_tokens=1), 0)
    ledger = b.open_child(ledger, "root", "a", Budget(output_tokens=5), 0)
    assert b.remaining(ledger, "a").output_tokens == 1
    assert _refusal(b.open_child, ledger, "root", "b", Budget(output_tokens=1), 0) == (
        ErrorCode.BUDGET_EXHAUSTED,
        "budget.output_tokens",
        "the budget of 'root' is exhausted: no output_tokens left",
    )


def test_budget_8_settling_twice_or_closing_early_is_refused_naming_the_field() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    for _ in range(2):  # a settled reservation leaves the node's count as it was
        ledger, grant = reserved(b.reserve(ledger, "root", ONE_REQUEST, ONE_REQUEST, 0))
        assert _refusal(b.close, ledger, "root") == (
            ErrorCode.ILLEGAL_TRANSITION,
            "node",
            "budget node 'root' still has 1 reservations and 0 open children",
        )
        assert _refusal(b.settle, ledger, grant, Amounts(input_tokens=-2)) == (
            ErrorCode.INVALID_ARGUMENT,
            "used.input_tokens",
            "used.input_tokens: must be non-negative, got -2",
        )
        ledger = b.settle(ledger, grant, ONE_REQUEST)
        assert _refusal(b.settle, ledger, grant, None) == (
            ErrorCode.ILLEGAL_TRANSITION,
            "reservation",
            f"reservation {grant.id} is not outstanding",
        )
    assert b.close(ledger, "root").nodes == {}


def test_budget_1_a_childs_cap_and_a_bad_reservation_are_refused_naming_the_field() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=3), 0)
    assert _refusal(b.open_child, ledger, "root", "kid", Budget(output_tokens=-1), 0) == (
        ErrorCode.INVALID_ARGUMENT,
        "budget.output_tokens",
        "budget.output_tokens: must be a non-negative integer or None, got -1",
    )
    assert _refusal(b.reserve, ledger, "root", ONE_REQUEST, Amounts(model_requests=2), 0) == (
        ErrorCode.INVALID_ARGUMENT,
        "want.model_requests",
        "want.model_requests: need 0 <= at_least <= want, got 2 and 1",
    )


def test_budget_2_children_open_and_close_one_after_another() -> None:
    ledger = b.open_root(Ledger(), "root", Budget(model_requests=4), 0)
    for kid in ("a", "b"):
        ledger = b.close(b.open_child(ledger, "root", kid, Budget(model_requests=1), 0), kid)
    assert ledger.nodes["root"].open_children == 0
    assert b.close(ledger, "root").nodes == {}


def _notice(child: str, parent: str, route: NoticeRoute, accounted: bool) -> SendNotice:
    outcome = EpochOutcome(KnownStop.COMPLETED, (TextBlock("done"),))
    return SendNotice(
        EventId("?"),
        sid(parent),
        MessageId(f"notice-{child}"),
        route,
        accounted,
        notice_content(sid(child), outcome),
        notice_source(sid(child), outcome),
    )


def _sent(effects: tuple[Effect, ...]) -> SendNotice:
    (notice,) = (effect for effect in effects if isinstance(effect, SendNotice))
    return attrs.evolve(notice, cause=EventId("?"))


def test_notice_12_a_closing_root_still_follows_up_its_own_parent_in_full() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(child),))))
    settle(d, "c")
    effects = finish(d, "c")
    cause = effects[1].cause
    assert effects[1:] == (
        attrs.evolve(_notice("c", "root", NoticeRoute.FOLLOWUP, False), cause=cause),
        ReleaseOwnership(cause, sid("c"), None),
        EmitEnd(cause, sid("c"), RunId("run-c"), KnownStop.COMPLETED, None),
    )


def test_notice_10_a_disposing_owner_gets_the_notice_injected() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    assert _sent(finish(d, "c")) == _notice("c", "p", NoticeRoute.INJECT, False)


def test_notice_10_an_idle_owner_outside_a_scoped_drain_gets_a_followup() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), DescendantsOf((live(agent("elsewhere")),))))
    settle(d, "c")
    assert _sent(finish(d, "c")) == _notice("c", "p", NoticeRoute.FOLLOWUP, True)


def test_cont_14_a_followup_to_a_disposing_child_awaits_its_release() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("c"),))))
    followup = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(ROOT))
    assert d(followup) == (AwaitRelease(followup.event_id, sid("c"), MessageId("x")),)


def test_dur_22_a_mailbox_message_outside_a_scoped_drain_is_delivered() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(agent("elsewhere")),))))
    mail = MailboxArrived(eid(), sid("c"), MessageId("mb"))
    assert d(mail) == (SubmitFollowup(mail.event_id, sid("c"), MessageId("mb")),)


def test_lease_2_a_refused_cold_resume_posts_or_rejects_with_the_holders_reason() -> None:
    d = Driver()
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    posted = LeaseRefused(eid(), sid("c"), "held elsewhere", MessageId("x"))
    assert d(posted) == (PostToMailbox(posted.event_id, sid("c"), MessageId("x")),)
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    refused = LeaseRefused(eid(), sid("c"), "held elsewhere")
    assert d(refused) == (Reject(refused.event_id, ErrorCode.ACTIVATION_HELD, "held elsewhere"),)


def test_res_6_an_owner_left_quiet_by_an_unannounced_childs_release_opens_its_disposal() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    child = agent("c")
    d.run(
        [
            ChildIdReserved(eid(), sid("c"), parent),
            DescriptorSnapshotted(eid(), sid("c")),
            ChildPrepared(eid(), sid("c")),
            ChildMaterialized(eid(), sid("c"), RunId("run-c"), child, frozenset({child, parent})),
        ]
    )
    settle(d, "p")
    d(DrainRequested(eid(), SelectedChildren(live(parent), (sid("c"),))))
    effects = finish(d, "c")
    assert effects[-2:] == (
        CancelAgent(effects[-1].cause, sid("p"), CancelKind.PARENT, keep_inbox=False),
        FlushSession(effects[-1].cause, sid("p")),
    )
    assert d.state.activations[sid("p")].phase is Phase.FLUSHING


def test_evt_end_an_end_is_not_a_durability_failure_by_default() -> None:
    start = lifecycle.RunStartInfo(RunId("r1"), "spawn", "c1", True, SessionId("p"))
    assert not lifecycle.end_info_for(start, KnownStop.COMPLETED).durability_failed
