"""``SubagentService``: the provider registry, one-shot starts and the lifecycle events.

Theory of operation
-------------------
1. Providers are kept by name in insertion order (REG-1). ``register_provider`` reads the
   name once, refuses a taken name with ``DUPLICATE_PROVIDER`` leaving the entry untouched
   (REG-3), inserts, arms a single-shot disposer, then emits ``subagent/provider-added``
   uncontained: a raising listener vetoes, the disposer runs and the error propagates (REG-4).
   The disposer deletes the name and emits ``subagent/provider-removed``, contained (REG-5).
   Removal only blocks new work: names are looked up on every start (REG-6, REG-7).
2. ``start(name, request)`` admits the request before any child exists, in the order of ONE-2:
   provider lookup (``NO_PROVIDER``), capabilities (CAP-2..4), the ``max_depth`` domain, the
   output schema (object-rooted, inside the ``jsonschema``-checked subset), every other field,
   then the descriptor snapshot. Each failure is a typed ``SubagentError`` naming the field.
3. The resolved request carries the validated core request (its ``ParentRef`` derived from the
   live parent), the descriptor (ONE-3) and a fresh uuid4 run id (EVT-3). The run itself (abort,
   result, dispose) is the provider's machine; the service drives only its observer
   (``core.oneshot_observer``, one for all its runs) and performs every effect:
   ``provider.start`` fulfilling is ``RunPublished`` (whose ``ObserveResult`` attaches the end
   observer before ``EmitRunStart`` emits ``subagent/start``, EVT-6); a rejection propagates
   and never reaches the observer, so it has no event (EVT-7); the result settling is
   ``RunSettled``/``RunFaulted``, whose ``EmitRunEnd`` emits ``subagent/end``. ``local`` is
   snapshotted from the run's exact ``local_agent`` (EVT-4) and ``provider`` is the name used
   at start (EVT-5). The caller gets the provider's run unchanged.
4. Bad input: every public call (``start``, ``start_continuable``, ``followup``,
   ``report_from``, ``interrupt``) validates its arguments before anything is created,
   persisted, listed, emitted or sent, iteratively and in time linear in the input
   (cycles and any depth included), against ``limits`` (``core.limits.Limits``, defaults:
   64 nested JSON containers, 1 KiB per label, 256 bytes per child id, 4 MiB per prompt,
   follow-up or report, 256 KiB per output schema). Labels and child ids are single-line
   (no control characters), ids carry no surrounding whitespace, prompts and follow-ups are
   not blank, integers are JSON-safe (±(2**53-1)), an output schema must be satisfiable.
   Each refusal is ``INVALID_ARGUMENT`` naming the caller's field path
   (``spec.prompt[0].text``, ``content[1].value.k``, ``request.output_schema``).
5. Listeners (``on``) may be scoped to a delegating parent session: run events reach only that
   parent's listeners (EVT-12); provider events are unscoped. Every listener except
   ``provider-added``'s is contained: a raise or a failing returned awaitable is logged as a
   warning naming the event, and the other listeners still run (EVT-13, EVT-15).
6. Payloads, one frozen record per event: ``subagent/provider-added`` gets
   ``ProviderAddedInfo(name, capabilities, continuable)`` and ``subagent/provider-removed``
   ``ProviderRemovedInfo(name)``; ``subagent/start`` gets ``RunStartInfo`` and
   ``subagent/end`` ``RunEndInfo``. The provider events carry a frozen snapshot rather than
   the live provider, so a listener can only observe, never change the provider; the same
   ``.name`` serves both events, and the live provider is ``get_provider(name)`` away while
   ``provider-added`` runs (EVT-1).
7. Budgets (BUDGET-12, ``docs/budgets.md``): the service's ``BudgetBook`` carves a start's
   budget as the last step of admission (``resolve_start_request``), before the provider
   starts it; the provider closes it when the run's result settles, the service when the
   start fails (a provider that cannot meter its children gets no budgeted start); the
   host sets a root's budget and raises a child's.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeAlias, assert_never

import attrs

from dsh_subagent.adapters import catalog, telemetry
from dsh_subagent.adapters.budgets import BudgetBook, check_budget
from dsh_subagent.adapters.continuation import ContinuationManager
from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStart,
    ContinuableStartSpec,
    ParentAgent,
    UserGrant,
    UserInterruptAuthority,
)
from dsh_subagent.adapters.frozen_json import frozen_intent
from dsh_subagent.adapters.projections import (
    SessionProjectionRegistry,
    register_subagent_projections,
)
from dsh_subagent.adapters.protocols import (
    Agent,
    AgentRegistry,
    ApprovalPolicyService,
    ProjectionCache,
    SandboxPolicyService,
    SessionPersistence,
    SessionStore,
)
from dsh_subagent.adapters.providers.base import (
    EventIds,
    ResolvedStartRequest,
    StartRequest,
    SubagentProvider,
    SubagentRun,
    can_meter_budgets,
    can_prepare_continuable,
    render_error,
)
from dsh_subagent.adapters.schema import check_output_schema
from dsh_subagent.adapters.setup_registry import ContinuableSetupRegistry, SetupContribution
from dsh_subagent.adapters.signals import AbortSignal, Unsubscribe
from dsh_subagent.core import oneshot_observer
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.capabilities import admit_start_request
from dsh_subagent.core.depth import delegation_depth_of
from dsh_subagent.core.descriptor import one_shot_descriptor
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.lifecycle import (
    PROVIDER_ADDED,
    PROVIDER_REMOVED,
    SUBAGENT_END,
    SUBAGENT_START,
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
)
from dsh_subagent.core.limits import DEFAULT_LIMITS, Limits
from dsh_subagent.core.listing import ChildRow, DescendantRow, ListingRow
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.oneshot_observer import (
    EmitRunEnd,
    EmitRunStart,
    ObserveResult,
    ObserverEvent,
    RunFaulted,
    RunPublished,
    RunSettled,
)
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    USER_SOURCE,
    Content,
    MessageId,
    MessageSource,
    ParentRef,
    RunId,
    SessionId,
    SubagentResult,
    SubagentStartRequest,
    as_content,
)

_log = logging.getLogger(__name__)

LifecyclePayload: TypeAlias = ProviderAddedInfo | ProviderRemovedInfo | RunStartInfo | RunEndInfo
Listener: TypeAlias = Callable[[LifecyclePayload], object]
EVENT_NAMES: Final = (PROVIDER_ADDED, PROVIDER_REMOVED, SUBAGENT_START, SUBAGENT_END)
_RUN_EVENTS: Final = (SUBAGENT_START, SUBAGENT_END)


@attrs.frozen
class _Subscription:
    listener: Listener = attrs.field(eq=False)
    parent: SessionId | None


class _ResultObserver:
    """The done callback that reports one run's result to the observer (one slotted
    object per run in flight, instead of a partial over a bound method)."""

    __slots__ = ("_run_id", "_service")

    def __init__(self, service: SubagentService, run_id: RunId) -> None:
        self._service = service
        self._run_id = run_id

    def __call__(self, result: asyncio.Future[SubagentResult]) -> None:
        self._service._on_result(self._run_id, result)


def _parent_of(payload: LifecyclePayload) -> SessionId | None:
    match payload:
        case RunStartInfo(parent_session=parent):
            return parent
        case RunEndInfo(start=RunStartInfo(parent_session=parent)):
            return parent
    return None


def _check_parent(parent: object) -> Agent:
    if not all(hasattr(parent, name) for name in ("id", "session", "options", "ctx")):
        raise invalid("request.parent", "must be the live parent Agent")
    return parent  # type: ignore[return-value]  # structurally checked above


def resolve_start_request(
    name: str,
    provider: SubagentProvider,
    request: object,
    limits: Limits = DEFAULT_LIMITS,
    budgets: BudgetBook | None = None,
) -> ResolvedStartRequest:
    """Admit a one-shot request for ``provider`` in the order of ONE-2 (rule 2); with
    ``budgets``, carve its budget last, once everything else is admitted (rule 7)."""
    if not isinstance(request, StartRequest):
        raise invalid("request", "must be a StartRequest")
    if not isinstance(request.signal, AbortSignal):
        raise invalid("request.signal", "is required and must be an AbortSignal")
    parent = _check_parent(request.parent)
    header = parent.session.header
    core = SubagentStartRequest(
        request.intent,
        ParentRef(parent.id, header.cwd, 0, parent.options),
        request.label,
        request.output_schema,
    )
    admit_start_request(
        core,
        provider.capabilities,
        limits,
        check_schema=lambda schema: check_output_schema(schema, limits=limits),
    )
    depth = delegation_depth_of(header, parent.options)
    core = SubagentStartRequest(  # admitted; now with its prompt frozen and the real depth
        frozen_intent(core.intent),
        ParentRef(parent.id, header.cwd, depth, parent.options),
        core.label,
        core.output_schema,
    )
    check_budget(request.budget, "request.budget")
    descriptor = one_shot_descriptor(name, core)
    run_id = RunId(str(uuid.uuid4()))
    carved = None
    if budgets is not None:
        parent_id = core.parent.session_id
        if not can_meter_budgets(provider):  # before anything is carved or created
            budgets.refuse_unmetered(name, parent_id, request.budget)
        carved = budgets.carve(parent_id, f"run:{run_id}", request.budget)
    return ResolvedStartRequest(core, parent, request.signal, descriptor, run_id, carved)


class SubagentService:
    """The seam's service (``ctx.subagents``): providers, one-shot starts, lifecycle events."""

    def __init__(
        self,
        agents: AgentRegistry | None = None,
        sessions: SessionStore | None = None,
        persistence: SessionPersistence | None = None,
        *,
        projections: SessionProjectionRegistry | None = None,
        cache: ProjectionCache | None = None,
        sandbox: SandboxPolicyService | None = None,
        approval: ApprovalPolicyService | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if not isinstance(limits, Limits):
            raise invalid("limits", "must be Limits")
        self.limits = limits
        self.agents = agents
        self.sessions = sessions
        self.persistence = persistence
        self.projections = projections
        self.cache = cache
        self._providers: dict[str, SubagentProvider] = {}
        self._listeners: dict[str, list[_Subscription]] = {name: [] for name in EVENT_NAMES}
        self._setups = ContinuableSetupRegistry()
        self._observation = oneshot_observer.Observation()
        self._observed_ids = EventIds("observed#")
        self._observed_runs: dict[RunId, SubagentRun] = {}
        self.budgets = BudgetBook()  # BUDGET-12: the tree budgets of every start
        # DESIGN decision 9: spans and lifecycle logs, driven by the run events (OBS-1).
        self.tracing = telemetry.attach(agents)
        for event in _RUN_EVENTS:
            self.on(event, self.tracing.observe)
        # PROJ-1: the subagent projection units exist while a projection registry does.
        self._unregister_projections = (
            register_subagent_projections(projections) if projections is not None else None
        )
        # CONT-2: the continuation manager exists only while an agent registry does.
        self._continuations = (
            ContinuationManager(
                agents=agents,
                sessions=sessions,
                persistence=lambda: self.persistence,
                providers=self.get_provider,
                emit=self._emit,
                setups=self._setups,
                sandbox=lambda: sandbox,
                approval=lambda: approval,
                limits=limits,
                tracing=self.tracing,
                budgets=self.budgets,
            )
            if agents is not None and sessions is not None
            else None
        )

    # ------------------------------------------------------------------ registry (REG)

    def register_provider(self, provider: SubagentProvider) -> Callable[[], None]:
        """Register ``provider``; returns a single-shot disposer (rule 1)."""
        name = require_str(provider.name, "provider.name", non_empty=True)
        if name in self._providers:
            raise SubagentError(
                ErrorCode.DUPLICATE_PROVIDER,
                f'a subagent provider named "{name}" is already registered',
                field="provider.name",
            )
        self._providers[name] = provider
        armed = [True]

        def dispose() -> None:
            if not armed:
                return
            armed.clear()
            if self._providers.get(name) is provider:
                del self._providers[name]
            self._emit(PROVIDER_REMOVED, ProviderRemovedInfo(name))

        added = ProviderAddedInfo(name, provider.capabilities, can_prepare_continuable(provider))
        try:
            self._emit(PROVIDER_ADDED, added)
        except BaseException:
            dispose()
            raise
        return dispose

    def list(self) -> list[str]:
        """Registered provider names in registration order (REG-1)."""
        return list(self._providers)

    def get_provider(self, name: str) -> SubagentProvider | None:
        """The provider registered as ``name``, or ``None`` (REG-1)."""
        return self._providers.get(name)

    # ------------------------------------------------------------------ one-shot (ONE)

    async def start(self, name: str, request: StartRequest) -> SubagentRun:
        """Admit, start through the provider, and observe one one-shot run (rules 2-3)."""
        provider = self._providers.get(require_str(name, "name"))
        if provider is None:
            raise SubagentError(
                ErrorCode.NO_PROVIDER,
                f'no subagent provider registered for "{name}"',
                field="name",
            )
        resolved = resolve_start_request(name, provider, request, self.limits, self.budgets)
        child_budget = resolved.budget
        if child_budget is not None:
            try:
                run = await provider.start(resolved)  # closes it when the result settles
            except BaseException:
                child_budget.close()
                raise
        else:
            run = await provider.start(resolved)
        core = resolved.request
        published = RunPublished(
            self._observed_ids.next(),
            resolved.run_id,
            resolved.descriptor.provider,
            run.id,
            run.local_agent is not None,
            core.parent.session_id,
            core.label,
        )
        self._observed_runs[resolved.run_id] = run
        try:
            self._observe(published)
        except BaseException:
            self._observed_runs.pop(resolved.run_id, None)
            await run.dispose()  # an unpublishable run (e.g. an empty id) is not handed out
            raise
        return run

    def _observe(self, event: ObserverEvent) -> None:
        """Apply ``event`` to the observer and carry out every effect (rule 3)."""
        self._observation, effects = oneshot_observer.apply(self._observation, event)
        for effect in effects:
            match effect:
                case ObserveResult(run_id=run_id):
                    run = self._observed_runs.pop(run_id)
                    run.result.add_done_callback(_ResultObserver(self, run_id))
                case EmitRunStart(info=info):
                    self._emit(SUBAGENT_START, info)
                case EmitRunEnd(info=info):
                    self._emit(SUBAGENT_END, info)
                case _:
                    assert_never(effect)

    def _on_result(self, run_id: RunId, result: asyncio.Future[SubagentResult]) -> None:
        cause = self._observed_ids.next()
        if result.cancelled():
            self._observe(RunFaulted(cause, run_id, "the run's result was cancelled"))
            return
        error = result.exception()
        value = None if error is not None else result.result()
        if isinstance(value, SubagentResult):
            self._observe(RunSettled(cause, run_id, value))
        else:
            why = render_error(error) if error is not None else "not a SubagentResult"
            self._observe(RunFaulted(cause, run_id, why))

    # ------------------------------------------------------------------ events (EVT)

    def on(
        self, event_name: str, listener: Listener, *, parent: SessionId | None = None
    ) -> Unsubscribe:
        """Listen to one lifecycle event; run events may be scoped to one parent (rule 5)."""
        if event_name not in self._listeners:
            raise invalid("event_name", f"unknown lifecycle event {event_name!r}")
        if parent is not None and event_name not in _RUN_EVENTS:
            raise invalid("parent", "only subagent/start and subagent/end are parent-scoped")
        subscription = _Subscription(listener, parent)
        listeners = self._listeners[event_name]
        listeners.append(subscription)

        def unsubscribe() -> None:
            if subscription in listeners:
                listeners.remove(subscription)

        return unsubscribe

    def _emit(self, event_name: str, payload: LifecyclePayload) -> None:
        """Dispatch one lifecycle event; only ``provider-added`` listeners may veto."""
        parent = _parent_of(payload)
        for subscription in tuple(self._listeners[event_name]):
            if subscription.parent is not None and subscription.parent != parent:
                continue
            if event_name == PROVIDER_ADDED:
                outcome = subscription.listener(payload)
            else:
                try:
                    outcome = subscription.listener(payload)
                except Exception as error:
                    _log.warning(
                        "%s listener failed: %s",
                        event_name,
                        render_error(error),
                        extra=_fields_of(payload),
                    )
                    continue
            if isinstance(outcome, Awaitable):
                _contain(event_name, outcome, _fields_of(payload))

    # ------------------------------------------------------------------ continuable (CONT)

    def _require_continuations(self) -> ContinuationManager:
        if self._continuations is None:
            raise SubagentError(
                ErrorCode.CONTINUATION_UNAVAILABLE,
                "continuable children need an agent registry and a session store",
            )
        return self._continuations

    async def start_continuable(self, spec: ContinuableStartSpec) -> ContinuableStart:
        """Start a continuable child; returns its id once the prompt is accepted (CONT-1..12)."""
        return await self._require_continuations().start_continuable(spec)

    async def followup(
        self,
        child_id: SessionId,
        content: Content | str,
        authority: ParentAgent | UserGrant,
        *,
        source: MessageSource = USER_SOURCE,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """Send a continuable child its next turn, waking or cold-resuming it (CONT-14..21).

        ``content`` is content blocks, or a plain string for one text block.
        """
        return await self._require_continuations().followup(
            child_id, as_content(content), authority, source=source, signal=signal
        )

    def interrupt(
        self, child_id: SessionId, authority: AncestorAuthority | UserInterruptAuthority
    ) -> None:
        """Stop a child's current turn, keeping its inbox; a no-op without a manager (CONT-23)."""
        if self._continuations is not None:
            self._continuations.interrupt(child_id, authority)

    def report_from(
        self,
        child: Agent,
        content: Content | str,
        *,
        delivery: ReportDelivery,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """Relay a child's report to its durable direct parent (CONT-30..34).

        ``content`` is content blocks, or a plain string for one text block.
        """
        return self._require_continuations().report_from(
            child, as_content(content), delivery=delivery, signal=signal
        )

    async def report_from_durably(
        self,
        child: Agent,
        content: Content | str,
        *,
        delivery: ReportDelivery,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """``report_from``, returning once the report is in the parent's stored log; a
        failed commit raises ``DURABILITY_FAILED`` carrying the id (DUR-1)."""
        return await self._require_continuations().report_from_durably(
            child, as_content(content), delivery=delivery, signal=signal
        )

    def watch_mailbox(self) -> None:
        """Watch the persistence's durable mailbox from now on (a harness calls it once open):
        mail for children held here is delivered, and children with mail whose holder is
        gone are taken over (DUR-26, ``docs/durability.md``)."""
        if self._continuations is not None:
            self._continuations.watch_mailbox()

    def activation_state(self, child_id: SessionId) -> ActivationState | None:
        """``running`` or ``waiting`` while the child has a live Activation, else None."""
        if self._continuations is None:
            return None
        return self._continuations.activation_state(child_id)

    def user_authority(self) -> UserGrant:
        """Mint a user grant: the authority a host presents to follow up or interrupt a child.

        Only the service can make one; a copy, a subclass instance or a discriminant is not
        a grant."""
        return self._require_continuations().user_authority()

    async def drain_continuable(self) -> None:
        """Close admission and dispose every live Activation child-first (TEAR-13)."""
        if self._continuations is not None:
            await self._continuations.drain()

    async def drain_continuable_descendants(self, parents: Sequence[Agent]) -> None:
        """Dispose every live descendant of ``parents`` child-first (TEAR-8, TEAR-15)."""
        if self._continuations is not None:
            await self._continuations.drain_descendants(parents)

    async def drain_continuable_children(self, parent: Agent, ids: Sequence[SessionId]) -> None:
        """Dispose the selected live children of ``parent`` (TEAR-11, TEAR-15)."""
        if self._continuations is not None:
            await self._continuations.drain_children(parent, ids)

    def register_continuable_setup(self, contribution: SetupContribution) -> Callable[[], None]:
        """Add a child-scoped capability to every future Activation (SETUP-1)."""
        return self._setups.register(contribution)

    # ------------------------------------------------------------------ budgets (BUDGET)

    def set_budget(self, agent: Agent, budget: Budget) -> None:
        """Set (or raise) a root agent's budget: its children's budgets are carved from it."""
        self.budgets.set_budget(agent, budget)

    def raise_budget(self, child_id: SessionId, budget: Budget) -> None:
        """Raise a child's own caps (carved from its parent's remaining), e.g. to accept
        follow-ups after ``BUDGET_EXHAUSTED``."""
        self.budgets.raise_budget(child_id, budget)

    def remaining_budget(self, agent_id: SessionId) -> Budget | None:
        """What ``agent_id`` may still spend per dimension (None: it has no budget)."""
        return self.budgets.remaining(agent_id)

    # ------------------------------------------------------------------ catalog (LIST)

    async def list_children(
        self, parent_id: SessionId, *, signal: AbortSignal | None = None
    ) -> builtins.list[ListingRow]:
        """The subagent children of ``parent_id``, live-preferred (LIST-1..14), with their
        remaining budget (BUDGET-16)."""
        rows = await catalog.list_children(
            parent_id,
            projections=self.projections,
            sessions=self.sessions,
            persistence=self.persistence,
            cache=self.cache,
            signal=signal,
        )
        return [self._with_budget(row) for row in rows]

    async def list_descendants(
        self, root_id: SessionId, *, signal: AbortSignal | None = None
    ) -> builtins.list[DescendantRow]:
        """Every subagent descendant of ``root_id`` with its parent and depth (LIST-15)."""
        rows = await catalog.list_descendants(
            root_id,
            projections=self.projections,
            sessions=self.sessions,
            persistence=self.persistence,
            cache=self.cache,
            signal=signal,
        )
        return [attrs.evolve(row, row=self._with_budget(row.row)) for row in rows]

    def _with_budget(self, row: ListingRow) -> ListingRow:
        if not isinstance(row, ChildRow):
            return row
        left = self.budgets.remaining(row.id)
        return row if left is None else attrs.evolve(row, budget=left)


def _fields_of(payload: LifecyclePayload) -> dict[str, object]:
    """The ``extra=`` fields of a warning about ``payload``'s run (OBS-5)."""
    start = payload.start if isinstance(payload, RunEndInfo) else payload
    if isinstance(start, RunStartInfo):
        return telemetry.fields(start.child_id, start.parent_session, None, start.run_id)
    return telemetry.fields()


def _contain(event_name: str, outcome: Awaitable[object], extra: dict[str, object]) -> None:
    """Log a failure of a listener's returned awaitable instead of letting it escape."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError as error:  # no running loop to await it on
        _log.warning(
            "%s listener returned an awaitable outside a loop: %s", event_name, error, extra=extra
        )
        if asyncio.iscoroutine(outcome):
            outcome.close()
        return
    future = asyncio.ensure_future(outcome, loop=loop)

    def report(done: asyncio.Future[object]) -> None:
        if not done.cancelled() and done.exception() is not None:
            error = done.exception()
            assert error is not None
            _log.warning("%s listener failed: %s", event_name, render_error(error), extra=extra)

    future.add_done_callback(report)


__all__ = [
    "EVENT_NAMES",
    "LifecyclePayload",
    "Listener",
    "SubagentService",
    "resolve_start_request",
]
