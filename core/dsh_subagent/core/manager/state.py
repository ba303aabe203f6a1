"""The continuation manager's state: Activation records, and the shared disposal steps.

Theory of operation
-------------------
1. ``ManagerState`` holds the draining flag, the scoped closing roots, per-child epoch
   counters and one ``Activation`` record per child id (RES-8, RES-9), all in persistent
   maps, so an ordinary event costs O(log32 n) in the number of live Activations.
2. ``Step`` is the working copy of one ``apply`` call: it rebinds the persistent maps and
   collects effects in order; nothing outside the call ever sees it, so ``apply`` stays pure.
   Its record writes collect in a plain dict over the persistent map and are folded in once
   (when the whole map is read, or at the result): an event's handler and its edge's target
   touch the same record, which then costs one path copy instead of two. Lookups read
   through the step (``get``, and ``StepForest`` for planning a teardown), never folding.
3. Residency is derived from a record's facts, never stored (RES-1). ``settle_if_quiet`` is
   the watcher's decision: a RESIDENT record found SETTLED opens disposal in the same step
   (RES-5, RES-6). A MATERIALIZED record (admission in flight, RES-4) never settles.
4. ``open_disposal`` is memoized by phase (TEAR-1): it cancels the live subtree top-down in
   one step (TEAR-2 step 4, TEAR-3); ``flush_if_released`` moves a disposing record to its
   flush once every owned child has been released (TEAR-2 steps 5-7). A node owning nothing
   takes both edges in one write.
5. These derivations change a phase only along ``STATE_TRIGGERED``, the table of
   state-triggered edges; the event edges are ``manager.TRANSITIONS``, applied by ``apply``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, ValuesView
from collections.abc import Set as AbstractSet
from typing import Final

import attrs

from dsh_subagent.core.authority import AgentRef
from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.manager.effects import (
    CancelAgent,
    Effect,
    FlushSession,
    Reject,
)
from dsh_subagent.core.manager.events import (
    LIVE,
    UNPUBLISHED,
    Phase,
    Trigger,
)
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.residency import (
    ActivationState,
    AgentStatus,
    Residency,
    ResidencyFacts,
    activation_state,
    residency,
)
from dsh_subagent.core.teardown import DurabilityReport, plan_teardown
from dsh_subagent.core.values import CancelKind, EventId, MessageId, RunId, SessionId


@attrs.frozen
class Activation:
    """One child's process-local record (RES-8).

    ``phase`` ABSENT is never stored in a state: a record is created in its edge's target.
    """

    child_id: SessionId
    phase: Phase
    parent_session: SessionId | None
    parent_agent: AgentRef | None = None
    agent: AgentRef | None = None
    lineage: AbstractSet[AgentRef] = frozenset()
    epoch: int = 0
    lease: int | None = None
    run_id: RunId | None = None
    status: AgentStatus = AgentStatus.IDLE
    accepted: frozenset[MessageId] = frozenset()
    owned: PMap[SessionId, bool] = attrs.field(default=PMap())  # immutable: one shared empty
    announced: bool = False
    child_failures: int = 0
    durability: DurabilityReport | None = None

    def facts(self) -> ResidencyFacts:
        """The residency facts of this record (RES-1, RES-4)."""
        return ResidencyFacts(
            status=self.status,
            accepted_count=len(self.accepted),
            owned_count=len(self.owned),
            admission_open=self.phase is Phase.MATERIALIZED,
        )

    def moved(self, phase: Phase, accepted: frozenset[MessageId] | None = None) -> Activation:
        """This record in ``phase`` (and with ``accepted``, when given): the per-event path's
        copy, one positional call where ``attrs.evolve`` walks the fields in Python (same
        result)."""
        values = list(_FIELD_VALUES(self))
        values[_PHASE_AT] = phase
        if accepted is not None:
            values[_ACCEPTED_AT] = accepted
        return Activation(*values)


_FIELD_NAMES: Final = tuple(field.name for field in attrs.fields(Activation))
_FIELD_VALUES: Final = operator.attrgetter(*_FIELD_NAMES)
"""Every field of a record, in ``__init__``'s positional order, in one C-level call."""
_PHASE_AT: Final = _FIELD_NAMES.index("phase")
_ACCEPTED_AT: Final = _FIELD_NAMES.index("accepted")


@attrs.frozen
class ManagerState:
    """The whole manager: every record lives in a persistent map."""

    activations: PMap[SessionId, Activation] = attrs.field(factory=PMap)
    epochs: PMap[SessionId, int] = attrs.field(factory=PMap)
    closing_roots: frozenset[AgentRef] = frozenset()
    draining: bool = False


_P = Phase
# WARNING: these edges are written out one by one; keep them in sync with the derivations
# below and with ``spec.charts.ActivationChart`` (``tests/spec/test_charts.py`` compares).
STATE_TRIGGERED: Final[Mapping[tuple[Phase, Trigger], Phase]] = {
    (_P.RESIDENT, Trigger.SETTLED): _P.DISPOSING,
    (_P.MATERIALIZED, Trigger.DISPOSAL_OPENED): _P.DISPOSING,
    (_P.RESIDENT, Trigger.DISPOSAL_OPENED): _P.DISPOSING,
    (_P.DISPOSING, Trigger.CHILDREN_RELEASED): _P.FLUSHING,
}
"""Edges taken by derivation inside an event (settlement, drain or cascade, release).

They chain within one step: a record that owns no live child passes DISPOSING and lands in
FLUSHING in the same ``apply`` call.
"""

OPENABLE: Final = frozenset({Phase.MATERIALIZED, Phase.RESIDENT})
"""The phases in which disposal can still be opened (the sources of DISPOSAL_OPENED)."""


class Forest(Mapping[SessionId, PMap[SessionId, bool]]):
    """The ownership forest as a read-only view over the records (no copy)."""

    def __init__(self, records: PMap[SessionId, Activation]) -> None:
        self._records = records

    def __getitem__(self, key: SessionId) -> PMap[SessionId, bool]:
        return self._records[key].owned

    def __iter__(self) -> Iterator[SessionId]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def values(self) -> ValuesView[PMap[SessionId, bool]]:
        """Each record's owned map, in one walk of the records (no lookup per key)."""
        return _Owned(self)


class _Owned(ValuesView[PMap[SessionId, bool]]):
    __slots__ = ()
    _mapping: Forest  # set by ``MappingView.__init__``

    def __iter__(self) -> Iterator[PMap[SessionId, bool]]:
        return (record.owned for record in self._mapping._records.values())


class StepForest(Mapping[SessionId, PMap[SessionId, bool]]):
    """The ownership forest as one step sees it, its pending writes included (rule 2).

    A lookup reads through the step, so planning a teardown mid-step folds nothing; only a
    whole walk (``iter``, ``len``) folds the step's writes first.
    """

    __slots__ = ("_step",)

    def __init__(self, step: Step) -> None:
        self._step = step

    def __getitem__(self, key: SessionId) -> PMap[SessionId, bool]:
        record = self._step.get(key)
        if record is None:
            raise KeyError(key)
        return record.owned

    def __iter__(self) -> Iterator[SessionId]:
        return iter(self._step.records)

    def __len__(self) -> int:
        return len(self._step.records)


class Step:
    """The working copy of one ``apply`` call: rebinds persistent maps, collects effects."""

    __slots__ = (
        "_records",
        "_written",
        "cause",
        "closing_roots",
        "draining",
        "effects",
        "entering",
        "epochs",
    )

    def __init__(self, state: ManagerState, cause: EventId) -> None:
        self._records = state.activations
        self._written: dict[SessionId, Activation | None] = {}  # None: dropped (rule 2)
        self.epochs = state.epochs
        self.closing_roots = state.closing_roots
        self.draining = state.draining
        self.cause = cause
        self.effects: list[Effect] = []
        self.entering = Phase.ABSENT
        """The phase a per-child handler writes its event's own record in (rule 2)."""

    @property
    def records(self) -> PMap[SessionId, Activation]:
        """Every record, this step's writes folded in (rule 2)."""
        if self._written:
            records = self._records
            for child_id, record in self._written.items():
                if record is None:
                    records = records.remove(child_id)
                else:
                    records = records.set(child_id, record)
            self._records = records
            self._written.clear()
        return self._records

    def get(self, child_id: SessionId | None) -> Activation | None:
        if child_id in self._written:  # never None: only records are written
            return self._written[child_id]
        return None if child_id is None else self._records.get(child_id)

    def live(self, child_id: SessionId | None) -> Activation | None:
        record = self.get(child_id)
        return record if record is not None and record.phase in LIVE else None

    def put(self, record: Activation) -> Activation:
        self._written[record.child_id] = record
        return record

    def drop(self, child_id: SessionId) -> None:
        self._written[child_id] = None

    def reject(self, code: ErrorCode, reason: str) -> None:
        self.effects.append(Reject(self.cause, code, reason))

    def lineage_closing(
        self, lineage: AbstractSet[AgentRef], besides: AgentRef | None = None
    ) -> bool:
        """TEAR-10: draining, or the lineage reaches a scoped closing root (other than
        ``besides``). Walks the few roots, never the lineage (a chain may be deep)."""
        if self.draining or not self.closing_roots:
            return self.draining
        return any(root in lineage and root != besides for root in self.closing_roots)

    def agent_closing(self, agent: AgentRef | None) -> bool:
        """Is ``agent`` closing: a member, or a resident whose lineage is closing?"""
        if self.draining or agent in self.closing_roots:
            return True
        if not self.closing_roots:  # no closing root: no lineage is closing (TEAR-10)
            return False
        record = self.live(None if agent is None else agent.session_id)
        return record is not None and record.agent == agent and self.lineage_closing(record.lineage)

    def result(self) -> tuple[ManagerState, tuple[Effect, ...]]:
        state = ManagerState(self.records, self.epochs, self.closing_roots, self.draining)
        return state, tuple(self.effects)


_RESIDENT: Final = Phase.RESIDENT  # a module name: ``Phase.X`` pays EnumType's getattr hook


def settle_if_quiet(step: Step, record: Activation) -> None:
    """The settlement decision and the disposal cutoff, in one step (RES-5, RES-6). An
    accounted message keeps a child running (RES-2): no facts are derived for it then."""
    if (
        record.phase is _RESIDENT
        and not record.accepted
        and residency(record.facts()) is Residency.SETTLED
    ):
        open_disposal(step, (record.child_id,), Trigger.SETTLED)


def open_disposal(
    step: Step, roots: Iterable[SessionId], trigger: Trigger = Trigger.DISPOSAL_OPENED
) -> None:
    """Open disposal on ``roots`` and their live subtrees: cancel top-down now (TEAR-1..3).

    ``trigger`` names the roots' edge (settlement or an opening); the subtree below is always
    ``DISPOSAL_OPENED``. Every cancel precedes every flush; a node owning nothing flushes at
    once, leaves first.
    """
    roots = tuple(roots)
    firsts = frozenset(roots)
    flushing: list[SessionId] = []
    for node in plan_teardown(StepForest(step), roots).cancel_order:
        record = step.get(node)
        assert record is not None  # the plan walks the records
        edge = trigger if node in firsts else Trigger.DISPOSAL_OPENED
        target = STATE_TRIGGERED.get((record.phase, edge))
        if target is None:
            continue  # already disposing: memoized by phase (TEAR-1)
        released = _released(record, target)
        step.put(record.moved(target if released is None else released))
        step.effects.append(CancelAgent(step.cause, node, CancelKind.PARENT, keep_inbox=False))
        if released is not None:
            flushing.append(node)
    step.effects.extend(FlushSession(step.cause, node) for node in reversed(flushing))


def flush_if_released(step: Step, record: Activation) -> None:
    """Once every owned child is released, quiesce and flush (TEAR-2 steps 5-7)."""
    released = _released(record, record.phase)
    if released is not None:
        step.put(record.moved(released))
        step.effects.append(FlushSession(step.cause, record.child_id))


def _released(record: Activation, phase: Phase) -> Phase | None:
    """Where the CHILDREN_RELEASED edge leads ``record`` from ``phase``, if it applies.

    The caller writes that phase (one copy with the edge before it) and emits the flush.
    """
    return None if record.owned else STATE_TRIGGERED.get((phase, Trigger.CHILDREN_RELEASED))


def activation_state_of(state: ManagerState, child_id: SessionId) -> ActivationState | None:
    """The public residency of ``child_id``: running, waiting, or None (DESIGN decision 3)."""
    record = state.activations.get(child_id)
    if record is None or record.phase in UNPUBLISHED:
        return None
    return activation_state(record.facts())


def residency_of(state: ManagerState, child_id: SessionId) -> Residency | None:
    """The derived residency of a published record, or None (RES-1)."""
    record = state.activations.get(child_id)
    if record is None or record.phase in UNPUBLISHED:
        return None
    return residency(record.facts())
