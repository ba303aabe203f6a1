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
"""

from __future__ import annotations

from statemachine import StateChart
from statemachine.states import States

from dsh_subagent.core.inbox import MessageState
from dsh_subagent.core.oneshot import RunPhase

Edge = tuple[object, str, object]


def edges(chart: type[StateChart[object]]) -> frozenset[Edge]:
    """Every ``(source value, event name, target value)`` of ``chart``."""
    return frozenset(
        (state.value, str(event), transition.target.value)
        for state in chart.states
        for transition in state.transitions
        for event in transition.events
    )


class OneShotRunChart(StateChart[object]):
    """A one-shot run: publication before fulfilment, rollback, result, idempotent dispose.

    Rules: ONE-4, ONE-7, ONE-8, ONE-9, ONE-16, EVT-6.
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


CHARTS: dict[str, type[StateChart[object]]] = {
    "one-shot-run": OneShotRunChart,
    "inbox-message": InboxMessageChart,
}
"""Every chart, by the file stem its diagram is written under."""
