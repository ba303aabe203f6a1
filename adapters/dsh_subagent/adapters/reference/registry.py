"""The agent registry of the reference harness: create/resume transactions and disposal.

Theory of operation
-------------------
1. ``get(id)`` returns the live agent or ``None``; ``enter`` is the authoritative same-id
   collision point (HARNESS-14).
2. ``create``/``resume`` run one transaction (HARNESS-16): prepare the session (the store
   validates the seed), build the agent with the factory, run the synchronous
   ``configure(agent)`` (the unpublished creation window's composition), await
   ``setup(agent.ctx)`` raced
   against the caller signal and the registry's teardown, call ``commit()`` synchronously,
   then publish: enter the session, enter the agent, emit ``session/created`` and
   ``agent/created`` (a raising listener vetoes and rolls back) and ``agent/session-start``.
   Any failure disposes the half-built agent and leaves nothing live; a vetoed announcement
   is paired with its disposal event. The caller's signal only governs creation; ``close``
   (factory teardown) aborts pending setups and disposes every live agent. ``resume`` needs
   persistence and uses its repairing ``load`` (HARNESS-17).
3. ``AgentHandle.dispose()`` is memoized and runs, in order: a ``disposed`` cancel without
   keep-inbox (synchronously, at the call), ``when_idle``, the agent scope, leaving the
   registry (``agent/disposed``, contained), leaving the store (``session/disposed``)
   (HARNESS-18).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import attrs

from dsh_subagent.adapters.protocols import (
    AgentConfigure,
    AgentSetup,
    CancelCause,
    CreateOptions,
    ResumeOptions,
    SessionPersistence,
    SessionRecord,
    SessionStartSource,
)
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import open_turn
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.signals import (
    AbortController,
    AbortSignal,
    Emitter,
    any_signal,
    race_abort,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.teardown import aggregate_branches, teardown_failure
from dsh_subagent.core.values import AgentOptions, CancelKind, SessionId

AgentFactory = Callable[[LiveSession, AgentOptions], ReferenceAgent]


@attrs.frozen
class SessionStart:
    """``agent/session-start`` payload."""

    agent: ReferenceAgent
    source: SessionStartSource


DISPOSED: CancelCause = CancelCause(CancelKind.DISPOSED)


def _whole(session_id: SessionId, options: ResumeOptions) -> SessionRecord | None:
    """The caller's ``inspected`` record of this session, if it has no open turn (a load
    would repair nothing in it)."""
    inspected = options.inspected
    if (
        inspected is not None
        and inspected.header.id == session_id
        and open_turn(session_id, inspected.events) is None
    ):
        return inspected
    return None


async def _load(
    persistence: SessionPersistence,
    session_id: SessionId,
    inspected: SessionRecord | None,
    revision: int | None,
) -> SessionRecord:
    """The repairing load, skipped when ``inspected`` (whole) is still current: its length
    is the stored one (``revision``, read now when None)."""
    if inspected is not None:
        if revision is None:
            revision = await persistence.revision(session_id)
        if revision == len(inspected.events):
            return inspected
    return await persistence.load(session_id)


class AgentHandle:
    """An owned agent with a memoized ``dispose`` (HARNESS-18)."""

    def __init__(self, registry: AgentRegistry, agent: ReferenceAgent) -> None:
        self._registry = registry
        self.agent = agent
        self._disposing: asyncio.Task[None] | None = None

    def dispose(self) -> asyncio.Task[None]:
        """Cancel now (disposed, inbox cleared), then finish teardown; same task every call."""
        if self._disposing is None:
            self.agent.cancel(DISPOSED)
            self._disposing = asyncio.get_running_loop().create_task(self._finish())
        return self._disposing

    async def _finish(self) -> None:
        try:
            await self.agent.when_idle()
            await self.agent.ctx.dispose()
        finally:
            self._registry._leave(self.agent)


class AgentRegistry:
    """Live agents by id, with create/resume transactions (HARNESS-14 .. HARNESS-18)."""

    def __init__(
        self,
        store: SessionStore,
        factory: AgentFactory,
        *,
        persistence: SessionPersistence | None = None,
    ) -> None:
        self.store = store
        self.persistence = persistence
        self._factory = factory
        self._agents: dict[SessionId, tuple[ReferenceAgent, bool]] = {}
        self._handles: dict[SessionId, AgentHandle] = {}
        self._teardown = AbortController()
        self.created: Emitter[ReferenceAgent] = Emitter("agent/created")
        self.disposed: Emitter[ReferenceAgent] = Emitter("agent/disposed")
        self.session_start: Emitter[SessionStart] = Emitter("agent/session-start")

    def get(self, agent_id: SessionId) -> ReferenceAgent | None:
        entry = self._agents.get(agent_id)
        return None if entry is None else entry[0]

    def list(self) -> list[ReferenceAgent]:
        return [agent for agent, _ in self._agents.values()]

    def enter(self, agent: ReferenceAgent) -> None:
        """Make ``agent`` live; a second live agent with the same id raises (HARNESS-14)."""
        if agent.id in self._agents:
            raise invalid("session_id", f"agent {agent.id!r} is already live")
        self._agents[agent.id] = (agent, False)

    def _announce(self, agent: ReferenceAgent) -> None:
        self._agents[agent.id] = (agent, True)
        self.created.emit_vetoable(agent)

    def _leave(self, agent: ReferenceAgent) -> None:
        _, announced = self._agents.pop(agent.id)
        self._handles.pop(agent.id, None)
        if announced:
            self.disposed.emit(agent)
        self.store.leave(agent.session)

    async def create(self, options: CreateOptions) -> AgentHandle:
        """Create and publish a fresh agent (HARNESS-16)."""
        if not isinstance(options, CreateOptions):
            raise invalid("options", "must be CreateOptions")
        if options.signal is not None:
            options.signal.throw_if_aborted()
        session = self.store.prepare(options.session_id, seed=options.seed, meta=options.meta)
        return await self._setup_and_publish(
            session,
            options.agent_options,
            options.setup,
            options.signal,
            SessionStartSource.STARTUP,
            configure=options.configure,
        )

    async def resume(self, options: ResumeOptions) -> AgentHandle:
        """Load (repairing) from persistence and publish (HARNESS-17)."""
        if not isinstance(options, ResumeOptions):
            raise invalid("options", "must be ResumeOptions")
        session_id = require_str(options.resume_session_id, "resume_session_id", non_empty=True)
        if self.persistence is None:
            raise SubagentError(
                ErrorCode.PERSISTENCE_UNAVAILABLE, "cannot resume: no session persistence"
            )
        sid, revision = SessionId(session_id), options.stored_revision
        record = _whole(sid, options)
        if record is not None and revision == len(record.events):
            # Current under the lease's grant: nothing to read, so nothing to race.
            for signal in (options.signal, self._teardown.signal):
                if signal is not None:
                    signal.throw_if_aborted()
        else:
            signal, detach = any_signal(options.signal, self._teardown.signal)
            try:
                record = await race_abort(_load(self.persistence, sid, record, revision), signal)
            finally:
                detach()
        session = self.store.restore(record.header, record.events, source=self.persistence)
        return await self._setup_and_publish(
            session, options.agent_options, options.setup, options.signal, SessionStartSource.RESUME
        )

    async def _setup_and_publish(
        self,
        session: LiveSession,
        agent_options: AgentOptions | None,
        setup: AgentSetup | None,
        caller_signal: AbortSignal | None,
        source: SessionStartSource,
        *,
        configure: AgentConfigure | None = None,
    ) -> AgentHandle:
        signal, detach = any_signal(caller_signal, self._teardown.signal)
        agent = self._factory(session, agent_options or AgentOptions())
        try:
            signal.throw_if_aborted()
            if configure is not None:
                configure(agent)
            commit = None if setup is None else await race_abort(setup(agent.ctx), signal)
            if commit is not None:
                commit.commit()
            self._publish(session, agent, source)
        except BaseException:
            agent.cancel(DISPOSED)
            await agent.when_idle()
            await agent.ctx.dispose()
            raise
        finally:
            detach()  # the caller's signal governs creation only (HARNESS-16)
        handle = AgentHandle(self, agent)
        self._handles[agent.id] = handle
        return handle

    def _publish(
        self, session: LiveSession, agent: ReferenceAgent, source: SessionStartSource
    ) -> None:
        self.store.enter(session)
        try:
            self.enter(agent)
        except BaseException:
            self.store.leave(session)
            raise
        try:
            self.store.announce(session)
            self._announce(agent)
        except BaseException:
            self._leave(agent)
            raise
        self.session_start.emit(SessionStart(agent, source))

    async def close(self) -> None:
        """Abort pending setups and dispose every live agent, awaiting every disposal.

        Failed disposals are raised once, together, as ``ACTIVATION_TEARDOWN_FAILED``.
        """
        self._teardown.abort(SubagentError(ErrorCode.CANCELLED, "agent registry closed"))
        handles = list(self._handles.values())
        outcomes = await asyncio.gather(
            *(handle.dispose() for handle in handles), return_exceptions=True
        )
        failure = aggregate_branches(
            "agent registry",
            [teardown_failure(outcome) for outcome in outcomes if outcome is not None],
        )
        if failure is not None:
            raise failure
