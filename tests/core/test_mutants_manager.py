"""Per-child manager rules the mutation check found unpinned (docs/mutation.md lists each).

Each case compares the whole effect tuple: the refusal's code and reason, and the cause and
ids every effect carries.
"""

from __future__ import annotations

import pytest

from dsh_subagent.core.authority import (
    Denied,
    UserAuthority,
    authorize_followup,
    precheck_followup,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager import apply
from dsh_subagent.core.manager.effects import (
    DisposeHandle,
    FlushSession,
    Reject,
    ReportDurabilityFailed,
    ResumeAgent,
)
from dsh_subagent.core.manager.events import (
    AgentBecameBusy,
    AgentBecameIdle,
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    ColdResumeStarted,
    DescendantsOf,
    DescriptorSnapshotted,
    DisposalFinished,
    DrainRequested,
    Event,
    FlushReported,
    FollowupRequested,
    MailboxArrived,
    MessageClaimed,
    MessageDiscarded,
    Phase,
    SelectedChildren,
    StartRolledBack,
    WholeManager,
)
from dsh_subagent.core.manager.state import ManagerState
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.teardown import FlushOutcome, durability_report
from dsh_subagent.core.values import KnownStop, MessageId, RunId
from tests.core.test_manager import ROOT, Driver, agent, as_parent, eid, live, settle, sid


def _reserved(d: Driver, child: str, *, prepared: bool = True) -> None:
    d.run([ChildIdReserved(eid(), sid(child), ROOT), DescriptorSnapshotted(eid(), sid(child))])
    if prepared:
        d(ChildPrepared(eid(), sid(child)))


def test_cont_3_a_duplicate_or_closed_reservation_names_its_reason() -> None:
    d = Driver()
    d.start("c", ROOT)
    again = ChildIdReserved(eid(), sid("c"), ROOT)
    assert d(again) == (Reject(again.event_id, ErrorCode.DUPLICATE_CHILD, "c is already live"),)
    d(DrainRequested(eid(), WholeManager()))
    closed = ChildIdReserved(eid(), sid("n"), ROOT)
    assert d(closed) == (
        Reject(closed.event_id, ErrorCode.DRAINING, "admission is closed for this parent"),
    )


def test_cont_5_a_preparation_after_the_drain_names_its_reason() -> None:
    d = Driver()
    _reserved(d, "c", prepared=False)
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    prepared = ChildPrepared(eid(), sid("c"))
    assert d(prepared) == (
        Reject(prepared.event_id, ErrorCode.DRAINING, "admission closed while preparing"),
    )


def test_cont_17_a_cold_resume_while_draining_names_the_drain() -> None:
    d = Driver()
    d(DrainRequested(eid(), WholeManager()))
    resume = ColdResumeStarted(eid(), sid("c"), None)
    assert d(resume) == (Reject(resume.event_id, ErrorCode.DRAINING, "the manager is draining"),)


def test_lease_1_a_materialization_without_the_lease_names_it_and_disposes_the_handle() -> None:
    d = Driver()
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    resumed = agent("c", token=2)
    event = ChildMaterialized(eid(), sid("c"), RunId("r"), resumed, frozenset({resumed}))
    assert d(event) == (
        Reject(
            event.event_id, ErrorCode.ACTIVATION_HELD, "a cold resume without the lease never runs"
        ),
        DisposeHandle(event.event_id, sid("c")),
    )


def test_cont_10_a_materialization_after_the_drain_names_it_and_disposes_the_handle() -> None:
    d = Driver()
    _reserved(d, "c")
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    child = agent("c")
    event = ChildMaterialized(eid(), sid("c"), RunId("r"), child, frozenset({child, ROOT}))
    assert d(event) == (
        Reject(event.event_id, ErrorCode.DRAINING, "admission closed during materialization"),
        DisposeHandle(event.event_id, sid("c")),
    )


def test_cont_10_publication_records_the_epoch_and_the_reported_status() -> None:
    d = Driver()
    _reserved(d, "c")
    child = agent("c")
    lineage = frozenset({child, ROOT})
    d(ChildMaterialized(eid(), sid("c"), RunId("r"), child, lineage, AgentStatus.RUNNING))
    record = d.state.activations[sid("c")]
    assert (record.epoch, record.status, record.run_id) == (1, AgentStatus.RUNNING, RunId("r"))


def test_cont_26_a_closing_parent_refuses_a_new_child_and_its_submissions_by_name() -> None:
    d = Driver()
    d.resume("c", "p", message="u")
    parent = d.start("p", ROOT)
    d.start("k", parent, lineage=[ROOT])  # keeps p's disposal open
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    closing = "the parent Activation is being released"
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(parent))
    assert d(request) == (Reject(request.event_id, ErrorCode.ACTIVATION_CLOSING, closing),)
    d.run(
        [
            ChildIdReserved(eid(), sid("d"), parent),
            DescriptorSnapshotted(eid(), sid("d")),
            ChildPrepared(eid(), sid("d")),
        ]
    )
    late = agent("d")
    event = ChildMaterialized(eid(), sid("d"), RunId("r"), late, frozenset({late, parent, ROOT}))
    assert d(event) == (
        Reject(event.event_id, ErrorCode.ACTIVATION_CLOSING, closing),
        DisposeHandle(event.event_id, sid("d")),
    )


def test_cont_26_a_parent_submission_takes_ownership_of_a_child_resumed_before_it() -> None:
    d = Driver()
    d.resume("c", "p")
    parent = d.start("p", ROOT)
    assert sid("c") not in d.state.activations[sid("p")].owned
    d(FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(parent)))
    assert sid("c") in d.state.activations[sid("p")].owned


def test_cont_9_an_unpublished_rollback_disposes_the_handle_it_names() -> None:
    d = Driver()
    _reserved(d, "c")
    rollback = StartRolledBack(eid(), sid("c"), handle_created=True)
    assert d(rollback) == (DisposeHandle(rollback.event_id, sid("c")),)


def test_cont_14_a_closed_admission_names_its_reason() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(ROOT))
    assert d(request) == (Reject(request.event_id, ErrorCode.DRAINING, "admission is closed"),)


def test_cont_17_an_absent_child_is_resumed_for_the_message_or_refused_by_name() -> None:
    d = Driver()
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(ROOT))
    assert d(request) == (ResumeAgent(request.event_id, sid("c"), MessageId("x")),)
    forged = FollowupRequested(eid(), sid("c"), MessageId("y"), UserAuthority(False))
    denied = precheck_followup(forged.authority)
    assert isinstance(denied, Denied)
    assert d(forged) == (Reject(forged.event_id, denied.code, denied.reason),)


def test_cont_16_a_denied_live_delivery_names_the_authoritys_reason() -> None:
    d = Driver()
    d.start("c", ROOT)
    other = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(agent("other")))
    denied = authorize_followup(other.authority, ROOT.session_id)
    assert isinstance(denied, Denied)
    assert d(other) == (Reject(other.event_id, denied.code, denied.reason),)


def test_dur_23_pending_mail_resumes_the_absent_child_it_names() -> None:
    d = Driver()
    mail = MailboxArrived(eid(), sid("c"), MessageId("mail"))
    assert d(mail) == (ResumeAgent(mail.event_id, sid("c"), MessageId("mail")),)


def test_tear_4_a_failed_flush_reports_the_childs_durability_then_disposes_its_handle() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    flush = FlushReported(eid(), sid("c"), FlushOutcome.FAILED)
    report = durability_report(sid("c"), FlushOutcome.FAILED)
    assert report is not None
    assert d(flush) == (
        ReportDurabilityFailed(flush.event_id, report),
        DisposeHandle(flush.event_id, sid("c")),
    )


def test_illegal_transition_names_the_event_and_the_phase() -> None:
    with pytest.raises(SubagentError) as raised:
        apply(ManagerState(), FlushReported(eid(), sid("c"), FlushOutcome.OK))
    assert (raised.value.code, raised.value.message) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "FlushReported is not accepted in phase absent",
    )
    with pytest.raises(SubagentError) as raised:
        apply(ManagerState(), object())  # type: ignore[arg-type]
    assert (raised.value.code, raised.value.field, raised.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "event",
        "event: not a manager event: object",
    )


def test_tear_2_a_disposing_parents_own_facts_keep_it_disposing_until_its_child_releases() -> None:
    """A parent whose disposal waits on a child takes status and message facts in DISPOSING
    (they change no phase), and flushes once that child's disposal finishes."""
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("k", parent, lineage=[ROOT])  # owned by p: keeps p's disposal open
    d(FollowupRequested(eid(), sid("p"), MessageId("late"), as_parent(ROOT)))
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    facts: list[Event] = [
        AgentBecameBusy(eid(), sid("p")),
        AgentBecameIdle(eid(), sid("p")),
        MessageClaimed(eid(), sid("p"), MessageId("m-p")),
        MessageDiscarded(eid(), sid("p"), MessageId("late")),
    ]
    for fact in facts:
        assert d(fact) == ()
        assert d.state.activations[sid("p")].phase is Phase.DISPOSING
    assert not d.state.activations[sid("p")].accepted
    d(FlushReported(eid(), sid("k"), FlushOutcome.OK))
    outcome = EpochOutcome(KnownStop.COMPLETED)
    finished = DisposalFinished(eid(), sid("k"), outcome, MessageId("n-k"))
    assert FlushSession(finished.event_id, sid("p")) in d(finished)
    assert d.state.activations[sid("p")].phase is Phase.FLUSHING


def test_tear_10_a_whole_drain_closes_admission_beside_a_scoped_drain() -> None:
    """Draining closes every lineage, also while a scoped drain names closing roots that the
    lineage does not reach."""
    d = Driver()
    _reserved(d, "c")
    d(DrainRequested(eid(), DescendantsOf((live(agent("elsewhere")),))))
    d(DrainRequested(eid(), WholeManager()))
    assert d.state.closing_roots
    assert d.state.draining
    child = agent("c")
    event = ChildMaterialized(eid(), sid("c"), RunId("r"), child, frozenset({child, ROOT}))
    assert d(event) == (
        Reject(event.event_id, ErrorCode.DRAINING, "admission closed during materialization"),
        DisposeHandle(event.event_id, sid("c")),
    )
