"""The executable declarations: one python-statemachine chart per core machine.

Theory of operation
-------------------
1. Each chart is written by hand from the catalog's rules, with states built from the core's
   own enums (``States.from_enum``) so both sides share one vocabulary. Events are named after
   the core's event classes.
2. The chart is the oracle, the core the implementation: ``tests/spec/test_charts.py`` asserts
   that each chart's edge set equals the core's transition table, and the stateful machines
   drive both in lockstep. Neither is generated from the other.
3. Charts are strict: an event without a transition raises ``TransitionNotAllowed``
   (``allow_event_without_transition = False``) and callback errors propagate.
4. ``edges(chart)`` lists ``(source, event, target)`` triples for comparison and diagrams.
5. python-statemachine comes with the ``spec`` extra; without it, importing the charts raises
   ``MissingExtra`` naming that extra.
"""

from __future__ import annotations

import operator
from functools import reduce

from dsh_subagent.core.extras import MissingExtra

try:
    from statemachine import State, StateChart
    from statemachine.states import States
    from statemachine.transition_list import TransitionList
except ModuleNotFoundError as err:  # the base install has no python-statemachine
    raise MissingExtra("dsh_subagent.spec's charts", "python-statemachine", "spec") from err

from dsh_subagent.core.activity import ActivityPhase
from dsh_subagent.core.jobs import ABSENT, JobStatus
from dsh_subagent.core.manager.events import Phase
from dsh_subagent.core.oneshot import RunPhase
from dsh_subagent.core.oneshot_observer import RunObservation
from dsh_subagent.core.residency import AgentStatus, Residency, ResidencyFacts
from dsh_subagent.spec.inbox import MessageState

Edge = tuple[object, str, object]


def edges(chart: type[StateChart[object]]) -> frozenset[Edge]:
    """Every ``(source value, event name, target value)`` of ``chart``."""
    return frozenset(
        (state.value, str(event), transition.target.value)
        for state in chart.states
        for transition in state.transitions
        for event in transition.events
    )


def _self_loops(*states: State) -> TransitionList:
    """A fresh ``state.to.itself()`` for each of ``states``, joined (one event's loops)."""
    loops: list[TransitionList] = [
        state.to.itself()  # type: ignore[no-untyped-call]  # untyped in python-statemachine
        for state in states
    ]
    return reduce(operator.or_, loops)


def _every(states: States, *, but: State | None = None) -> list[State]:
    """Every state of a chart, in its enum's order, less ``but``."""
    return [state for state in states if state is not but]


class OneShotRunChart(StateChart[object]):
    """A one-shot run: publication before fulfilment, rollback, result, idempotent dispose.

    Rules: ONE-4, ONE-7, ONE-8, ONE-9, ONE-16.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    # ROLLED_BACK and DISPOSED are terminal but absorb repeated aborts and disposes, and a
    # python-statemachine final state may not declare transitions, so none is marked final.
    _ = States.from_enum(RunPhase, initial=RunPhase.STARTING)

    # Fulfilment of provider.start publishes the child (ONE-4); publication may win a race
    # against an abort that arrived during setup (ONE-7).
    ChildPublished = _.STARTING.to(_.PUBLISHED) | _.ROLLING_BACK.to(_.PUBLISHED)
    # Abort before publication rolls back; after publication it only cancels remaining work.
    StartAborted = (
        _.STARTING.to(_.ROLLING_BACK)
        | _.ROLLING_BACK.to.itself()
        | _.ROLLED_BACK.to.itself()
        | _.PUBLISHED.to.itself()
        | _.SETTLED.to.itself()
        | _.DISPOSING.to.itself()
        | _.AWAITING_QUIESCENCE.to.itself()
        | _.AWAITING_RESULT.to.itself()
        | _.DISPOSED.to.itself()
    )
    # The provider's rejection ends an unpublished start, with no event pair.
    StartFailed = _.STARTING.to(_.ROLLED_BACK) | _.ROLLING_BACK.to(_.ROLLED_BACK)
    # A result settles (or faults) once; disposal waits for it (ONE-8, ONE-9).
    ResultSettled = (
        _.PUBLISHED.to(_.SETTLED)
        | _.DISPOSING.to(_.AWAITING_QUIESCENCE)
        | _.AWAITING_RESULT.to(_.DISPOSED)
    )
    ResultFaulted = (
        _.PUBLISHED.to(_.SETTLED)
        | _.DISPOSING.to(_.AWAITING_QUIESCENCE)
        | _.AWAITING_RESULT.to(_.DISPOSED)
    )
    # dispose() is idempotent: a repeated request is a no-op in every disposal phase.
    DisposeRequested = (
        _.PUBLISHED.to(_.DISPOSING)
        | _.SETTLED.to(_.AWAITING_QUIESCENCE)
        | _.DISPOSING.to.itself()
        | _.AWAITING_QUIESCENCE.to.itself()
        | _.AWAITING_RESULT.to.itself()
        | _.DISPOSED.to.itself()
    )
    ChildQuiesced = _.DISPOSING.to(_.AWAITING_RESULT) | _.AWAITING_QUIESCENCE.to(_.DISPOSED)


class RunObservationChart(StateChart[object]):
    """One run id in the observed lifecycle stream: started once, ended once, never reused.

    Rules: EVT-3, EVT-6, EVT-7, EVT-16, ONE-16.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    # ENDED is final: a repeated start or a second end has no edge and is refused.
    _ = States.from_enum(RunObservation, initial=RunObservation.UNSEEN, final=RunObservation.ENDED)

    # A one-shot publication (the service's own start) or a start another emitter published.
    RunPublished = _.UNSEEN.to(_.OPEN)
    RunStarted = _.UNSEEN.to(_.OPEN)
    # The one-shot result (settled or faulted), or an end another emitter published.
    RunSettled = _.OPEN.to(_.ENDED)
    RunFaulted = _.OPEN.to(_.ENDED)
    RunEnded = _.OPEN.to(_.ENDED)


class InboxMessageChart(StateChart[object]):
    """One accepted inbox message leaves exactly once, by claim or by discard (HARNESS-11)."""

    allow_event_without_transition = False
    catch_errors_as_events = False

    _ = States.from_enum(
        MessageState,
        initial=MessageState.ACCEPTED,
        final=[MessageState.CLAIMED, MessageState.DISCARDED],
    )

    claimed = _.ACCEPTED.to(_.CLAIMED)
    discarded = _.ACCEPTED.to(_.DISCARDED)


class ActivationChart(StateChart[object]):
    """One continuable child's Activation record: start phases, rollback, residency, teardown.

    Rules: CONT-3, CONT-5, CONT-7, CONT-9, CONT-10, CONT-14, CONT-16, CONT-17, RES-6, TEAR-1,
    TEAR-2, TEAR-7. Guards take the facts as keyword arguments of ``send``.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    _ = States.from_enum(Phase, initial=Phase.ABSENT)

    # A fresh start reserves the id; a reservation of a live id is refused (DUPLICATE_CHILD).
    ChildIdReserved = (
        _.ABSENT.to(_.RESERVED, unless="admission_lost")
        | _.ABSENT.to.itself(cond="admission_lost")
        | _self_loops(*_every(_, but=_.ABSENT))
    )
    DescriptorSnapshotted = _.RESERVED.to(_.SNAPSHOTTED)
    # After the provider's await, and after materialization, admission is checked again: a
    # start that lost it (DRAINING, ACTIVATION_CLOSING) is dropped (CONT-5, CONT-10).
    ChildPrepared = _.SNAPSHOTTED.to(_.PREPARED, unless="admission_lost") | _.SNAPSHOTTED.to(
        _.ABSENT, cond="admission_lost"
    )
    ColdResumeStarted = _.ABSENT.to(_.RESUMING, unless="admission_lost") | _.ABSENT.to.itself(
        cond="admission_lost"
    )
    # A cold resume materializes only under the child's lease; a lease held elsewhere drops
    # it (ACTIVATION_HELD), and so does a materialization without one (LEASE-1, LEASE-2).
    LeaseAcquired = _.RESUMING.to.itself()
    LeaseRefused = _.RESUMING.to(_.ABSENT)
    # A durable-mailbox message never changes the phase: delivered when live, a resume when
    # absent, else left pending in the store (DUR-22, DUR-23).
    MailboxArrived = _self_loops(*_every(_))
    ChildMaterialized = (
        _.PREPARED.to(_.MATERIALIZED, unless="admission_lost")
        | _.PREPARED.to(_.ABSENT, cond="admission_lost")
        | _.RESUMING.to(_.MATERIALIZED, unless="admission_lost")
        | _.RESUMING.to(_.ABSENT, cond="admission_lost")
    )
    # Failure before the first acceptance: unpublished records vanish silently; a published
    # one goes through ordinary disposal, closing its event pair without a notice (CONT-9).
    # A drain that opened the disposal first leaves nothing for the rollback (TEAR-13, ERR-7).
    StartRolledBack = (
        _.RESERVED.to(_.ABSENT)
        | _.SNAPSHOTTED.to(_.ABSENT)
        | _.PREPARED.to(_.ABSENT)
        | _.RESUMING.to(_.ABSENT)
        | _.MATERIALIZED.to(_.DISPOSING)
        | _self_loops(_.DISPOSING, _.FLUSHING, _.RELEASING)
    )
    # Routing never changes the phase: enqueue, wake, cold-resume or wait for release.
    FollowupRequested = _self_loops(
        _.ABSENT, _.MATERIALIZED, _.RESIDENT, _.DISPOSING, _.FLUSHING, _.RELEASING
    )
    MessageAccepted = _.MATERIALIZED.to(_.RESIDENT) | _.RESIDENT.to.itself()
    MessageSendFailed = _.MATERIALIZED.to.itself() | _.RESIDENT.to.itself()
    MessageClaimed = _self_loops(_.MATERIALIZED, _.RESIDENT, _.DISPOSING, _.FLUSHING, _.RELEASING)
    MessageDiscarded = _self_loops(_.MATERIALIZED, _.RESIDENT, _.DISPOSING, _.FLUSHING, _.RELEASING)
    AgentBecameIdle = _self_loops(_.MATERIALIZED, _.RESIDENT, _.DISPOSING, _.FLUSHING, _.RELEASING)
    AgentBecameBusy = _self_loops(_.MATERIALIZED, _.RESIDENT, _.DISPOSING, _.FLUSHING, _.RELEASING)
    # State-triggered edges, taken inside another event: settlement opens disposal in the same
    # step (RES-6); drain or a parent's disposal opens it top-down (TEAR-2 step 4); a node
    # flushes once every owned child is released (child-first, TEAR-3).
    settled = _.RESIDENT.to(_.DISPOSING)
    disposal_opened = _.MATERIALIZED.to(_.DISPOSING) | _.RESIDENT.to(_.DISPOSING)
    children_released = _.DISPOSING.to(_.FLUSHING)
    FlushReported = _.FLUSHING.to(_.RELEASING)
    DisposalFinished = _.RELEASING.to(_.ABSENT)

    def admission_lost(self, admission_lost: bool = False) -> bool:
        """Guard: the start lost admission while it awaited (a drain or closing parent)."""
        return admission_lost


def _busy(facts: ResidencyFacts) -> bool:
    return facts.status is AgentStatus.RUNNING or facts.accepted_count > 0 or facts.admission_open


class ResidencyChart(StateChart[object]):
    """An Activation's derived residency (RES-1): running, waiting, settled, plus absent.

    The guards restate RES-1 over the facts *after* the event (``send(event, facts=...)``):
    running while a driver runs, an admission is open or an accepted waking message is
    unclaimed; else waiting while it owns undisposed children; else settled, at which point the
    manager opens disposal in the same step (RES-6), so no fact event follows SETTLED.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    absent = State(initial=True, value="absent")
    _ = States.from_enum(Residency, initial=None)

    materialized = absent.to(_.RUNNING)
    released = _.SETTLED.to(absent)

    agent_started = _.RUNNING.to.itself() | _.WAITING.to(_.RUNNING)
    message_admitted = _.RUNNING.to.itself() | _.WAITING.to(_.RUNNING)
    admission_closed = (
        _.RUNNING.to.itself(cond="busy")
        | _.RUNNING.to(_.WAITING, cond="waiting")
        | _.RUNNING.to(_.SETTLED, cond="quiet")
    )
    agent_idled = (
        _.RUNNING.to.itself(cond="busy")
        | _.RUNNING.to(_.WAITING, cond="waiting")
        | _.RUNNING.to(_.SETTLED, cond="quiet")
    )
    message_left = (
        _.RUNNING.to.itself(cond="busy")
        | _.RUNNING.to(_.WAITING, cond="waiting")
        | _.RUNNING.to(_.SETTLED, cond="quiet")
    )
    child_owned = _.RUNNING.to.itself() | _.WAITING.to.itself()
    child_released = (
        _.RUNNING.to.itself()
        | _.WAITING.to.itself(cond="waiting")
        | _.WAITING.to(_.SETTLED, cond="quiet")
    )

    def busy(self, facts: ResidencyFacts) -> bool:
        """Guard: a driver runs, an admission is open, or a waking message is unclaimed."""
        return _busy(facts)

    def waiting(self, facts: ResidencyFacts) -> bool:
        """Guard: quiescent but still owning an undisposed child."""
        return not _busy(facts) and facts.owned_count > 0

    def quiet(self, facts: ResidencyFacts) -> bool:
        """Guard: quiescent and owning nothing."""
        return not _busy(facts) and facts.owned_count == 0


class JobChart(StateChart[object]):
    """One background job: running, optional stopping, one terminal status, then dropped.

    Rules: BG-4, BG-8, BG-31, BG-35, BG-36, BG-39. ``absent`` is before registration and after
    the owner's release; events for a whole owner are sent to each of its jobs.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    absent = State(initial=True, value=ABSENT)
    _ = States.from_enum(JobStatus, initial=None)

    # The starter returned: the id is allocated and the job runs (BG-2, BG-4).
    JobStarted = absent.to(_.RUNNING)
    # The first settlement wins (BG-31). A producer settles once: only a force-failed job (a
    # raising teardown cancel, below) still sees its producer settle, and nothing changes.
    JobCompleted = _.RUNNING.to(_.COMPLETED) | _.STOPPING.to(_.COMPLETED) | _.FAILED.to.itself()
    JobKilled = _.RUNNING.to(_.KILLED) | _.STOPPING.to(_.KILLED) | _.FAILED.to.itself()
    JobFailed = _.RUNNING.to(_.FAILED) | _.STOPPING.to(_.FAILED) | _.FAILED.to.itself()
    # A teardown cancel that raised force-fails a live job (BG-39).
    CancelRaised = (
        _.RUNNING.to(_.FAILED)
        | _.STOPPING.to(_.FAILED)
        | _self_loops(_.COMPLETED, _.KILLED, _.FAILED)
    )
    # A kill only asks; once the producer's cancel returned the job is stopping (BG-35).
    KillRequested = _self_loops(_.RUNNING, _.STOPPING, _.COMPLETED, _.KILLED, _.FAILED)
    CancelReturned = (
        _.RUNNING.to(_.STOPPING)
        | _.STOPPING.to.itself()
        | _self_loops(_.COMPLETED, _.KILLED, _.FAILED)
    )
    # Reads and owner disposal only set the reported bit (BG-36, BG-39).
    OutputRead = _self_loops(_.RUNNING, _.STOPPING, _.COMPLETED, _.KILLED, _.FAILED)
    OwnerDisposed = _self_loops(_.RUNNING, _.STOPPING, _.COMPLETED, _.KILLED, _.FAILED)
    # Once every job of the disposed owner is terminal they are dropped (BG-8).
    OwnerReleased = _.COMPLETED.to(absent) | _.KILLED.to(absent) | _.FAILED.to(absent)


class AgentActivityChart(StateChart[object]):
    """One agent's activity: idle, maintenance or a running driver, and the wake latch.

    Rules: HARNESS-2, HARNESS-3, HARNESS-5, HARNESS-8, HARNESS-9. The latch and the abort
    cause are data within a phase: every send, wake and cancel keeps the phase, except a wake
    from idle, which starts a driver.
    """

    allow_event_without_transition = False
    catch_errors_as_events = False

    _ = States.from_enum(ActivityPhase, initial=ActivityPhase.IDLE)

    # A send is classified (redirect after an abort) and inserted in any phase (HARNESS-3).
    MessageSent = _self_loops(_.IDLE, _.MAINTENANCE, _.RUNNING)
    # Idle starts a driver; maintenance or an aborted activity latches; a live driver claims.
    WakeRequested = _.IDLE.to(_.RUNNING) | _.MAINTENANCE.to.itself() | _.RUNNING.to.itself()
    # Cancel clears (unless keep_inbox) and aborts an activity; idle arms nothing (HARNESS-5).
    CancelRequested = _self_loops(_.IDLE, _.MAINTENANCE, _.RUNNING)
    InboxCleared = _self_loops(_.MAINTENANCE, _.RUNNING)
    # Maintenance only from true idle; status stays idle throughout (HARNESS-8).
    MaintenanceRequested = _.IDLE.to(_.MAINTENANCE)
    MaintenanceFinished = _.MAINTENANCE.to(_.IDLE)
    # Pending work starts another turn with a fresh signal; the driver's end replays a latch.
    TurnEnded = _.RUNNING.to.itself()
    DriverFinished = _.RUNNING.to(_.IDLE)


CHARTS: dict[str, type[StateChart[object]]] = {
    "one-shot-run": OneShotRunChart,
    "run-observation": RunObservationChart,
    "inbox-message": InboxMessageChart,
    "activation": ActivationChart,
    "residency": ResidencyChart,
    "job": JobChart,
    "agent-activity": AgentActivityChart,
}
"""Every chart, by the file stem its diagram is written under."""
