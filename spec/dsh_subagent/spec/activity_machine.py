"""A Hypothesis lockstep machine: the core's activity machine against its chart and HARNESS-3.

``ActivityMachine`` plays a pure performer of ``core.activity`` (the role ``ReferenceAgent``
plays for real): it keeps a model inbox (counts per list) and a model abort signal, performs
every effect, and applies the follow-up events (``Wake``, ``FinishCancel``, ``ReplayWake``) as
the adapter does. Hypothesis draws the stimuli: sends, cancels, removals, claims, turn ends and
the end of an activity. After every applied event:
- ``AgentActivityChart``, driven with the event's name, must land on the core's phase; an event
  the core refuses must have no edge in the chart;
- the model signal's first reason equals the core's ``cause`` (HARNESS-5), and the emitted
  statuses follow the core's status (HARNESS-2).
The machine also keeps its own account of an owed wake, from the catalog's words, not the
core's code: a waking send owes one when it lands in maintenance or in an aborted activity
whose cause is not ``disposed``; a clearing cancel or a new turn settles it. When an activity
ends, a driver starts again exactly when a wake is owed and work is pending (HARNESS-3).
"""

from __future__ import annotations

from typing import assert_never

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from statemachine.exceptions import TransitionNotAllowed

from dsh_subagent.core import activity
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import CancelCause, CancelKind, InboxTarget
from dsh_subagent.spec.charts import AgentActivityChart

CAUSES = st.sampled_from(
    [
        CancelCause(CancelKind.USER),
        CancelCause(CancelKind.PARENT),
        CancelCause(CancelKind.HOOK, "stop"),
        CancelCause(CancelKind.DISPOSED),
    ]
)
TARGETS = st.sampled_from(list(InboxTarget))


class ActivityMachine(RuleBasedStateMachine):
    """Drives ``activity.apply`` and one ``AgentActivityChart`` in lockstep."""

    def __init__(self) -> None:
        super().__init__()
        self.state = activity.ActivityState()
        self.chart = AgentActivityChart()
        self.pending = dict.fromkeys(InboxTarget, 0)
        self.signal: CancelCause | None = None  # the model abort signal's first reason
        self.status = AgentStatus.IDLE  # the last emitted status
        self.owed = False
        self.starts = 0
        self.inserted: list[InboxTarget] = []

    # ------------------------------------------------------------------ plumbing

    def _apply(self, event: activity.ActivityEvent) -> bool:
        """Apply ``event`` to core and chart; perform the effects; False when both refuse."""
        name = type(event).__name__
        try:
            after, effects = activity.apply(self.state, event)
        except SubagentError as error:
            assert error.code is ErrorCode.ILLEGAL_TRANSITION, error  # noqa: PT017
            try:
                self.chart.send(name)
            except TransitionNotAllowed:
                return False
            phase = self.state.phase
            raise AssertionError(f"core refused {name} in {phase}; the chart accepts it") from error
        self.chart.send(name)
        assert self.chart.current_state_value is after.phase, (name, after)
        self.state = after
        for effect in effects:
            self._perform(effect)
        return True

    def _perform(self, effect: activity.ActivityEffect) -> None:
        match effect:
            case activity.PrepareDriver():
                assert self.state.phase is activity.ActivityPhase.IDLE
            case activity.InsertMessage(target=target):
                self.pending[target] += 1
                self.inserted.append(target)
            case activity.Wake(after_abort=after_abort):
                self._apply(activity.WakeRequested(after_abort))
            case activity.StartDriver() | activity.StartMaintenance():
                self.signal, self.owed = None, False
                self.starts += 1
            case activity.EmitStatus(status=status):
                assert status is not self.status, "a status is emitted only when it changes"
                self.status = status
            case activity.ClearInbox():
                self.pending = dict.fromkeys(InboxTarget, 0)
            case activity.FinishCancel(cause=cause):
                self._apply(activity.InboxCleared(cause))
            case activity.AbortActivity(cause=cause):
                assert self.state.phase is not activity.ActivityPhase.IDLE
                self.signal = self.signal or cause  # a signal keeps its first reason
            case activity.NextTurn():
                self.signal, self.owed = None, False
            case activity.ReplayWake():
                if any(self.pending.values()):
                    self._apply(activity.WakeRequested())
            case _:  # pragma: no cover (mypy proves the match exhaustive)
                assert_never(effect)

    @property
    def _active(self) -> bool:
        return self.state.phase is not activity.ActivityPhase.IDLE

    # ------------------------------------------------------------------ rules

    @rule(to=TARGETS, wakeup=st.booleans())
    def MessageSent(self, to: InboxTarget, wakeup: bool) -> None:
        aborted = self._active and self.signal is not None
        maintenance = self.state.phase is activity.ActivityPhase.MAINTENANCE
        disposed = self.signal is not None and self.signal.kind is CancelKind.DISPOSED
        self.inserted = []
        self._apply(activity.MessageSent(to, wakeup))
        redirected = wakeup and aborted
        assert self.inserted == [InboxTarget.NEXT_TURN if redirected else to], "HARNESS-3"
        if wakeup and (maintenance or aborted) and not disposed:
            self.owed = True

    @rule(cause=CAUSES, keep_inbox=st.booleans())
    def CancelRequested(self, cause: CancelCause, keep_inbox: bool) -> None:
        before, first = dict(self.pending), self.signal
        self._apply(activity.CancelRequested(cause, keep_inbox))
        if keep_inbox:
            assert self.pending == before, "keep_inbox discards nothing (HARNESS-5)"
        elif self._active:
            self.owed = False
        assert self.signal == ((first or cause) if self._active else first)

    @rule(to=TARGETS)
    def remove(self, to: InboxTarget) -> None:
        """``remove(id)`` of one pending message: an inbox change the machine never sees."""
        self.pending[to] = max(0, self.pending[to] - 1)

    @precondition(lambda self: self.state.phase is activity.ActivityPhase.RUNNING)
    @rule()
    def claim(self) -> None:
        """A step claims all next-step input and one next-turn item."""
        self.pending[InboxTarget.NEXT_STEP] = 0
        self.pending[InboxTarget.NEXT_TURN] = max(0, self.pending[InboxTarget.NEXT_TURN] - 1)

    @rule()
    def MaintenanceRequested(self) -> None:
        was_idle = not self._active
        assert self._apply(activity.MaintenanceRequested()) == was_idle, "only from idle"
        if was_idle:
            assert self.status is AgentStatus.IDLE, "maintenance reports idle (HARNESS-2)"

    @rule()
    def TurnEnded(self) -> None:
        if self._apply(activity.TurnEnded(any(self.pending.values()))):
            assert self.state.phase is activity.ActivityPhase.RUNNING

    @rule()
    def MaintenanceFinished(self) -> None:
        self._finish(activity.MaintenanceFinished())

    @rule()
    def DriverFinished(self) -> None:
        self._finish(activity.DriverFinished())

    def _finish(self, event: activity.ActivityEvent) -> None:
        owed, starts = self.owed, self.starts
        if not self._apply(event):
            return
        restarted = self.starts > starts
        assert restarted == (owed and any(self.pending.values())), "a latched wake (HARNESS-3)"
        if not restarted:
            self.owed = False

    # ------------------------------------------------------------------ invariants

    @invariant()
    def performer_agrees_with_the_core(self) -> None:
        assert self.chart.current_state_value is self.state.phase
        assert self.status is self.state.status
        if self._active:
            assert self.signal == self.state.cause
        else:
            assert not self.state.latched
            assert not self.owed
