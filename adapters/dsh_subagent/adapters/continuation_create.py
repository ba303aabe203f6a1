"""Creating and reconstructing continuable children: fresh start and cold resume.

Theory of operation
-------------------
1. Fresh start (CONT-3..CONT-12): after the core reserved the id (admission, duplicates),
   persistence, live ids, depth, the descriptor snapshot and the delegated policy are
   settled before the first await; the provider prepares (no ``prepare_continuable``:
   ``UNSUPPORTED_CAPABILITY``; the core re-checks admission after); then, under the
   per-child lock, a reserved id is checked against persisted headers, the seed is staged as
   ``[fork prefix][end-seed][descriptor]`` (DESC-11, ``seed_length`` = prefix length), the
   child is created with its policy events and composition in the unpublished window and its
   setup contributions committed before publication, published, and given its prompt with
   source ``user``. The id is reserved in the store first (``persistence.reserve``, its
   lease held from then on), so a second harness on the store starting the same id gets
   ``DUPLICATE_CHILD`` (LEASE-4).
2. Cold resume (CONT-17, CONT-18): inspect without mutating, authorize against the
   inspected header before any reconstruction, take the child's store lease (the core's
   ``LeaseAcquired``; held by another live harness: ``LeaseRefused``, and the core's
   ``PostToMailbox`` goes back to the caller, LEASE-1, LEASE-2, DUR-20), read the child's
   durable mailbox (``continuation_mailbox``), fold the descriptor over the own suffix
   (DESC-9, DESC-10), then resume through the registry with only the recorded route
   (CONT-13) and the descriptor's persona and tool filter composed again (CONT-19); the
   provider is never consulted. The pending mailbox messages are delivered first, then the
   caller's (DUR-23); the final submission re-authorizes against the live child. A resume
   for mail alone (no content) with nothing left pending rolls back.
3. Materialization (CONT-10) publishes through the core's ``ChildMaterialized``; the core
   refuses a closing lineage or a releasing parent and disposes the handle. Every failure
   before acceptance is rolled back with ``StartRolledBack`` (CONT-9, TEAR-7), silently,
   and gives the lease up; a published child gives it up when it is released (LEASE-6).
4. Budgets (BUDGET-12): a fresh start carves the child's node before its first side effect
   and attaches the child in its unpublished window (a rollback closes the node); a cold
   resume reopens the node from the child's log (or meters it through the open one) and
   refuses the follow-up of an exhausted child.
5. Both paths run inside the drain barrier, so a drain waits for their publication or
   rollback (TEAR-13).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import attrs

from dsh_subagent.adapters.budgets import BudgetBook, ChildBudget
from dsh_subagent.adapters.clock import epoch_ms
from dsh_subagent.adapters.continuation_engine import (
    Engine,
    LiveChild,
    Routed,
    new_release,
    release_lease,
)
from dsh_subagent.adapters.continuation_mailbox import Mailbox
from dsh_subagent.adapters.continuation_support import Barrier, ChildLocks, check_aborted, quietly
from dsh_subagent.adapters.continuation_types import (
    ContinuableStartSpec,
    Identities,
    ParentAgent,
    UserGrant,
)
from dsh_subagent.adapters.durability import Accepted
from dsh_subagent.adapters.protocols import (
    Agent,
    AgentHandle,
    AgentRegistry,
    ApprovalPolicyService,
    CreateOptions,
    Lease,
    ResumeOptions,
    SandboxPolicyService,
    SessionMeta,
    SessionPersistence,
    SessionRecord,
    SessionStore,
    SetupCommit,
)
from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ContinuableProvider,
    can_prepare_continuable,
)
from dsh_subagent.adapters.providers.in_process import child_agent_options
from dsh_subagent.adapters.setup_registry import ContinuableSetupRegistry
from dsh_subagent.adapters.signals import AbortController, AbortSignal, Scope, race_abort
from dsh_subagent.core.authority import EMPTY_LINEAGE, Denied, authorize_followup
from dsh_subagent.core.capabilities import check_continuable_capability
from dsh_subagent.core.depth import child_depth, delegation_depth_of
from dsh_subagent.core.descriptor import (
    descriptor_to_payload,
    fold_descriptor,
    resume_descriptor,
    snapshot_descriptor,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager.effects import PostToMailbox
from dsh_subagent.core.manager.events import (
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    ColdResumeStarted,
    DescriptorSnapshotted,
    LeaseAcquired,
    LeaseRefused,
    StartRolledBack,
)
from dsh_subagent.core.policy import (
    DelegatedPolicy,
    capture_delegated_policy,
    delegation_log_entries,
)
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    END_SEED,
    USER_SOURCE,
    AgentOptions,
    Content,
    ContinuableDescriptor,
    JsonValue,
    MessageId,
    MessageSource,
    Mode,
    Origin,
    RunId,
    SessionEvent,
    SessionId,
    ToolFilter,
    UserMessage,
)
from dsh_subagent.core.wire import needs_end_seed


@attrs.frozen(eq=False)
class Services:
    """What creation needs from the deployment; resolved per call where optional."""

    agents: AgentRegistry
    sessions: SessionStore
    persistence: Callable[[], SessionPersistence | None]
    providers: Callable[[str], object]
    setups: ContinuableSetupRegistry | None
    sandbox: Callable[[], SandboxPolicyService | None]
    approval: Callable[[], ApprovalPolicyService | None]
    compose: Callable[..., object]
    ids: Callable[[], str]
    budgets: BudgetBook = attrs.field(factory=BudgetBook)

    def require_persistence(self) -> SessionPersistence:
        persistence = self.persistence()
        if persistence is None:
            raise SubagentError(
                ErrorCode.PERSISTENCE_UNAVAILABLE, "continuable children need session persistence"
            )
        return persistence


class Creator:
    """Fresh starts and cold resumes over one engine (rules 1-4)."""

    def __init__(
        self,
        services: Services,
        engine: Engine,
        identities: Identities,
        locks: ChildLocks,
        barrier: Barrier,
        *,
        mailbox: Mailbox,
    ) -> None:
        self._services = services
        self._mailbox = mailbox
        self._agents = services.agents
        self._engine = engine
        self._identities = identities
        self._locks = locks
        self._barrier = barrier
        #: Store leases granted to a start or resume that has no live child yet (rule 3).
        self._leases: dict[SessionId, Callable[[], Awaitable[bool | None]]] = {}
        #: Budget nodes carved for a fresh start not yet accepted (rolled back with it).
        self._carved: dict[SessionId, ChildBudget] = {}

    async def start(self, spec: ContinuableStartSpec) -> Accepted:
        """Reserve, then create; any failure before acceptance rolls back (rule 1)."""
        child_id = spec.child_id or SessionId(self._services.ids())
        parent = spec.parent
        lineage = self._identities.lineage(parent)
        reserved = ChildIdReserved(self._engine.event_id(), child_id, self._identities.ref(parent))
        self._engine.dispatch(reserved)
        async with self._barrier.in_flight(lineage):
            try:
                # The per-child lock is held from reservation to acceptance, so a follow-up
                # issued meanwhile waits and joins after the prompt (CONT-14, RES-6).
                async with self._locks.locked(child_id):
                    accepted = await self._start_reserved(spec, child_id)
            except BaseException:
                await self._roll_back(child_id)
                raise
            self._carved.pop(child_id, None)  # accepted: the node stays with the child
            return accepted

    async def _start_reserved(self, spec: ContinuableStartSpec, child_id: SessionId) -> Accepted:
        parent, intent = spec.parent, spec.intent
        persistence = self._services.require_persistence()
        self._check_unused(child_id)
        carved = self._services.budgets.carve(parent.id, child_id, spec.budget)
        if carved is not None:
            self._carved[child_id] = carved
        await self._grant(persistence, await persistence.reserve(child_id))
        parent_depth = delegation_depth_of(parent.session.header, parent.options)
        depth = child_depth(parent_depth, intent.max_depth)
        overrides = intent.agent_options or AgentOptions()
        descriptor = snapshot_descriptor(
            mode=Mode.CONTINUABLE,
            provider=spec.provider,
            label=spec.label,
            agent_provider=overrides.provider or parent.options.provider,
            agent_model=overrides.model or parent.options.model,
            persona=intent.persona,
            tool_filter=intent.tool_filter,
        )
        assert isinstance(descriptor, ContinuableDescriptor)
        policy = self._capture_policy(parent)
        self._engine.dispatch(DescriptorSnapshotted(self._engine.event_id(), child_id))
        provider = self._continuable_provider(spec.provider)
        signal = spec.signal or AbortController().signal
        prepared = await provider.prepare_continuable(
            ContinuableCreateRequest(child_id, parent, signal)
        )
        check_aborted(signal)
        self._engine.dispatch(ChildPrepared(self._engine.event_id(), child_id))
        self._check_unused(child_id)
        prefix = prepared.seed
        seed = _seed_with_descriptor(prefix, descriptor_to_payload(descriptor), epoch_ms())
        header = parent.session.header
        options = CreateOptions(
            session_id=child_id,
            meta=SessionMeta(
                cwd=header.cwd,
                parent_session=parent.id,
                seed_length=len(prefix) if prefix else None,
                origin=Origin.SUBAGENT,
                delegation_depth=depth,
                agent_preset=header.agent_preset,
            ),
            seed=seed,
            agent_options=child_agent_options(parent.options, intent.agent_options, depth),
            signal=signal,
            setup=self._setup,
            configure=self._configure_fresh(parent, policy, intent.persona, intent.tool_filter),
        )
        await self._materialize(
            child_id, parent, signal, lambda: self._agents.create(options), descriptor
        )
        return self._submit(child_id, intent.prompt, USER_SOURCE, ParentAgent(parent), signal)

    def _continuable_provider(self, name: str) -> ContinuableProvider:
        provider = self._services.providers(name)
        if provider is None:
            raise SubagentError(ErrorCode.NO_PROVIDER, f"no provider named {name!r}")
        check_continuable_capability(name, can_prepare=can_prepare_continuable(provider))
        return cast(ContinuableProvider, provider)

    def _configure_fresh(
        self,
        parent: Agent,
        policy: DelegatedPolicy,
        persona: str | None,
        tool_filter: ToolFilter | None,
    ) -> Callable[[Agent], None]:
        """The unpublished window of a fresh child: policy events, then composition."""

        def configure(child: Agent) -> None:
            for entry in delegation_log_entries(policy, fresh=True):
                child.session.append(entry.type, entry.data)
            self._services.compose(child, parent, persona=persona, tool_filter=tool_filter)
            carved = self._carved.get(child.id)
            if carved is not None:
                carved.attach(child)

        return configure

    async def _setup(self, scope: Scope) -> SetupCommit | None:
        """Setup contributions from the current registrations (SETUP-2, CONT-19)."""
        setups = self._services.setups
        return None if setups is None else setups.apply(scope)

    # ------------------------------------------------------------------ cold resume

    async def cold_resume(
        self,
        child_id: SessionId,
        content: Content | None,
        source: MessageSource,
        authority: ParentAgent | UserGrant,
        signal: AbortSignal | None,
    ) -> Accepted | PostToMailbox | None:
        """Reconstruct an absent child from its log, never through the provider (rule 2).

        Returns the acceptance, the core's ``PostToMailbox`` when another harness holds the
        child, or None for a resume for mail alone (``content`` None)."""
        persistence = self._services.require_persistence()
        signal = signal or AbortController().signal
        try:
            record = await race_abort(persistence.inspect(child_id), signal)
        except Exception as exc:
            check_aborted(signal)
            raise SubagentError(
                ErrorCode.NOT_RESUMABLE, f"child {child_id} is unavailable", cause=exc
            ) from exc
        check_aborted(signal)
        header = record.header
        core_authority = self._identities.followup_authority(authority)
        decision = authorize_followup(core_authority, header.parent_session)
        if isinstance(decision, Denied):
            raise SubagentError(decision.code, decision.reason)
        descriptor = resume_descriptor(fold_descriptor(record.events, header.seed_length))
        parent_id = header.parent_session
        parent = None if parent_id is None else self._agents.get(parent_id)
        lineage = EMPTY_LINEAGE if parent is None else self._identities.lineage(parent)
        self._engine.dispatch(ColdResumeStarted(self._engine.event_id(), child_id, parent_id))
        async with self._barrier.in_flight(lineage):
            try:
                message_id = None if content is None else self._engine.message_id()
                lease = await self._acquire(persistence, child_id, message_id)
                if isinstance(lease, PostToMailbox):
                    return lease
                # The grant saw no row: nothing to read. One posted since is named by the
                # store's watch (started by ``_grant``), whose pass waits for this lock.
                mail: list[UserMessage] = []
                parked = False
                if lease.mail:
                    mail, parked = await self._mailbox.take_over(child_id, record)
                if content is None and not mail and not parked:
                    await self._roll_back(child_id)
                    return None
                await self._resume(
                    child_id, parent, signal, descriptor, record, revision=lease.revision
                )
                if content is not None:  # an exhausted child takes no follow-up (BUDGET-14)
                    self._services.budgets.refuse_exhausted(child_id)
                self._mailbox.deliver(child_id, mail)  # first, in acceptance order (DUR-23)
                accepted = (
                    None
                    if content is None
                    else self._submit(child_id, content, source, authority, signal)
                )
                if parked:  # logged by a holder that died before claiming it (DUR-26)
                    self._engine.children[child_id].handle.agent.wake()
                return accepted
            except BaseException:
                await self._roll_back(child_id)
                raise

    async def _resume(
        self,
        child_id: SessionId,
        parent: Agent | None,
        signal: AbortSignal,
        descriptor: ContinuableDescriptor,
        inspected: SessionRecord,
        *,
        revision: int | None,
    ) -> None:
        """Materialize a resume: only the recorded route, no depth, composition again;
        ``revision`` is the stored log length the lease's grant read (None: not read)."""
        route = AgentOptions(provider=descriptor.agent_provider, model=descriptor.agent_model)
        options = ResumeOptions(
            resume_session_id=child_id,
            agent_options=route,
            signal=signal,
            setup=self._setup,
            inspected=inspected,
            stored_revision=revision,
        )

        def compose(agent: Agent) -> None:
            # The registry offers no pre-publication hook on resume; its vetoable
            # ``agent/created`` runs before the handle returns, so a failure rolls back.
            if agent.id == child_id:
                self._services.compose(
                    agent,
                    parent if parent is not None else agent,
                    persona=descriptor.persona,
                    tool_filter=descriptor.tool_filter,
                )
                self._services.budgets.restore(agent, agent.session.header.parent_session)

        stop = self._agents.created.subscribe(compose)
        try:
            await self._materialize(
                child_id, parent, signal, lambda: self._agents.resume(options), descriptor
            )
        except SubagentError:
            raise
        except Exception as exc:
            check_aborted(signal)
            raise SubagentError(
                ErrorCode.NOT_RESUMABLE, f"child {child_id} could not be resumed", cause=exc
            ) from exc
        finally:
            stop()

    async def _acquire(
        self, persistence: SessionPersistence, child_id: SessionId, message_id: MessageId | None
    ) -> PostToMailbox | Lease:
        """Take the child's lease; the core decides whether the resume may run, or where
        the follow-up goes instead (rule 2)."""
        try:
            lease = await persistence.acquire(child_id)
        except SubagentError as error:
            if error.code is not ErrorCode.ACTIVATION_HELD:
                raise
            post = message_id if self._mailbox.available() else None
            event = LeaseRefused(self._engine.event_id(), child_id, error.message, post)
            held = self._engine.dispatch(event)
            assert isinstance(held, PostToMailbox)
            return held
        await self._grant(persistence, lease)
        self._engine.dispatch(LeaseAcquired(self._engine.event_id(), child_id, lease.epoch))
        return lease

    # ------------------------------------------------------------------ shared

    async def _grant(self, persistence: SessionPersistence, lease: Lease) -> None:
        """Hold a granted lease until the child (or its rollback) gives it up (rule 3)."""

        self._leases[lease.session_id] = _LeaseRelease(persistence, lease)
        self._mailbox.watch(persistence)

    async def _materialize(
        self,
        child_id: SessionId,
        parent: Agent | None,
        signal: AbortSignal,
        open_handle: Callable[[], Awaitable[AgentHandle]],
        descriptor: ContinuableDescriptor,
    ) -> None:
        """Create or resume the child, then publish it in one step (CONT-10)."""
        lineage = EMPTY_LINEAGE if parent is None else self._identities.lineage(parent)
        check_aborted(signal)
        handle = await open_handle()
        agent = handle.agent
        parent_session = agent.session.header.parent_session
        live = LiveChild(
            child_id, handle, descriptor.provider, descriptor.label, parent_session, new_release()
        )
        live.release_lease = self._leases.pop(child_id, None)
        self._engine.children[child_id] = live
        check_aborted(signal)
        child = self._identities.ref(agent)
        run_id = RunId(self._services.ids())
        status = AgentStatus(agent.status.value)
        event = ChildMaterialized(
            self._engine.event_id(), child_id, run_id, child, lineage.with_member(child), status
        )
        try:
            self._engine.dispatch(event)
        except SubagentError:
            if live.rollback is not None:
                await quietly(live.rollback)
                await release_lease(live)
            raise
        if self._mailbox.available():
            self._mailbox.after_release(live)

    def _submit(
        self,
        child_id: SessionId,
        content: Content,
        source: MessageSource,
        authority: ParentAgent | UserGrant,
        signal: AbortSignal,
    ) -> Accepted:
        """The first delivery to a materialized child: accepted or raised, never routed.

        A selected drain that opened the child's disposal before this delivery (e.g. from a
        ``subagent/start`` listener) leaves nothing to deliver to: the start fails
        ``ACTIVATION_CLOSING`` and the drain tears the child down (TEAR-13, ERR-7)."""
        check_aborted(signal)
        routed = self._engine.submit(
            child_id, content, source, lambda: self._identities.followup_authority(authority)
        )
        if isinstance(routed, Routed):
            raise SubagentError(
                ErrorCode.ACTIVATION_CLOSING,
                f"{child_id} was closed by a drain before its prompt was accepted",
                field="child_id",
            )
        return routed

    async def _roll_back(self, child_id: SessionId) -> None:
        """Undo a start or resume that failed before acceptance (CONT-9, TEAR-7)."""
        live = self._engine.children.get(child_id)
        if child_id in self._engine.state.activations:
            event = StartRolledBack(self._engine.event_id(), child_id, live is not None)
            self._engine.dispatch(event)
        if live is not None:
            await quietly(live.rollback if live.rollback is not None else live.released)
            await release_lease(live)
        release = self._leases.pop(child_id, None)
        if release is not None:
            await quietly(release())
        carved = self._carved.pop(child_id, None)
        if carved is not None:
            carved.close()

    def _check_unused(self, child_id: SessionId) -> None:
        sessions = self._services.sessions
        if self._agents.get(child_id) is not None or sessions.get(child_id) is not None:
            raise SubagentError(
                ErrorCode.DUPLICATE_CHILD, f"{child_id} is already live", field="child_id"
            )

    def _capture_policy(self, parent: Agent) -> DelegatedPolicy:
        sandbox = self._services.sandbox()
        override = None if sandbox is None else sandbox.override_of(parent.session)
        available = self._services.approval() is not None
        return capture_delegated_policy(override, approval_available=available)


class _LeaseRelease:
    """Gives one granted lease up when called (one slotted object, no closure; rule 3)."""

    __slots__ = ("_lease", "_persistence")

    def __init__(self, persistence: SessionPersistence, lease: Lease) -> None:
        self._persistence = persistence
        self._lease = lease

    async def __call__(self) -> bool | None:
        return await self._persistence.release(self._lease)


def _seed_with_descriptor(
    prefix: Sequence[SessionEvent] | None, descriptor: JsonValue, now: float
) -> tuple[SessionEvent, ...]:
    """The child's seed: the provider's prefix closed by its end-seed marker (DESC-11),
    then the descriptor as the child's first own event (DESC-12)."""
    seed = list(prefix or ())
    if needs_end_seed(prefix):
        seed.append(SessionEvent(END_SEED, len(seed), now, {}))
    seed.append(SessionEvent(DESCRIPTOR_EVENT, len(seed), now, descriptor))
    return tuple(seed)


__all__ = ["Creator", "Services"]
