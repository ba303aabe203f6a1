"""The continuation manager machine (CONT-*, RES-*, NOTICE-*, TEAR-* as seen through apply)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.authority import (
    AgentRef,
    AncestorInterrupt,
    ParentAuthority,
    Presented,
    UserAuthority,
    UserInterrupt,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager import STATE_TRIGGERED, TRANSITIONS, apply
from dsh_subagent.core.manager.effects import (
    AwaitBranches,
    AwaitRelease,
    CancelAgent,
    DeliverReport,
    DisposeHandle,
    Effect,
    EmitEnd,
    EmitStart,
    FlushSession,
    PostToMailbox,
    Reject,
    ReleaseOwnership,
    ReportDurabilityFailed,
    ResumeAgent,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager.events import (
    LIVE,
    AgentBecameBusy,
    AgentBecameIdle,
    AgentDisposed,
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
    InterruptRequested,
    LeaseAcquired,
    LeaseRefused,
    MailboxArrived,
    MessageAccepted,
    MessageClaimed,
    MessageDiscarded,
    MessageSendFailed,
    Phase,
    ReportDelivery,
    ReportRequested,
    SelectedChildren,
    StartRolledBack,
    WholeManager,
)
from dsh_subagent.core.manager.state import (
    Activation,
    Forest,
    ManagerState,
    Step,
    StepForest,
    activation_state_of,
    residency_of,
)
from dsh_subagent.core.notices import EpochOutcome, NoticeRoute
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.residency import ActivationState, AgentStatus, Residency
from dsh_subagent.core.teardown import Boundary, FlushOutcome, durability_report
from dsh_subagent.core.values import (
    CancelKind,
    EventId,
    KnownStop,
    MessageId,
    RunId,
    SessionId,
    TextBlock,
)

_ids = itertools.count()


def eid() -> EventId:
    return EventId(f"e{next(_ids)}")


def sid(name: str) -> SessionId:
    return SessionId(name)


def agent(name: str, token: int = 1) -> AgentRef:
    return AgentRef(SessionId(name), token)


def live(ref: AgentRef) -> Presented:
    return Presented(ref, ref.token)


def as_parent(ref: AgentRef) -> ParentAuthority:
    return ParentAuthority(live(ref))


class Driver:
    """Applies events in order, keeping the state and the effects of the last event."""

    def __init__(self, state: ManagerState | None = None) -> None:
        self.state = state or ManagerState()
        self.effects: tuple[Effect, ...] = ()

    def __call__(self, event: Event) -> tuple[Effect, ...]:
        self.state, self.effects = apply(self.state, event)
        return self.effects

    def run(self, events: Iterable[Event]) -> tuple[Effect, ...]:
        return tuple(effect for event in events for effect in self(event))

    def start(
        self,
        child: str,
        parent: AgentRef,
        lineage: Iterable[AgentRef] = (),
        message: str | None = None,
    ) -> AgentRef:
        """Take ``child`` from reservation to its first accepted delivery (RESIDENT)."""
        child_ref = self.materialize(child, parent, lineage)
        msg = MessageId(message or f"m-{child}")
        self(FollowupRequested(eid(), sid(child), msg, as_parent(parent)))
        self(MessageAccepted(eid(), sid(child), msg))
        return child_ref

    def prepare(self, child: str, parent: AgentRef) -> tuple[Effect, ...]:
        """Reserve ``child`` under ``parent`` and take it to PREPARED."""
        return self.run(
            [
                ChildIdReserved(eid(), sid(child), parent),
                DescriptorSnapshotted(eid(), sid(child)),
                ChildPrepared(eid(), sid(child)),
            ]
        )

    def materialize(
        self, child: str, parent: AgentRef, lineage: Iterable[AgentRef] = (), run: str = ""
    ) -> AgentRef:
        """Take ``child`` from reservation to MATERIALIZED, before any delivery."""
        child_ref = agent(child)
        self.prepare(child, parent)
        self(
            ChildMaterialized(
                eid(),
                sid(child),
                RunId(run or f"run-{child}"),
                child_ref,
                frozenset({child_ref, parent, *lineage}),
            )
        )
        return child_ref

    def resume(self, child: str, parent: str, message: str | None = None) -> AgentRef:
        """Cold-resume ``child`` of the session ``parent`` with its lease, materialized with
        itself as its lineage; with ``message``, a user follow-up of that id is accepted."""
        child_ref = agent(child)
        self(ColdResumeStarted(eid(), sid(child), sid(parent)))
        self(LeaseAcquired(eid(), sid(child), 1))
        self(ChildMaterialized(eid(), sid(child), RunId("r"), child_ref, frozenset({child_ref})))
        if message is not None:
            self(FollowupRequested(eid(), sid(child), MessageId(message), UserAuthority(True)))
            self(MessageAccepted(eid(), sid(child), MessageId(message)))
        return child_ref


ROOT = agent("root")


def kinds(effects: Sequence[Effect]) -> list[type[Effect]]:
    return [type(effect) for effect in effects]


def rejected(effects: Sequence[Effect]) -> ErrorCode:
    assert len(effects) == 1
    assert isinstance(effects[0], Reject)
    return effects[0].code


def phase(d: Driver, child: str) -> Phase:
    record = d.state.activations.get(sid(child))
    return Phase.ABSENT if record is None else record.phase


def finish(
    d: Driver,
    child: str,
    *,
    outcome: EpochOutcome | None = None,
    flush: FlushOutcome = FlushOutcome.OK,
    failures: frozenset[Boundary] = frozenset(),
    parent_registered: bool = True,
    parent_status: AgentStatus = AgentStatus.IDLE,
) -> tuple[Effect, ...]:
    """Report the flush and the handle disposal of a FLUSHING child."""
    return d.run(
        [
            FlushReported(eid(), sid(child), flush),
            DisposalFinished(
                eid(),
                sid(child),
                outcome or EpochOutcome(KnownStop.COMPLETED, (TextBlock("done"),)),
                MessageId(f"notice-{child}"),
                failures,
                parent_registered,
                parent_status,
            ),
        ]
    )


def settle(d: Driver, child: str) -> tuple[Effect, ...]:
    """The child's accepted message is claimed and it goes idle."""
    return d.run(
        [
            MessageClaimed(eid(), sid(child), MessageId(f"m-{child}")),
            AgentBecameIdle(eid(), sid(child)),
        ]
    )


# --------------------------------------------------------------------------- start (CONT-3..10)


def test_cont_3_reservation_refuses_duplicates_and_closed_admission() -> None:
    d = Driver()
    d.start("c", ROOT)
    assert rejected(d(ChildIdReserved(eid(), sid("c"), ROOT))) is ErrorCode.DUPLICATE_CHILD
    d(DrainRequested(eid(), WholeManager()))
    assert rejected(d(ChildIdReserved(eid(), sid("n"), ROOT))) is ErrorCode.DRAINING
    assert phase(d, "n") is Phase.ABSENT


def test_cont_5_preparation_rechecks_admission() -> None:
    d = Driver()
    d.run([ChildIdReserved(eid(), sid("c"), ROOT), DescriptorSnapshotted(eid(), sid("c"))])
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    assert rejected(d(ChildPrepared(eid(), sid("c")))) is ErrorCode.DRAINING
    assert phase(d, "c") is Phase.ABSENT


def test_cont_8_start_resolves_at_inbox_acceptance() -> None:
    d = Driver()
    d.start("c", ROOT)
    record = d.state.activations[sid("c")]
    assert record.phase is Phase.RESIDENT
    assert record.announced
    assert MessageId("m-c") in record.accepted


def test_cont_9_rollback_before_publication_emits_nothing_but_handle_disposal() -> None:
    d = Driver()
    d.run([ChildIdReserved(eid(), sid("c"), ROOT), DescriptorSnapshotted(eid(), sid("c"))])
    assert d(StartRolledBack(eid(), sid("c"))) == ()
    assert phase(d, "c") is Phase.ABSENT
    d.run([ChildIdReserved(eid(), sid("c"), ROOT), DescriptorSnapshotted(eid(), sid("c"))])
    d(ChildPrepared(eid(), sid("c")))
    assert kinds(d(StartRolledBack(eid(), sid("c"), handle_created=True))) == [DisposeHandle]


def test_cont_9_rollback_after_publication_closes_the_pair_without_notice() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    child = agent("c")
    d.run([ChildIdReserved(eid(), sid("c"), parent), DescriptorSnapshotted(eid(), sid("c"))])
    d(ChildPrepared(eid(), sid("c")))
    lineage = frozenset({child, parent, ROOT})
    assert kinds(d(ChildMaterialized(eid(), sid("c"), RunId("r"), child, lineage))) == [EmitStart]
    message = MessageId("m")
    d(FollowupRequested(eid(), sid("c"), message, as_parent(parent)))
    d(MessageSendFailed(eid(), sid("c"), message))
    effects = d(StartRolledBack(eid(), sid("c")))
    assert kinds(effects) == [CancelAgent, FlushSession]
    effects = finish(d, "c")
    assert kinds(effects) == [DisposeHandle, ReleaseOwnership, EmitEnd]
    assert phase(d, "c") is Phase.ABSENT


def test_tear_13_err_7_rollback_after_a_drain_opened_the_disposal_changes_nothing() -> None:
    """A drain during publication: the first delivery is DRAINING, the rollback a no-op."""
    d = Driver()
    d.materialize("c", ROOT, run="r")
    d(DrainRequested(eid(), WholeManager()))
    assert phase(d, "c") is Phase.FLUSHING
    followup = FollowupRequested(eid(), sid("c"), MessageId("m"), as_parent(ROOT))
    assert rejected(d(followup)) is ErrorCode.DRAINING
    before = d.state
    assert d(StartRolledBack(eid(), sid("c"), handle_created=True)) == ()
    assert d.state == before
    d(FlushReported(eid(), sid("c"), FlushOutcome.OK))
    assert d(StartRolledBack(eid(), sid("c"), handle_created=True)) == ()
    assert phase(d, "c") is Phase.RELEASING


def test_tear_13_err_7_rollback_of_a_disposing_owner_changes_nothing() -> None:
    d = Driver()
    d.run(
        [
            ChildIdReserved(eid(), sid("p"), ROOT),
            DescriptorSnapshotted(eid(), sid("p")),
            ChildPrepared(eid(), sid("p")),
            ChildMaterialized(eid(), sid("p"), RunId("r"), agent("p"), frozenset({agent("p")})),
        ]
    )
    d.start("c", agent("p"), lineage=[ROOT])
    d(DrainRequested(eid(), WholeManager()))
    assert phase(d, "p") is Phase.DISPOSING
    assert d(StartRolledBack(eid(), sid("p"))) == ()
    assert phase(d, "p") is Phase.DISPOSING


def test_cont_10_materialization_publishes_and_refuses_when_closing() -> None:
    d = Driver()
    child = agent("c")
    d.prepare("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    effects = d(ChildMaterialized(eid(), sid("c"), RunId("r"), child, frozenset({child, ROOT})))
    assert kinds(effects) == [Reject, DisposeHandle]
    assert rejected(effects[:1]) is ErrorCode.DRAINING
    assert phase(d, "c") is Phase.ABSENT


def test_cont_26_ownership_added_at_publication_before_the_child_runs() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    assert sid("c") in d.state.activations[sid("p")].owned
    # The parent now cannot settle: it is waiting on its child.
    settle(d, "p")
    assert residency_of(d.state, sid("p")) is Residency.WAITING


def test_cont_26_parent_with_open_disposal_refuses_new_child() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    child = agent("d")
    d.run(
        [
            ChildIdReserved(eid(), sid("d"), parent),
            DescriptorSnapshotted(eid(), sid("d")),
            ChildPrepared(eid(), sid("d")),
        ]
    )
    lineage = frozenset({child, parent, ROOT})
    effects = d(ChildMaterialized(eid(), sid("d"), RunId("r"), child, lineage))
    assert rejected(effects[:1]) is ErrorCode.ACTIVATION_CLOSING
    # A parent-originated submission is refused too.
    followup = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(parent))
    assert kinds(d(followup)) == [AwaitRelease]


def test_cont_26_parent_submission_refused_while_parent_disposal_is_open() -> None:
    d = Driver()
    d.resume("c", "p", message="u")
    parent = d.start("p", ROOT)  # resident after the child: it does not own it
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(parent))
    assert rejected(d(request)) is ErrorCode.ACTIVATION_CLOSING


# --------------------------------------------------------------------------- routing (CONT-14..17)


def test_cont_15_running_child_enqueues() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(AgentBecameBusy(eid(), sid("c")))
    effects = d(FollowupRequested(eid(), sid("c"), MessageId("m2"), as_parent(ROOT)))
    assert effects == (SubmitFollowup(effects[0].cause, sid("c"), MessageId("m2")),)
    assert MessageId("m2") in d.state.activations[sid("c")].accepted


def test_res_12_waiting_child_is_woken_in_the_same_epoch() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    d.start("g", child, lineage=[ROOT])
    settle(d, "c")
    assert activation_state_of(d.state, sid("c")) is ActivationState.WAITING
    epoch = d.state.activations[sid("c")].epoch
    effects = d(FollowupRequested(eid(), sid("c"), MessageId("wake"), as_parent(ROOT)))
    assert kinds(effects) == [SubmitFollowup]
    assert d.state.activations[sid("c")].epoch == epoch


def test_cont_17_absent_child_is_cold_resumed_as_a_new_epoch() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    finish(d, "c")
    message = MessageId("later")
    effects = d(FollowupRequested(eid(), sid("c"), message, as_parent(ROOT)))
    assert kinds(effects) == [ResumeAgent]
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    d(LeaseAcquired(eid(), sid("c"), 7))
    assert d.state.activations[sid("c")].lease == 7
    resumed = agent("c", token=2)
    lineage = frozenset({resumed, ROOT})
    start = d(ChildMaterialized(eid(), sid("c"), RunId("run-2"), resumed, lineage))
    assert start == (EmitStart(start[0].cause, sid("c"), RunId("run-2"), 2),)
    assert kinds(d(FollowupRequested(eid(), sid("c"), message, as_parent(ROOT)))) == [
        SubmitFollowup
    ]


def test_lease_2_a_cold_resume_held_elsewhere_is_refused_and_dropped() -> None:
    d = Driver()
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    refused = d(LeaseRefused(eid(), sid("c"), "host:1:x"))
    assert rejected(refused) is ErrorCode.ACTIVATION_HELD
    assert sid("c") not in d.state.activations


def test_dur_20_a_followup_whose_resume_is_refused_the_lease_goes_to_the_mailbox() -> None:
    d = Driver()
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    message = MessageId("held")
    effects = d(LeaseRefused(eid(), sid("c"), "host:1:x", message))
    assert effects == (PostToMailbox(effects[0].cause, sid("c"), message),)
    assert sid("c") not in d.state.activations


def test_dur_22_a_mailbox_message_is_delivered_into_a_live_activation() -> None:
    d = Driver()
    d.start("c", ROOT)
    message = MessageId("mail")
    assert kinds(d(MailboxArrived(eid(), sid("c"), message))) == [SubmitFollowup]
    assert message in d.state.activations[sid("c")].accepted
    d(MessageAccepted(eid(), sid("c"), message))
    assert phase(d, "c") is Phase.RESIDENT
    d(DrainRequested(eid(), WholeManager()))  # closing: the message stays in the store
    assert d(MailboxArrived(eid(), sid("c"), MessageId("late"))) == ()
    assert phase(d, "c") is Phase.FLUSHING


def test_dur_22_mail_for_a_materialized_child_under_its_own_scoped_drain_stays_stored() -> None:
    """A scoped drain of the child's descendants closes its lineage (TEAR-10): mail that
    arrives before the child's first delivery is neither admitted nor submitted, and a
    follow-up is refused."""
    d = Driver()
    child = d.materialize("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(child),))))
    assert phase(d, "c") is Phase.MATERIALIZED
    assert d(MailboxArrived(eid(), sid("c"), MessageId("mail"))) == ()
    assert MessageId("mail") not in d.state.activations[sid("c")].accepted
    # A follow-up meets the same closed admission, and is refused (CONT-14).
    followup = FollowupRequested(eid(), sid("c"), MessageId("f"), as_parent(ROOT))
    assert rejected(d(followup)) is ErrorCode.DRAINING


def test_dur_23_an_absent_child_with_pending_mail_is_resumed_unless_draining() -> None:
    d = Driver()
    message = MessageId("mail")
    assert kinds(d(MailboxArrived(eid(), sid("c"), message))) == [ResumeAgent]
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    assert d(MailboxArrived(eid(), sid("c"), message)) == ()  # the resumer delivers it
    assert phase(d, "c") is Phase.RESUMING
    d(DrainRequested(eid(), WholeManager()))
    d(StartRolledBack(eid(), sid("c"), False))
    assert d(MailboxArrived(eid(), sid("c"), message)) == ()
    assert sid("c") not in d.state.activations


def test_lease_1_a_cold_resume_without_the_lease_never_runs() -> None:
    d = Driver()
    d(ColdResumeStarted(eid(), sid("c"), ROOT.session_id))
    resumed = agent("c", token=2)
    effects = d(ChildMaterialized(eid(), sid("c"), RunId("r"), resumed, frozenset({resumed})))
    assert rejected(effects[:1]) is ErrorCode.ACTIVATION_HELD
    assert kinds(effects[1:]) == [DisposeHandle]
    assert sid("c") not in d.state.activations


def test_cont_17_cold_resume_refused_while_draining() -> None:
    d = Driver()
    d(DrainRequested(eid(), WholeManager()))
    assert rejected(d(ColdResumeStarted(eid(), sid("c"), None))) is ErrorCode.DRAINING


def test_cont_14_open_disposal_waits_for_release_then_cold_resumes() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    assert phase(d, "c") is Phase.FLUSHING
    request = FollowupRequested(eid(), sid("c"), MessageId("late"), as_parent(ROOT))
    assert kinds(d(request)) == [AwaitRelease]
    finish(d, "c")
    assert kinds(d(request)) == [ResumeAgent]


def test_cont_14_admission_is_checked_first() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(ROOT))
    assert rejected(d(request)) is ErrorCode.DRAINING
    absent = FollowupRequested(eid(), sid("zz"), MessageId("x"), as_parent(ROOT))
    assert rejected(d(absent)) is ErrorCode.DRAINING


def test_cont_16_delivery_needs_exact_live_direct_parent() -> None:
    d = Driver()
    d.start("c", ROOT)
    stale = ParentAuthority(Presented(ROOT, 99))
    request = FollowupRequested(eid(), sid("c"), MessageId("x"), stale)
    assert rejected(d(request)) is ErrorCode.UNAUTHORIZED
    other = FollowupRequested(eid(), sid("c"), MessageId("x"), as_parent(agent("other")))
    assert rejected(d(other)) is ErrorCode.UNAUTHORIZED
    assert MessageId("x") not in d.state.activations[sid("c")].accepted


def test_auth_4_genuine_user_grant_delivers_without_parent() -> None:
    d = Driver()
    d.start("c", ROOT)
    granted = FollowupRequested(eid(), sid("c"), MessageId("u"), UserAuthority(True))
    assert kinds(d(granted)) == [SubmitFollowup]
    forged = FollowupRequested(eid(), sid("c"), MessageId("f"), UserAuthority(False))
    assert rejected(d(forged)) is ErrorCode.UNAUTHORIZED


# --------------------------------------------------------------------------- residency (RES-*)


def test_res_2_accepted_message_keeps_idle_child_running() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(AgentBecameIdle(eid(), sid("c")))
    assert activation_state_of(d.state, sid("c")) is ActivationState.RUNNING
    # Ids the manager never admitted are ignored.
    d(MessageDiscarded(eid(), sid("c"), MessageId("stranger")))
    assert phase(d, "c") is Phase.RESIDENT


def test_res_4_materialized_child_never_settles_before_acceptance() -> None:
    d = Driver()
    child = agent("c")
    d.prepare("c", ROOT)
    assert activation_state_of(d.state, sid("c")) is None
    assert residency_of(d.state, sid("c")) is None
    d(ChildMaterialized(eid(), sid("c"), RunId("r"), child, frozenset({child, ROOT})))
    d(AgentBecameIdle(eid(), sid("c")))
    assert phase(d, "c") is Phase.MATERIALIZED
    assert residency_of(d.state, sid("c")) is Residency.RUNNING


def test_res_6_settled_decision_opens_disposal_in_the_same_step() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(AgentBecameBusy(eid(), sid("c")))
    assert d(MessageClaimed(eid(), sid("c"), MessageId("m-c"))) == ()
    effects = d(AgentBecameIdle(eid(), sid("c")))
    assert kinds(effects) == [CancelAgent, FlushSession]
    cancel = effects[0]
    assert isinstance(cancel, CancelAgent)
    assert not cancel.keep_inbox
    assert cancel.kind is CancelKind.PARENT


def test_res_7_child_release_lets_the_waiting_parent_settle() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    settle(d, "p")
    settle(d, "c")
    effects = finish(d, "c")
    # Notice (accounted) keeps the parent running; it settles only once it reads it.
    assert kinds(effects) == [DisposeHandle, SendNotice, ReleaseOwnership, EmitEnd]
    assert phase(d, "p") is Phase.RESIDENT
    effects = d(MessageClaimed(eid(), sid("p"), MessageId("notice-c")))
    assert kinds(effects) == [CancelAgent, FlushSession]


def test_res_9_record_stays_until_handle_disposal_finished() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    d(FlushReported(eid(), sid("c"), FlushOutcome.OK))
    assert phase(d, "c") is Phase.RELEASING
    finish_only = DisposalFinished(
        eid(), sid("c"), EpochOutcome(KnownStop.COMPLETED), MessageId("n")
    )
    d(finish_only)
    assert phase(d, "c") is Phase.ABSENT


def test_res_10_announced_only_after_an_accepted_delivery() -> None:
    d = Driver()
    d.materialize("c", ROOT, run="r")
    assert not d.state.activations[sid("c")].announced
    d(FollowupRequested(eid(), sid("c"), MessageId("m"), as_parent(ROOT)))
    d(MessageAccepted(eid(), sid("c"), MessageId("m")))
    assert d.state.activations[sid("c")].announced


def test_res_10_only_a_first_acceptance_is_reported_back() -> None:
    """A materialized child's first delivery asks for ``MessageAccepted``; a delivery to a
    resident child (announced already, INV-RES-3) is accepted in its routing transition."""
    d = Driver()
    d.materialize("c", ROOT, run="r")
    first = d(FollowupRequested(eid(), sid("c"), MessageId("m"), as_parent(ROOT)))
    assert first == (SubmitFollowup(first[0].cause, sid("c"), MessageId("m"), True),)
    assert phase(d, "c") is Phase.MATERIALIZED
    d(MessageAccepted(eid(), sid("c"), MessageId("m")))
    for later in (
        FollowupRequested(eid(), sid("c"), MessageId("m2"), as_parent(ROOT)),
        MailboxArrived(eid(), sid("c"), MessageId("m3")),
    ):
        effects = d(later)
        assert effects == (SubmitFollowup(later.event_id, sid("c"), later.message_id, False),)
        record = d.state.activations[sid("c")]
        assert record.phase is Phase.RESIDENT
        assert record.announced
        assert later.message_id in record.accepted
        # What a report would record is there already: it changes nothing.
        assert apply(d.state, MessageAccepted(eid(), sid("c"), later.message_id)) == (
            d.state,
            (),
        )


def test_dur_22_a_first_mailbox_delivery_is_reported_back() -> None:
    d = Driver()
    d.materialize("c", ROOT, run="r")
    mail = MailboxArrived(eid(), sid("c"), MessageId("mail"))
    assert d(mail) == (SubmitFollowup(mail.event_id, sid("c"), MessageId("mail"), True),)
    assert d.state.activations[sid("c")].accepted == {MessageId("mail")}


# ------------------------------------------------------------------------- interrupt (CONT-23..25)


def test_cont_23_interrupt_cancels_keeping_the_inbox() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    user = d(InterruptRequested(eid(), sid("c"), UserInterrupt(sid("p"), grant_genuine=True)))
    assert user == (CancelAgent(user[0].cause, sid("c"), CancelKind.USER, keep_inbox=True),)
    ancestor = d(InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT))))
    assert ancestor == (
        CancelAgent(ancestor[0].cause, sid("c"), CancelKind.PARENT, keep_inbox=True),
    )
    wrong = UserInterrupt(sid("root"), grant_genuine=True)
    assert rejected(d(InterruptRequested(eid(), sid("c"), wrong))) is ErrorCode.UNAUTHORIZED


def test_cont_23_absent_or_closing_target_is_a_noop() -> None:
    d = Driver()
    assert d(InterruptRequested(eid(), sid("nobody"), AncestorInterrupt(live(ROOT)))) == ()
    d.start("c", ROOT)
    settle(d, "c")
    assert phase(d, "c") is Phase.FLUSHING
    assert d(InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT)))) == ()


def test_cont_25_parked_messages_keep_an_interrupted_child_resident() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(FollowupRequested(eid(), sid("c"), MessageId("parked"), as_parent(ROOT)))
    d(InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT))))
    settle(d, "c")
    assert phase(d, "c") is Phase.RESIDENT
    assert activation_state_of(d.state, sid("c")) is ActivationState.RUNNING


# --------------------------------------------------------------------------- reports (CONT-30/31)


def test_cont_30_report_checks_in_order() -> None:
    d = Driver()
    child = d.start("c", ROOT)
    forged = ReportRequested(eid(), agent("c", 5), MessageId("r"), ReportDelivery.QUIET)
    assert rejected(d(forged)) is ErrorCode.UNAUTHORIZED
    gone = ReportRequested(
        eid(), child, MessageId("r"), ReportDelivery.QUIET, parent_registered=False
    )
    assert rejected(d(gone)) is ErrorCode.PARENT_UNAVAILABLE
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    closed = ReportRequested(eid(), child, MessageId("r"), ReportDelivery.QUIET)
    assert rejected(d(closed)) is ErrorCode.DRAINING


def test_cont_30_report_from_closing_activation_is_refused() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    child = d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), SelectedChildren(live(parent), (sid("c"),))))
    report = ReportRequested(eid(), child, MessageId("r"), ReportDelivery.NEXT_STEP)
    assert rejected(d(report)) is ErrorCode.ACTIVATION_CLOSING


def test_cont_31_delivery_modes_and_accounting() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    child = d.start("c", parent, lineage=[ROOT])
    quiet = d(ReportRequested(eid(), child, MessageId("q"), ReportDelivery.QUIET))
    assert quiet == (
        DeliverReport(
            quiet[0].cause, sid("c"), sid("p"), MessageId("q"), NoticeRoute.INJECT, False
        ),
    )
    step = d(ReportRequested(eid(), child, MessageId("s"), ReportDelivery.NEXT_STEP))
    assert step == (
        DeliverReport(step[0].cause, sid("c"), sid("p"), MessageId("s"), NoticeRoute.STEER, True),
    )
    assert MessageId("s") in d.state.activations[sid("p")].accepted
    top = d(ReportRequested(eid(), parent, MessageId("t"), ReportDelivery.NEXT_STEP))
    assert top == (
        DeliverReport(
            top[0].cause, sid("p"), sid("root"), MessageId("t"), NoticeRoute.STEER, False
        ),
    )


# --------------------------------------------------------------------------- notices (NOTICE-*)


def test_notice_1_notice_precedes_release_and_end_edge() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    effects = finish(d, "c")
    assert kinds(effects) == [DisposeHandle, SendNotice, ReleaseOwnership, EmitEnd]
    notice = effects[1]
    assert isinstance(notice, SendNotice)
    assert notice.parent_session == sid("root")
    assert notice.route is NoticeRoute.FOLLOWUP
    assert not notice.accounted


def test_notice_2_no_notice_without_an_accepted_delivery() -> None:
    d = Driver()
    d.materialize("c", ROOT, run="r")
    d(StartRolledBack(eid(), sid("c")))
    assert SendNotice not in kinds(finish(d, "c"))


def test_notice_3_every_teardown_cause_notifies() -> None:
    d = Driver()
    for name in ("a", "b"):
        d.start(name, ROOT)
    d(DrainRequested(eid(), WholeManager()))
    for name in ("a", "b"):
        effects = finish(d, name, outcome=EpochOutcome(KnownStop.ABORTED))
        notice = next(e for e in effects if isinstance(e, SendNotice))
        assert notice.route is NoticeRoute.INJECT


def test_notice_4_departed_parent_drops_the_notice() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    effects = finish(d, "c", parent_registered=False)
    notice = next(e for e in effects if isinstance(e, SendNotice))
    assert notice.route is NoticeRoute.DROP


def test_notice_8_failed_teardown_notifies_error_without_output() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    effects = finish(d, "c", failures=frozenset({Boundary.HANDLE}))
    notice = next(e for e in effects if isinstance(e, SendNotice))
    end = next(e for e in effects if isinstance(e, EmitEnd))
    assert notice.content[1] == TextBlock("It left no closing message.")
    assert end.stop_reason is KnownStop.ERROR


def test_notice_10_busy_resident_parent_is_steered_and_accounted() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(AgentBecameBusy(eid(), sid("p")))
    settle(d, "c")
    notice = next(e for e in finish(d, "c") if isinstance(e, SendNotice))
    assert (notice.route, notice.accounted) == (NoticeRoute.STEER, True)
    assert MessageId("notice-c") in d.state.activations[sid("p")].accepted


def test_notice_10_closing_parent_lineage_gets_injection() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    # Leaf first: c flushes, p waits for c.
    assert phase(d, "c") is Phase.FLUSHING
    assert phase(d, "p") is Phase.DISPOSING
    notice = next(e for e in finish(d, "c") if isinstance(e, SendNotice))
    assert (notice.route, notice.accounted) == (NoticeRoute.INJECT, False)
    top = next(e for e in finish(d, "p") if isinstance(e, SendNotice))
    assert top.route is NoticeRoute.INJECT


def test_notice_11_notice_sent_while_parent_still_owns_the_child() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    settle(d, "c")
    effects = finish(d, "c")
    order = kinds(effects)
    assert order.index(SendNotice) < order.index(ReleaseOwnership) < order.index(EmitEnd)
    release = effects[order.index(ReleaseOwnership)]
    assert release == ReleaseOwnership(release.cause, sid("c"), sid("p"))


def test_notice_12_maintaining_parent_stays_live_until_notice_is_read() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    settle(d, "p")  # idle, i.e. possibly maintaining (HARNESS-2)
    settle(d, "c")
    finish(d, "c")
    assert activation_state_of(d.state, sid("p")) is ActivationState.RUNNING


# --------------------------------------------------------------------------- teardown (TEAR-*)


def test_tear_1_disposal_is_memoized() -> None:
    d = Driver()
    d.start("c", ROOT)
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("c"),))))
    again = d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("c"),))))
    assert again == (AwaitBranches(again[0].cause, (sid("c"),)),)
    assert kinds(d(DrainRequested(eid(), WholeManager()))) == [AwaitBranches]


def test_tear_2_cancel_reaches_whole_subtree_before_any_release() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    child = d.start("c", parent, lineage=[ROOT])
    d.start("g", child, lineage=[parent, ROOT])
    effects = d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    cancels = [e.child_id for e in effects if isinstance(e, CancelAgent)]
    assert cancels == [sid("p"), sid("c"), sid("g")]
    flushes = [e.child_id for e in effects if isinstance(e, FlushSession)]
    assert flushes == [sid("g")]
    assert kinds(finish(d, "g"))[-1] is FlushSession  # c's turn comes next
    assert phase(d, "c") is Phase.FLUSHING
    finish(d, "c")
    assert phase(d, "p") is Phase.FLUSHING


def test_tear_4_durability_failed_is_reported_but_changes_nothing_else() -> None:
    d = Driver()
    d.start("c", ROOT)
    settle(d, "c")
    flush = d(FlushReported(eid(), sid("c"), FlushOutcome.FAILED))
    assert kinds(flush) == [ReportDurabilityFailed, DisposeHandle]
    outcome = EpochOutcome(KnownStop.COMPLETED, (TextBlock("ok"),))
    effects = d(DisposalFinished(eid(), sid("c"), outcome, MessageId("n")))
    end = next(e for e in effects if isinstance(e, EmitEnd))
    assert end.stop_reason is KnownStop.COMPLETED
    assert end.durability is not None
    assert end.durability.code is ErrorCode.DURABILITY_FAILED
    assert phase(d, "c") is Phase.ABSENT


def test_tear_5_child_failure_fails_the_parent_epoch() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("p"),))))
    finish(d, "c", failures=frozenset({Boundary.ACTIVATION}))
    assert d.state.activations[sid("p")].child_failures == 1
    end = next(e for e in finish(d, "p") if isinstance(e, EmitEnd))
    assert end.stop_reason is KnownStop.ERROR


def test_tear_6_ownership_released_even_when_disposal_failed() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    settle(d, "c")
    finish(d, "c", failures=frozenset({Boundary.HANDLE}))
    assert sid("c") not in d.state.activations[sid("p")].owned


def test_tear_8_scoped_drain_targets_descendants_not_the_root_or_others() -> None:
    d = Driver()
    host = d.start("host", ROOT)
    d.start("c", host, lineage=[ROOT])
    d.start("other", agent("elsewhere"))
    effects = d(DrainRequested(eid(), DescendantsOf((live(host), Presented(ROOT, 42)))))
    assert [e.child_id for e in effects if isinstance(e, CancelAgent)] == [sid("c")]
    assert phase(d, "host") is Phase.RESIDENT
    assert phase(d, "other") is Phase.RESIDENT
    assert host in d.state.closing_roots


def test_tear_9_closing_root_lasts_until_that_exact_agent_is_disposed() -> None:
    d = Driver()
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    d(AgentDisposed(eid(), agent("root", token=2)))
    assert ROOT in d.state.closing_roots
    d(AgentDisposed(eid(), ROOT))
    assert ROOT not in d.state.closing_roots
    assert d(ChildIdReserved(eid(), sid("c"), agent("root", token=2))) == ()


def test_tear_10_agent_below_closing_root_is_refused_admission() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d(DrainRequested(eid(), DescendantsOf((live(ROOT),))))
    assert rejected(d(ChildIdReserved(eid(), sid("n"), parent))) is ErrorCode.DRAINING


def test_tear_11_selected_drain_validates_all_before_any_disposal() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    d.start("stranger", ROOT)
    scope = SelectedChildren(live(parent), (sid("c"), sid("stranger")))
    assert rejected(d(DrainRequested(eid(), scope))) is ErrorCode.UNAUTHORIZED
    assert phase(d, "c") is Phase.RESIDENT
    ok = SelectedChildren(live(parent), (sid("c"), sid("c"), sid("absent")))
    effects = d(DrainRequested(eid(), ok))
    assert kinds(effects) == [CancelAgent, FlushSession, AwaitBranches]
    assert effects[-1] == AwaitBranches(effects[-1].cause, (sid("c"),))
    assert phase(d, "stranger") is Phase.RESIDENT
    assert not d.state.draining


def test_tear_13_whole_drain_closes_admission_and_disposes_every_root() -> None:
    d = Driver()
    d.start("a", ROOT)
    d.start("b", agent("host2"))
    effects = d(DrainRequested(eid(), WholeManager()))
    assert d.state.draining
    assert sorted(e.child_id for e in effects if isinstance(e, CancelAgent)) == [sid("a"), sid("b")]


def test_tear_18_interrupt_keeps_inbox_teardown_does_not() -> None:
    d = Driver()
    d.start("c", ROOT)
    interrupt = d(InterruptRequested(eid(), sid("c"), AncestorInterrupt(live(ROOT))))
    teardown = d(DrainRequested(eid(), SelectedChildren(live(ROOT), (sid("c"),))))
    assert [e.keep_inbox for e in interrupt if isinstance(e, CancelAgent)] == [True]
    assert [e.keep_inbox for e in teardown if isinstance(e, CancelAgent)] == [False]


# --------------------------------------------------------------------------- machine contract


def test_illegal_transition_raises_and_leaves_state_unchanged() -> None:
    d = Driver()
    d.start("c", ROOT)
    before = d.state
    with pytest.raises(SubagentError) as raised:
        apply(before, FlushReported(eid(), sid("c"), FlushOutcome.OK))
    assert raised.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert raised.value.field == "event"
    assert d.state is before
    with pytest.raises(SubagentError):
        apply(ManagerState(), MessageClaimed(eid(), sid("nobody"), MessageId("m")))


def test_apply_rejects_a_non_event_naming_the_field() -> None:
    with pytest.raises(SubagentError) as raised:
        apply(ManagerState(), "ChildIdReserved")  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert raised.value.field == "event"


def test_forest_view_reads_owned_sets_without_copying() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    forest = Forest(d.state.activations)
    assert len(forest) == 2
    assert set(forest) == {sid("p"), sid("c")}
    assert set(forest[sid("p")]) == {sid("c")}


def test_tear_2_step_forest_sees_the_steps_pending_writes() -> None:
    d = Driver()
    parent = d.start("p", ROOT)
    d.start("c", parent, lineage=[ROOT])
    step = Step(d.state, EventId("probe"))
    record = step.get(sid("p"))
    assert record is not None
    step.put(attrs.evolve(record, owned=record.owned.remove(sid("c"))))
    step.put(Activation(sid("n"), Phase.RESERVED, None))
    forest = StepForest(step)
    assert dict(forest[sid("p")]) == {}
    assert forest.get(sid("absent")) is None
    assert len(forest) == 3
    assert set(forest) == {sid("p"), sid("c"), sid("n")}


def test_res_8_a_moved_record_equals_its_evolved_copy() -> None:
    agent = AgentRef(sid("c"), 3)
    record = Activation(
        sid("c"),
        Phase.RESIDENT,
        sid("p"),
        parent_agent=AgentRef(sid("p"), 1),
        agent=agent,
        lineage=frozenset({agent}),
        epoch=3,
        lease=7,
        run_id=RunId("r"),
        status=AgentStatus.RUNNING,
        accepted=frozenset({MessageId("m")}),
        owned=PMap({sid("g"): True}),
        announced=True,
        child_failures=2,
        durability=durability_report(sid("c"), FlushOutcome.FAILED),
    )
    moved = record.moved(Phase.FLUSHING)
    assert moved == attrs.evolve(record, phase=Phase.FLUSHING)
    assert record.phase is Phase.RESIDENT


def test_transition_tables_cover_phases_consistently() -> None:
    assert all(edge.target or edge.refused for edge in TRANSITIONS.values())
    assert all(edge.handler for edge in TRANSITIONS.values() if edge.refused is not None)
    sources = {source for source, _ in TRANSITIONS} | {source for source, _ in STATE_TRIGGERED}
    assert sources == set(Phase)


# --------------------------------------------------------------------------- random sequences

NAMES = ("a", "b", "c")
refs = st.sampled_from([ROOT, agent("a"), agent("b"), agent("a", 2)])
names = st.sampled_from(NAMES).map(sid)
messages = st.sampled_from(["m1", "m2", "notice"]).map(MessageId)


def _materialized(name: SessionId, ref: AgentRef, parent: AgentRef) -> ChildMaterialized:
    child = AgentRef(name, ref.token)
    return ChildMaterialized(eid(), name, RunId(f"r-{name}"), child, frozenset({child, parent}))


events = st.one_of(
    st.builds(lambda n, p: ChildIdReserved(eid(), n, p), names, refs),
    st.builds(lambda n: DescriptorSnapshotted(eid(), n), names),
    st.builds(lambda n: ChildPrepared(eid(), n), names),
    st.builds(lambda n, p: ColdResumeStarted(eid(), n, p.session_id), names, refs),
    st.builds(lambda n: LeaseAcquired(eid(), n, 1), names),
    st.builds(lambda n: LeaseRefused(eid(), n, "elsewhere"), names),
    st.builds(lambda n, m: LeaseRefused(eid(), n, "elsewhere", m), names, messages),
    st.builds(lambda n, m: MailboxArrived(eid(), n, m), names, messages),
    st.builds(_materialized, names, refs, refs),
    st.builds(lambda n, h: StartRolledBack(eid(), n, h), names, st.booleans()),
    st.builds(lambda n, m, p: FollowupRequested(eid(), n, m, as_parent(p)), names, messages, refs),
    st.builds(lambda n, m: MessageAccepted(eid(), n, m), names, messages),
    st.builds(lambda n, m: MessageSendFailed(eid(), n, m), names, messages),
    st.builds(lambda n, m: MessageClaimed(eid(), n, m), names, messages),
    st.builds(lambda n, m: MessageDiscarded(eid(), n, m), names, messages),
    st.builds(lambda n: AgentBecameIdle(eid(), n), names),
    st.builds(lambda n: AgentBecameBusy(eid(), n), names),
    st.builds(lambda n, o: FlushReported(eid(), n, o), names, st.sampled_from(FlushOutcome)),
    st.builds(
        lambda n, f: DisposalFinished(
            eid(), n, EpochOutcome(KnownStop.COMPLETED), MessageId("notice"), f
        ),
        names,
        st.frozensets(st.sampled_from(Boundary), max_size=1),
    ),
    st.builds(lambda n, p: InterruptRequested(eid(), n, AncestorInterrupt(live(p))), names, refs),
    st.builds(
        lambda p, m, q: ReportRequested(eid(), p, m, q),
        refs,
        messages,
        st.sampled_from(ReportDelivery),
    ),
    st.builds(lambda p: DrainRequested(eid(), DescendantsOf((live(p),))), refs),
    st.builds(lambda p, n: DrainRequested(eid(), SelectedChildren(live(p), (n,))), refs, names),
    st.just(DrainRequested(eid(), WholeManager())),
    st.builds(lambda p: AgentDisposed(eid(), p), refs),
)


def _start_batch(name: SessionId, parent: AgentRef, message: MessageId) -> list[Event]:
    child = AgentRef(name, 1)
    lineage = frozenset({child, parent, ROOT})
    return [
        ChildIdReserved(eid(), name, parent),
        DescriptorSnapshotted(eid(), name),
        ChildPrepared(eid(), name),
        ChildMaterialized(eid(), name, RunId(f"r-{name}"), child, lineage),
        FollowupRequested(eid(), name, message, as_parent(parent)),
        MessageAccepted(eid(), name, message),
    ]


batches = st.one_of(
    events.map(lambda event: [event]),
    st.builds(_start_batch, names, refs, messages),
)


def _check_invariants(state: ManagerState) -> None:
    for child_id, record in state.activations.items():
        assert record.phase is not Phase.ABSENT
        assert record.child_id == child_id
        # Ownership points at live children that name this owner as their parent.
        for owned in record.owned:
            child = state.activations.get(owned)
            assert child is not None
            assert child.phase in LIVE
            assert child.parent_session == child_id
        # Child-first: nothing flushes or releases while it still owns a child.
        if record.phase in (Phase.FLUSHING, Phase.RELEASING):
            assert not record.owned
        # Settlement and the disposal cutoff are one step: no resident record is settled.
        if record.phase is Phase.RESIDENT:
            assert residency_of(state, child_id) is not Residency.SETTLED


@given(st.lists(batches, max_size=30))
def test_random_event_sequences_keep_the_invariants(sequence: list[list[Event]]) -> None:
    state = ManagerState()
    refused: set[ErrorCode] = set()
    for event in (event for batch in sequence for event in batch):
        try:
            new_state, effects = apply(state, event)
        except SubagentError as error:
            refused.add(error.code)
            continue
        assert all(effect.cause == event.event_id for effect in effects)
        state = new_state
        _check_invariants(state)
    assert refused <= {ErrorCode.ILLEGAL_TRANSITION}


def test_auth_2_cold_resume_refuses_a_stale_parent_or_forged_grant_before_reconstruction() -> None:
    d = Driver()
    stale = ParentAuthority(Presented(agent("root"), None))
    assert rejected(d(FollowupRequested(eid(), sid("cold"), MessageId("m"), stale))) is (
        ErrorCode.UNAUTHORIZED
    )
    forged = UserAuthority(grant_genuine=False)
    assert rejected(d(FollowupRequested(eid(), sid("cold"), MessageId("m"), forged))) is (
        ErrorCode.UNAUTHORIZED
    )
    genuine = UserAuthority(grant_genuine=True)
    assert kinds(d(FollowupRequested(eid(), sid("cold"), MessageId("m"), genuine))) == [ResumeAgent]
