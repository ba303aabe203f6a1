"""The reference asyncio agent: a durable two-list inbox driving turns and steps.

Theory of operation
-------------------
1. The inbox is two ordered lists, ``next-turn`` and ``next-step``, with message ids unique
   across both. Every mutation is first appended as ``agent/inbox/spliced`` (shape from
   ``core.wire``), then applied, then notified synchronously: ``discarded`` for cancelled
   removals, ``inserted`` for insertions; claims notify ``claimed`` with their turn
   (HARNESS-10/11). On construction the inbox replays the splices of the own suffix.
2. The activity (idle, maintenance or a running driver), the abort cause and the wake latch
   are the pure ``core.activity`` machine (HARNESS-2/3/5/8). The agent only reports what
   happened (``send``, ``cancel``, a turn's or task's end) and performs the effects: splice,
   clear, start a driver or a maintenance activity, abort, emit ``agent/status``. It decides
   nothing about the activity itself; ``_perform`` matches every effect.
3. Each activity has its own abort controller and completion future (``when_idle``); a new
   turn of the same driver gets a fresh controller (``NextTurn``).
4. All of ``send``/``cancel`` and their helpers are synchronous (HARNESS-32).
5. A driver runs turns while input is pending. A turn appends ``turn/start``; its first step
   claims all next-step input plus one next-turn item, later steps only next-step input; an
   empty first claim ends ``completed`` without a model call; the pre-step hook may end it
   ``blocked``. Each step appends ``step/start``, ``user/message``s, chunks, the assistant
   message, tool results and ``step/end``. ``turn/end`` records completed, max-tokens
   (sticky), aborted with its cause, or error (HARNESS-9). Turn numbers continue from the
   last ``turn/start`` in the log, seed included.
6. Budgets (BUDGET-12): with a ``StepMeter`` installed, a step reserves its model request
   (``meter.admit``) in the span that admits it, after ``step_entering`` and before
   ``step/start``; a refusal ends the turn ``budget-exhausted`` naming the limit. The
   request carries the grant's output cap, and the reservation is settled once the model
   answers (its reported usage) or fails (the whole grant). The charge the meter returns
   is recorded in the same span: in the ``assistant/message`` of the answer, or as a
   ``budget/charged`` record when no answer is recorded (failed, aborted).
7. Each agent has a ``PromptComposer`` (system-prompt sections and runtime context, scoped
   over a parent composer) and a ``ScopedTools`` layer over the global tools; both are
   visible in every ``ModelRequest``. ``step_entering`` fires (vetoable) once the pre-step
   decision is to enter a step, before ``step/start``: a raising listener ends the turn
   ``error``.
7. A model that ``ScopesToolCalls`` (pydantic-ai, whose run defers our tools) wraps each of
   its step's tool calls as the loop runs it: its ``tool_scope(call)`` puts the call under
   the framework's tool span (OBS-2).
8. The five public emitters (``inserted``, ``claimed``, ``discarded``, ``status_changed``,
   ``step_entering``) are made on first access: an emitter nobody asked for has no
   listener, so its notifications are not built at all (fewer objects per held child).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar, assert_never, overload

from dsh_subagent.adapters.protocols import (
    AgentStatus,
    CancelCause,
    InboxNotification,
    InboxTarget,
    Model,
    ModelRequest,
    Session,
    StatusNotification,
    StepEntering,
    StepGrant,
    StepMeter,
    ToolCall,
)
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.signals import (
    AbortController,
    AbortSignal,
    Emitter,
    Scope,
    Unsubscribe,
    abortable,
    race_abort,
)
from dsh_subagent.core import activity, wire
from dsh_subagent.core.activity import (
    AbortActivity,
    ActivityEffect,
    ActivityEvent,
    ActivityPhase,
    ClearInbox,
    EmitStatus,
    FinishCancel,
    InsertMessage,
    NextTurn,
    PrepareDriver,
    ReplayWake,
    StartDriver,
    StartMaintenance,
    Wake,
)
from dsh_subagent.core.budget_log import BUDGET_CHARGED
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_int
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    INBOX_SPLICED,
    STEP_END,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    AgentOptions,
    DataBlock,
    JsonObject,
    JsonValue,
    MessageId,
    SessionId,
    TurnEndReason,
    UserMessage,
)

T = TypeVar("T")
P = TypeVar("P")
PreStepHook = Callable[[tuple[UserMessage, ...], int, int, AbortSignal], Awaitable[bool]]
"""``(claimed, turn, step, signal) -> enter?``; returning False ends the turn ``blocked``."""

_log = logging.getLogger(__name__)


class ScopesToolCalls(Protocol):
    """A model that wraps each tool call of its step while the loop runs it (rule 7).

    Recognised by its ``tool_scope`` attribute (what a runtime-checkable protocol would
    test, without its per-agent cost of walking the protocol's members).
    """

    def tool_scope(self, call: ToolCall) -> contextlib.AbstractContextManager[None]: ...


ToolScope = Callable[[ToolCall], contextlib.AbstractContextManager[None]]


def _unscoped(_call: ToolCall) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _corrupt(seq: int, why: str) -> SubagentError:
    field = f"events[{seq}]"
    return SubagentError(ErrorCode.CORRUPT_SESSION, f"{field}: {why}", field=field)


class _Lazy(Generic[P]):
    """A public emitter made on first use (rule 8): this class attribute reads, and fills,
    the instance's ``slot``; while the slot holds None nobody listens and nothing is emitted.
    """

    __slots__ = ("_name", "_slot")

    def __init__(self, slot: str, name: str) -> None:
        self._slot = slot
        self._name = name

    @overload
    def __get__(self, owner: None, kind: type) -> _Lazy[P]: ...

    @overload
    def __get__(self, owner: object, kind: type) -> Emitter[P]: ...

    def __get__(self, owner: object, kind: type) -> Emitter[P] | _Lazy[P]:
        if owner is None:
            return self
        emitter: Emitter[P] | None = getattr(owner, self._slot)
        if emitter is None:
            emitter = Emitter(self._name)
            setattr(owner, self._slot, emitter)
        return emitter


class _Inbox:
    """The two pending lists, mutated only through durable splices (HARNESS-10).

    It holds the agent's three inbox emitters, never the agent: no reference cycle, so a
    disposed agent and its log are freed by reference counting, not by the cyclic GC.
    Slotted: one per live agent. Each pending id keeps the frozen wire form its inserting
    splice logged, so the claim's ``user/message`` shares it instead of a second copy."""

    __slots__ = (
        "_claimed",
        "_discarded",
        "_inserted",
        "_next_step",
        "_next_turn",
        "_session",
        "_where",
    )

    inserted: _Lazy[InboxNotification] = _Lazy("_inserted", "agent/inbox/inserted")
    claimed: _Lazy[InboxNotification] = _Lazy("_claimed", "agent/inbox/claimed")
    discarded: _Lazy[InboxNotification] = _Lazy("_discarded", "agent/inbox/discarded")

    def __init__(self, session: Session):
        self._session = session
        self._inserted: Emitter[InboxNotification] | None = None
        self._claimed: Emitter[InboxNotification] | None = None
        self._discarded: Emitter[InboxNotification] | None = None
        # Each list exists only while it holds a message: a held child keeps no empty one.
        self._next_turn: list[UserMessage] | None = None
        self._next_step: list[UserMessage] | None = None
        # Every pending id, for O(1) checks: its list and its logged form (None: encode anew).
        self._where: dict[MessageId, tuple[InboxTarget, JsonValue]] = {}
        for event in session.events[session.header.seed_length or 0 :]:
            if event.type == INBOX_SPLICED:
                self._replay(event.seq, event.data)

    def _replay(self, seq: int, data: JsonValue) -> None:
        try:
            if not isinstance(data, Mapping):
                raise invalid("data", "not an object")
            target = InboxTarget(data.get("target"))
            start = require_int(data.get("start"), "start", minimum=0)
            removed = require_int(data.get("removedCount", 0), "removedCount", minimum=0)
            raw = data.get("inserted")
            if not isinstance(raw, Sequence) or isinstance(raw, str):
                raise invalid("inserted", "not a list")
            inserted = [wire.decode_message(m, f"inserted[{i}]") for i, m in enumerate(raw)]
            self._check(target, start, removed, inserted)
        except (SubagentError, ValueError) as exc:
            raise _corrupt(seq, f"invalid inbox splice: {exc}") from exc
        self._apply(target, start, removed, inserted, ())  # a stored form may carry extras

    def _held(self, target: InboxTarget) -> list[UserMessage] | None:
        return self._next_step if target is InboxTarget.NEXT_STEP else self._next_turn

    def _list(self, target: InboxTarget) -> Sequence[UserMessage]:
        """The pending list of ``target``, to read (an empty tuple while it has none)."""
        return self._held(target) or ()

    def _keep(self, target: InboxTarget, held: list[UserMessage] | None) -> None:
        if target is InboxTarget.NEXT_STEP:
            self._next_step = held
        else:
            self._next_turn = held

    def pending(self, target: InboxTarget) -> tuple[UserMessage, ...]:
        return tuple(self._list(target))

    def length(self, target: InboxTarget) -> int:
        return len(self._list(target))

    def target_of(self, message_id: MessageId) -> InboxTarget | None:
        """The list ``message_id`` is pending in, or None."""
        where = self._where.get(message_id)
        return None if where is None else where[0]

    @property
    def has_pending(self) -> bool:
        return bool(self._where)

    def _check(
        self, target: InboxTarget, start: int, removed: int, inserted: Sequence[UserMessage]
    ) -> None:
        """Ids stay unique across both lists: O(removed + inserted), never O(pending)."""
        current = self._list(target)
        if start > len(current) or start + removed > len(current):
            raise invalid("start", "splice range outside the list")
        leaving = {m.id for m in current[start : start + removed]} if inserted and removed else ()
        arriving: set[MessageId] = set()
        for message in inserted:
            taken = message.id in self._where and message.id not in leaving
            if taken or message.id in arriving:
                raise invalid("message.id", f"message {message.id!r} is already pending")
            arriving.add(message.id)

    def _apply(
        self,
        target: InboxTarget,
        start: int,
        count: int,
        inserted: Sequence[UserMessage],
        logged: Sequence[JsonValue],
    ) -> list[UserMessage]:
        """Apply a checked splice to the list and to the id index; returns the removed.
        ``logged`` is the splice's frozen ``inserted`` list, or empty (encode anew)."""
        current = self._held(target) or []
        removed = current[start : start + count]
        current[start : start + count] = inserted
        self._keep(target, current or None)
        for message in removed:
            del self._where[message.id]
        for index, message in enumerate(inserted):
            self._where[message.id] = (target, logged[index] if logged else None)
        return removed

    def splice(
        self,
        target: InboxTarget,
        start: int,
        count: int,
        inserted: Sequence[UserMessage] = (),
        *,
        canceled: bool,
    ) -> list[UserMessage]:
        """Log, apply, then notify one mutation; returns the removed messages."""
        current = self._list(target)
        count = min(count, len(current) - start)
        if count == 0 and not inserted:
            return []
        self._check(target, start, count, inserted)
        event = self._session.append(
            INBOX_SPLICED,
            wire.splice_data(
                target._value_, start, removed_count=count, inserted=inserted, canceled=canceled
            ),
        )
        data = event.data
        # Exact types, not the ABCs (no Python-level check): a frozen payload is a dict and
        # its lists are lists; another shape only loses the cached form.
        logged = data.get("inserted") if isinstance(data, dict) else None
        if not isinstance(logged, list) or len(logged) != len(inserted):
            logged = ()  # not the shape just logged: encode anew at the claim
        removed = self._apply(target, start, count, inserted, logged)
        for message in removed if canceled else ():
            self._notify(self._discarded, message, None)
        for message in inserted:
            self._notify(self._inserted, message, None)
        return removed

    def _notify(
        self, emitter: Emitter[InboxNotification] | None, message: UserMessage, turn: int | None
    ) -> None:
        if emitter is not None:  # None: never listened to (rule 8)
            emitter.emit(InboxNotification(self._session.id, message, turn))

    def claim(
        self, with_turn: bool, turn: int
    ) -> tuple[tuple[UserMessage, ...], tuple[JsonValue, ...]]:
        """Remove the step's batch: all next-step input, plus one next-turn item if asked;
        with each message's logged form (None: encode it anew)."""
        step_items = self._list(InboxTarget.NEXT_STEP)
        batch = [*step_items, *self._list(InboxTarget.NEXT_TURN)[:1]] if with_turn else step_items
        logged = tuple(self._where[message.id][1] for message in batch)
        claimed = self.splice(InboxTarget.NEXT_STEP, 0, len(step_items), canceled=False)
        if with_turn:
            claimed += self.splice(InboxTarget.NEXT_TURN, 0, 1, canceled=False)
        for message in claimed:
            self._notify(self._claimed, message, turn)
        return tuple(claimed), logged

    def clear(self) -> None:
        """Durably cancel everything pending, next-step before next-turn (HARNESS-5)."""
        for target in (InboxTarget.NEXT_STEP, InboxTarget.NEXT_TURN):
            self.splice(target, 0, len(self._list(target)), canceled=True)


_MESSAGE_SENT: Final = {
    (target, wakeup): activity.MessageSent(target, wakeup)
    for target in InboxTarget
    for wakeup in (False, True)
}
_MAINTENANCE_REQUESTED: Final = activity.MaintenanceRequested()
_MAINTENANCE_FINISHED: Final = activity.MaintenanceFinished()
_DRIVER_FINISHED: Final = activity.DriverFinished()
_FOLLOWUP_SENT: Final = _MESSAGE_SENT[InboxTarget.NEXT_TURN, True]
_WAKE_REQUESTED: Final = {after: activity.WakeRequested(after) for after in (False, True)}
_TURN_ENDED: Final = {pending: activity.TurnEnded(pending) for pending in (False, True)}


def _last_turn(session: Session) -> int:
    for event in reversed(session.events):
        if event.type == TURN_START:
            data = event.data
            try:
                turn = data.get("turn") if isinstance(data, Mapping) else None
                return require_int(turn, "turn", minimum=0)
            except SubagentError as exc:
                raise _corrupt(event.seq, "turn/start without a turn number") from exc
    return 0


class _Settle:
    """Resolves a ``when_idle`` waiter's future (one slotted object, no closure)."""

    __slots__ = ("_idle",)

    def __init__(self, idle: asyncio.Future[None]) -> None:
        self._idle = idle

    def __call__(self) -> None:
        if not self._idle.done():  # done: the waiter was cancelled and left
            self._idle.set_result(None)


class _IdleFollower:
    """An ``on_idle`` callback waiting on one activity: called when that activity ends, or
    carried on to the activity that replaced it."""

    __slots__ = ("_activity", "_agent", "_callback")

    def __init__(
        self,
        agent: ReferenceAgent,
        activity: asyncio.Future[None],
        callback: Callable[[], object],
    ) -> None:
        self._agent = agent
        self._activity = activity
        self._callback = callback

    def __call__(self, _done: object) -> None:
        if self._activity is self._agent._activity:
            self._callback()
        else:
            self._agent.on_idle(self._callback)  # replaced by a newer activity: follow it


class ReferenceAgent:
    """The reference agent over one session (HARNESS-1 .. HARNESS-11)."""

    status_changed: _Lazy[StatusNotification] = _Lazy("_status_changed", "agent/status")
    step_entering: _Lazy[StepEntering] = _Lazy("_step_entering", "agent/step-entering")

    def __init__(
        self,
        session: Session,
        *,
        model: Model,
        tools: ToolRegistry | None = None,
        options: AgentOptions | None = None,
        pre_step: PreStepHook | None = None,
        prompt: PromptComposer | None = None,
    ) -> None:
        self.session = session
        self.options = options or AgentOptions()
        self.tools = tools if isinstance(tools, ScopedTools) else ScopedTools(tools)
        self.prompt = prompt or PromptComposer()
        self.ctx = Scope()
        self._model = model
        scope: ToolScope | None = getattr(model, "tool_scope", None)  # ScopesToolCalls
        self._tool_scope = _unscoped if scope is None else scope
        self._pre_step = pre_step
        self._status_changed: Emitter[StatusNotification] | None = None
        self._step_entering: Emitter[StepEntering] | None = None
        self._inbox = _Inbox(session)
        self._state = activity.ActivityState()
        self._turn_number = _last_turn(session)
        self._abort: AbortController | None = None  # the current activity's (or the last one's)
        self._activity: asyncio.Future[None] | None = None
        # The running driver's task, kept from the collector; a new driver starts only once
        # the previous one has finished (its last step), so one reference is enough.
        self._driver: asyncio.Task[None] | None = None
        self._meter: StepMeter | None = None

    def install_meter(self, meter: StepMeter) -> Unsubscribe:
        """Admit every later model request through ``meter`` (rule 6)."""
        self._meter = meter

        def remove() -> None:
            if self._meter is meter:
                self._meter = None

        return remove

    @property
    def inserted(self) -> Emitter[InboxNotification]:
        return self._inbox.inserted

    @property
    def claimed(self) -> Emitter[InboxNotification]:
        return self._inbox.claimed

    @property
    def discarded(self) -> Emitter[InboxNotification]:
        return self._inbox.discarded

    if TYPE_CHECKING:

        @property
        def id(self) -> SessionId: ...

    else:
        # A C getter (``attrgetter``): no Python frame per read (issue 19).
        id = property(attrgetter("session.id"), doc="The agent's id: its session's.")

    @property
    def status(self) -> AgentStatus:
        return self._state.status

    @property
    def in_maintenance(self) -> bool:
        return self._state.phase is ActivityPhase.MAINTENANCE

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        return self._inbox.pending(InboxTarget.NEXT_TURN)

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        return self._inbox.pending(InboxTarget.NEXT_STEP)

    def pending(self) -> tuple[MessageId, ...]:
        return tuple(m.id for m in (*self.next_step, *self.next_turn))

    def _dispatch(
        self, event: ActivityEvent, message: UserMessage | None = None
    ) -> tuple[ActivityEffect, ...]:
        """Apply ``event``, store the state, then perform each effect in order."""
        self._state, effects = activity.apply(self._state, event)
        for effect in effects:
            self._perform(effect, message)
        return effects

    def _perform(self, effect: ActivityEffect, message: UserMessage | None) -> None:
        match effect:
            case PrepareDriver():
                asyncio.get_running_loop()  # a driver needs a loop: fail before any side effect
            case InsertMessage(target=target):
                assert message is not None  # only a send inserts
                end = self._inbox.length(target)
                self._inbox.splice(target, end, 0, [message], canceled=False)
            case Wake(after_abort=after_abort):
                self._dispatch(_WAKE_REQUESTED[after_abort])
            case StartDriver():
                done = self._begin_activity()
                self._driver = asyncio.get_running_loop().create_task(self._drive(done))
            case StartMaintenance():
                self._begin_activity()
            case EmitStatus(status=status):
                if self._status_changed is not None:  # None: never listened to (rule 8)
                    self._status_changed.emit(StatusNotification(self.id, status))
            case ClearInbox():
                self._inbox.clear()
            case FinishCancel(cause=cause):
                self._dispatch(activity.InboxCleared(cause))
            case AbortActivity(cause=cause):
                assert self._abort is not None  # only an activity is aborted
                self._abort.abort(cause)
            case NextTurn():
                self._abort = AbortController()
            case ReplayWake():
                if self._inbox.has_pending:
                    self._dispatch(_WAKE_REQUESTED[False])
            case _:
                assert_never(effect)

    def _begin_activity(self) -> asyncio.Future[None]:
        self._abort = AbortController()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._activity = done
        return done

    # ------------------------------------------------------------------ synchronous surface

    def send(self, message: UserMessage, target: InboxTarget, wakeup: bool) -> None:
        """Insert durably, notify, then wake or latch (HARNESS-3)."""
        if not isinstance(message, UserMessage):
            raise invalid("message", "must be a UserMessage")
        if not isinstance(target, InboxTarget):
            raise invalid("target", "must be an InboxTarget")
        self._dispatch(_MESSAGE_SENT[target, bool(wakeup)], message)

    def followup(self, message: UserMessage) -> None:
        # ``send(message, NEXT_TURN, True)`` with its event looked up once (the hot path).
        if not isinstance(message, UserMessage):
            raise invalid("message", "must be a UserMessage")
        self._dispatch(_FOLLOWUP_SENT, message)

    def steer(self, message: UserMessage) -> None:
        self.send(message, InboxTarget.NEXT_STEP, True)

    def inject(self, message: UserMessage) -> None:
        self.send(message, InboxTarget.NEXT_STEP, False)

    def wake(self) -> None:
        """Wake for what is pending, as a replayed wake does (DUR-26)."""
        self._perform(ReplayWake(), None)

    def remove(self, message_id: MessageId) -> bool:
        """Durably cancel one pending message; False if it is no longer pending (HARNESS-10)."""
        target = self._inbox.target_of(message_id)
        if target is None:
            return False
        ids = [m.id for m in self._inbox.pending(target)]
        self._inbox.splice(target, ids.index(message_id), 1, canceled=True)
        return True

    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """Clear (unless keep_inbox) and abort the current activity (HARNESS-5)."""
        if not isinstance(cause, CancelCause):
            raise invalid("cause", "must be a CancelCause")
        self._dispatch(activity.CancelRequested(cause, bool(keep_inbox)))

    def _converge(self, finished: ActivityEvent, done: asyncio.Future[None]) -> None:
        self._dispatch(finished)
        done.set_result(None)

    async def when_idle(self) -> None:
        """Resolve once no driver and no maintenance is active, following replacements."""
        if self._activity is None or self._activity.done():
            return  # idle now: a replacement is installed before the activity it replaces ends
        idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_idle(_Settle(idle))
        await idle

    def on_idle(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` from the loop once no driver and no maintenance is active,
        following replacements (``when_idle`` without a task or a coroutine frame)."""
        activity = self._activity
        if activity is None:
            asyncio.get_running_loop().call_soon(callback)
            return
        activity.add_done_callback(_IdleFollower(self, activity, callback))

    def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> asyncio.Task[T]:
        """Run ``task`` from true idle; status stays idle; wakes latch (HARNESS-8)."""
        try:
            state, effects = activity.apply(self._state, _MAINTENANCE_REQUESTED)
        except SubagentError as exc:
            raise SubagentError(exc.code, f"agent {self.id!r} is busy", field=exc.field) from exc
        loop = asyncio.get_running_loop()  # the task needs a loop: fail before any change
        self._state = state
        for effect in effects:
            self._perform(effect, None)
        done, abort = self._activity, self._abort  # StartMaintenance began the activity
        assert done is not None
        assert abort is not None

        async def run() -> T:
            try:
                return await task(abort.signal)
            finally:
                self._converge(_MAINTENANCE_FINISHED, done)

        return loop.create_task(run())

    # ------------------------------------------------------------------ driver

    async def _drive(self, done: asyncio.Future[None]) -> None:
        try:
            while await self._turn():
                pass
        except Exception:
            _log.debug("agent %s: driver stopped", self.id, exc_info=True)
        finally:
            self._converge(_DRIVER_FINISHED, done)

    async def _turn(self) -> bool:
        """Run one turn; True when the core starts another (``NextTurn``)."""
        assert self._abort is not None  # StartDriver began the activity
        signal = self._abort.signal
        signal.throw_if_aborted()
        turn = self._turn_number + 1
        self.session.append(TURN_START, wire.turn_start_data(turn))
        self._turn_number = turn
        ends: TurnEndReason | None = None
        end_data: Mapping[str, JsonValue] | None = None
        first = True
        steps = 0  # entered so far
        try:
            while True:
                signal.throw_if_aborted()
                step = steps + 1
                claimed, logged = self._inbox.claim(first, turn)
                if self._pre_step is not None:
                    entered = await race_abort(self._pre_step(claimed, turn, step, signal), signal)
                    signal.throw_if_aborted()
                    if not entered:
                        ends = TurnEndReason.BLOCKED
                        return False
                if steps == 0 and not claimed:
                    ends = TurnEndReason.COMPLETED
                    return False
                if self._step_entering is not None:  # None: never listened to (rule 8)
                    self._step_entering.emit_vetoable(StepEntering(self.id, turn, step))
                grant = self._admit()
                if isinstance(grant, str):
                    end_data = wire.turn_end_data(turn, TurnEndReason.BUDGET_EXHAUSTED, limit=grant)
                    return False
                self.session.append(STEP_START, {})
                steps = step
                try:
                    self._record_claimed(claimed, logged)
                    del claimed, logged  # in the log now: not held across the model step
                    step_end = await self._step(turn, step, signal, grant)
                    if ends is not TurnEndReason.MAX_TOKENS:
                        ends = step_end
                finally:
                    self.session.append(STEP_END, {})
                signal.throw_if_aborted()
                if ends is not None and not self._inbox.length(InboxTarget.NEXT_STEP):
                    break
                first = False
        except Exception as exc:
            cause = signal.reason
            if signal.aborted and isinstance(cause, CancelCause):
                end_data = wire.turn_end_data(
                    turn, TurnEndReason.ABORTED, cause=cause.kind, cause_reason=cause.reason
                )
            else:
                error = f"{type(exc).__name__}: {exc}"
                end_data = wire.turn_end_data(turn, TurnEndReason.ERROR, error=error)
            raise
        finally:
            if end_data is None:
                end_data = wire.turn_end_data(turn, ends or TurnEndReason.COMPLETED)
            self.session.append(TURN_END, end_data)
        effects = self._dispatch(_TURN_ENDED[self._inbox.has_pending])
        return any(isinstance(effect, NextTurn) for effect in effects)

    def _record_claimed(
        self, claimed: tuple[UserMessage, ...], logged: tuple[JsonValue, ...]
    ) -> None:
        """Append the step's ``user/message`` records, sharing each logged form."""
        for message, encoded in zip(claimed, logged, strict=True):
            self.session.append(USER_MESSAGE, wire.user_message_data(message, encoded))

    def _admit(self) -> StepGrant | str | None:
        """Reserve the step's model request (rule 6): a grant, None without a meter, or the
        name of the exhausted limit."""
        if self._meter is None:
            return None
        try:
            return self._meter.admit(self.session.id, self.options.max_tokens)
        except SubagentError as exc:
            if exc.code is not ErrorCode.BUDGET_EXHAUSTED:
                raise
            return (exc.field or "budget").removeprefix("budget.")

    def _record_charge(self, charged: JsonObject | None) -> None:
        """Record a charge no answer carries (rule 6)."""
        if charged is not None:
            self.session.append(BUDGET_CHARGED, charged)

    async def _step(
        self, turn: int, step: int, signal: AbortSignal, grant: StepGrant | None
    ) -> TurnEndReason | None:
        request = ModelRequest(
            self.id,
            turn,
            step,
            self.session.events,
            self.tools.names(),
            signal,
            system_prompt=tuple((p.name, p.order, p.text) for p in self.prompt.system_prompt()),
            runtime_context=tuple((p.name, p.order, p.text) for p in self.prompt.runtime_context()),
            max_tokens=self.options.max_tokens if grant is None else grant.max_tokens,
        )
        meter = self._meter  # the meter that admitted it settles it, even if removed since
        charged: JsonObject | None = None
        try:  # the model's own awaitable, metered or not: no frame of ours in between
            result = await abortable(self._model.step(request), request.signal)
        except BaseException:
            if grant is not None and meter is not None:  # the whole grant (rule 6)
                self._record_charge(meter.settle(request.agent, grant, None, ok=False))
            raise
        if grant is not None and meter is not None:
            charged = meter.settle(request.agent, grant, result.usage, ok=True)
        try:
            signal.throw_if_aborted()
            for chunk in result.chunks:
                self.session.append(ASSISTANT_CHUNK, wire.assistant_chunk_data(chunk))
            calls = tuple(
                DataBlock(
                    {"type": "tool-call", "id": c.id, "name": c.name, "arguments": c.arguments}
                )
                for c in result.tool_calls
            )
            content = (*result.content, *calls)
            data = wire.assistant_message_data(content, refusal=result.refusal, charged=charged)
            self.session.append(ASSISTANT_MESSAGE, data)  # raises before recording, if at all
        except BaseException:  # the answer is not recorded: its charge is, on its own
            self._record_charge(charged)
            raise
        if result.max_tokens:
            return TurnEndReason.MAX_TOKENS
        if not result.tool_calls:
            return TurnEndReason.COMPLETED
        concluded = False
        for call in result.tool_calls:
            with self._tool_scope(call):
                outcome = await self.tools.execute(call, signal)
            concluded = concluded or outcome.concludes
            self.session.append(
                TOOL_RESULT,
                wire.tool_result_data(
                    call.name, call.id, outcome.content, is_error=outcome.is_error
                ),
            )
        return TurnEndReason.COMPLETED if concluded else None
