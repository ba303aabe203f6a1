"""The shared in-process one-shot driver: child creation, composition, capture and the run.

Theory of operation
-------------------
1. Start (DRIVER-1): before the first await, refuse an aborted signal, resolve the child depth
   against ``max_depth`` (DEPTH-3/5), mint the child id (a random UUID), and capture the
   delegated policy (POLICY-1/2, DRIVER-9). Then create the child through the agent registry
   with the header meta (DRIVER-6: cwd, the parent's live composed preset, ``parentSession``,
   ``origin: subagent``, ``delegationDepth``, ``seedLength``), the child options (DRIVER-5)
   and the optional seed. ``start`` fulfils only once the registry has published the child; a
   rejection means the registry already rolled it back (ONE-4, ONE-5).
2. The unpublished creation window (DRIVER-2), in order: the delegated policy events after any
   seed (POLICY-3), ``apply_child_composition`` (DRIVER-7), the structured-output capture when
   a schema was requested (STRUCT), the child's budget node when one was carved (BUDGET-12),
   and the hook appending the one-shot descriptor at the
   child's first entered step, inside its initial turn (DESC-12); its frozen payload is
   shared by the children of equal descriptors (a small cache: one copy per provider and
   label). A host setup contribution, if configured, is awaited last, raced against the
   signal.
3. Drive (DRIVER-3): an abort cancels the child with cause ``parent``; unless the run was
   already cancelled during the handoff, the prompt goes in as a follow-up from the user and
   the run waits for the child to be idle. The result is read from the child's own events
   after the seed boundary (ONE-13, FORK-4) with the one-shot mapping (DRIVER-10/11/12).
4. Release (DRIVER-4): a best-effort flush of the child session (ONE-18), then the handle's
   disposal, which removes the agent and session and unwinds every scoped registration. The
   parent owns the child too: the registry's disposal of the parent disposes the child.
5. Structured capture (STRUCT-2..6): a child-local ``structured_output`` tool whose parameters
   are the schema, a prompt section at order 190, arguments validated with ``jsonschema``; a
   valid call is staged and ends the turn, and is committed only when its final tool result is
   appended without error; after a commit every later tool call is refused.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import attrs

from dsh_subagent.adapters.child_composition import apply_child_composition
from dsh_subagent.adapters.frozen_json import freeze_checked
from dsh_subagent.adapters.protocols import (
    Agent,
    AgentHandle,
    AgentRegistry,
    ApprovalPolicyService,
    CancelCause,
    CreateOptions,
    PresetRoster,
    SandboxPolicyService,
    Session,
    SessionMeta,
    StepEntering,
    Tool,
    ToolCall,
    ToolOutcome,
    create_user_message,
)
from dsh_subagent.adapters.providers.base import (
    DrivenRun,
    ResolvedStartRequest,
    aborted_before_publication,
)
from dsh_subagent.adapters.schema import schema_violations
from dsh_subagent.adapters.signals import AbortSignal, Scope, race_abort
from dsh_subagent.adapters.telemetry import fields
from dsh_subagent.core.budget_log import exhausted_limit
from dsh_subagent.core.depth import child_depth, delegation_depth_of, fresh_child_options
from dsh_subagent.core.descriptor import descriptor_to_payload
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.output import Captured, one_shot_result
from dsh_subagent.core.policy import (
    DelegatedPolicy,
    capture_delegated_policy,
    delegation_log_entries,
)
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    TOOL_RESULT,
    AgentOptions,
    CancelKind,
    JsonObject,
    JsonValue,
    OneShotDescriptor,
    Origin,
    SessionEvent,
    SessionId,
    TextBlock,
)

_log = logging.getLogger(__name__)

STRUCTURED_TOOL: Final = "structured_output"
STRUCTURED_DESCRIPTION: Final = (
    "Report your final structured result. Call this exactly once, when your answer is "
    "complete; the arguments must match this tool's parameter schema exactly."
)
STRUCTURED_SECTION: Final = "tool:structured_output"
STRUCTURED_ORDER: Final = 190
STRUCTURED_INSTRUCTION: Final = (
    "When you have your final answer, you MUST report it by calling the `structured_output` "
    "tool with arguments matching its parameter schema exactly. Do not finish with a plain "
    "text answer: only the tool call counts as your result."
)
STRUCTURED_ACK: Final = "Structured output recorded."
PARENT_CANCEL: Final = CancelCause(CancelKind.PARENT)


@functools.lru_cache(maxsize=64)
def _descriptor_payload(descriptor: OneShotDescriptor) -> JsonValue:
    """The frozen ``subagent/descriptor`` payload, one copy per distinct descriptor (rule 2)."""
    return freeze_checked(descriptor_to_payload(descriptor), "descriptor")


ChildSetup = Callable[[Agent, AbortSignal], Awaitable[None]]
"""A host contribution awaited in the child's unpublished creation window."""


class _Cascade:
    """The unreleased runs of each parent, disposed with it (rule 4): one ``agent/disposed``
    listener per host, where a listener per child made every disposal call them all."""

    __slots__ = ("_listening", "_runs")

    def __init__(self) -> None:
        # By the parent's identity (an agent need not be hashable), with the parent itself.
        self._runs: dict[int, tuple[Agent, dict[InProcessRun, None]]] = {}
        self._listening = False

    def link(self, agents: AgentRegistry, parent: Agent, run: InProcessRun) -> None:
        if not self._listening:
            agents.disposed.subscribe(self._on_agent_disposed)
            self._listening = True
        entry = self._runs.get(id(parent))
        if entry is None or entry[0] is not parent:
            entry = self._runs[id(parent)] = (parent, {})
        entry[1][run] = None

    def unlink(self, parent: Agent, run: InProcessRun) -> None:
        entry = self._runs.get(id(parent))
        if entry is not None and entry[0] is parent:
            entry[1].pop(run, None)
            if not entry[1]:
                del self._runs[id(parent)]

    def _on_agent_disposed(self, agent: Agent) -> None:
        entry = self._runs.get(id(agent))
        if entry is None or entry[0] is not agent:
            return
        del self._runs[id(agent)]
        for run in tuple(entry[1]):
            try:
                run.parent_disposed()
            except Exception:  # contained per child, as a listener of its own was
                _log.warning("agent/disposed listener failed", exc_info=True)


@attrs.frozen
class InProcessHost:
    """The services an in-process provider creates children with (all optional but agents)."""

    agents: AgentRegistry
    sandbox: SandboxPolicyService | None = None
    approval: ApprovalPolicyService | None = None
    roster: PresetRoster | None = None
    setup: ChildSetup | None = attrs.field(default=None, eq=False)
    cascade: _Cascade = attrs.field(factory=_Cascade, init=False, eq=False, repr=False)


def child_agent_options(
    parent: AgentOptions, overrides: AgentOptions | None, depth: int
) -> AgentOptions:
    """The parent's route (provider, model, max tokens) overlaid by explicit overrides, plus
    the child depth (DRIVER-5, DEPTH-6)."""
    route = AgentOptions(provider=parent.provider, model=parent.model, max_tokens=parent.max_tokens)
    if overrides is not None:
        route = AgentOptions(
            provider=overrides.provider if overrides.provider is not None else route.provider,
            model=overrides.model if overrides.model is not None else route.model,
            max_tokens=overrides.max_tokens
            if overrides.max_tokens is not None
            else route.max_tokens,
        )
    return fresh_child_options(route, depth)


class StructuredCapture:
    """The forced, child-scoped capture tool of a structured run (rule 5)."""

    def __init__(self, child: Agent, session: Session, schema: JsonObject) -> None:
        self.captured: Captured | None = None
        self._schema = schema
        self._staged: collections.deque[JsonValue] = collections.deque()
        tool = Tool(
            STRUCTURED_TOOL, self._execute, schema=schema, description=STRUCTURED_DESCRIPTION
        )
        ctx = child.ctx
        ctx.defer(child.tools.register(tool))
        ctx.defer(
            child.prompt.section(STRUCTURED_SECTION, STRUCTURED_ORDER, STRUCTURED_INSTRUCTION)
        )
        ctx.defer(child.tools.add_guard(self._guard))
        ctx.defer(session.observe(self._on_event))

    async def _execute(self, arguments: JsonObject, _signal: AbortSignal) -> ToolOutcome:
        violations = schema_violations(self._schema, arguments)
        if violations:
            text = "invalid arguments: " + "; ".join(violations)
            return ToolOutcome((TextBlock(text),), is_error=True)
        self._staged.append(arguments)
        return ToolOutcome((TextBlock(STRUCTURED_ACK),), concludes=True)

    def _on_event(self, event: SessionEvent) -> None:
        data = event.data
        if event.type != TOOL_RESULT or not isinstance(data, Mapping):
            return
        if data.get("tool") != STRUCTURED_TOOL or not self._staged:
            return
        value = self._staged.popleft()
        if data.get("isError") is False and self.captured is None:
            self.captured = Captured(value)

    def _guard(self, call: ToolCall) -> str | None:
        if self.captured is None:
            return None
        return (
            f"structured output already recorded: the run is complete, so `{call.name}` "
            "is not executed"
        )


class InProcessRun(DrivenRun):
    """A published in-process child driven through the core one-shot machine."""

    def __init__(
        self,
        host: InProcessHost,
        request: ResolvedStartRequest,
        parent: Agent,
        seed: tuple[SessionEvent, ...] | None,
    ) -> None:
        core = request.request
        if request.signal.aborted:
            raise aborted_before_publication()
        depth = child_depth(
            delegation_depth_of(parent.session.header, parent.options), core.intent.max_depth
        )
        self._child_id = SessionId(str(uuid.uuid4()))
        super().__init__(request, self._child_id)
        sandbox = host.sandbox.override_of(parent.session) if host.sandbox is not None else None
        self._policy: DelegatedPolicy = capture_delegated_policy(
            sandbox, approval_available=host.approval is not None
        )
        self._host = host
        self._parent = parent
        self._seed = seed
        self._depth = depth
        self._own_from = len(seed) if seed else 0
        self._capture: StructuredCapture | None = None
        self._handle: AgentHandle | None = None
        self._child: Agent | None = None

    @property
    def id(self) -> str:
        return self._child_id

    @property
    def local_agent(self) -> Agent | None:
        return self._child

    async def start(self) -> InProcessRun:
        """Create and publish the child (rules 1-2), then start driving it (rule 3)."""
        parent, core, roster = self._parent, self._request.request, self._host.roster
        meta = SessionMeta(
            cwd=parent.session.header.cwd,
            parent_session=parent.id,
            seed_length=self._own_from or None,
            origin=Origin.SUBAGENT,
            delegation_depth=self._depth,
            agent_preset=roster.composed_preset(parent.ctx) if roster is not None else None,
        )
        options = CreateOptions(
            self._child_id,
            meta=meta,
            seed=self._seed or None,
            agent_options=child_agent_options(
                parent.options, core.intent.agent_options, self._depth
            ),
            signal=self._setup_abort.signal,
            setup=self._host_setup if self._host.setup is not None else None,
            configure=self._configure,
        )
        await self._publish(self._create(options))
        asyncio.get_running_loop().call_soon(self._drive)
        return self

    async def _create(self, options: CreateOptions) -> None:
        self._handle = await self._host.agents.create(options)
        self._child = self._handle.agent
        self._host.cascade.link(self._host.agents, self._parent, self)

    def parent_disposed(self) -> None:
        if self._handle is not None:
            self._handle.dispose()  # the parent owns its children: its disposal cascades

    def _configure(self, child: Agent) -> None:
        session = child.session
        for entry in delegation_log_entries(self._policy, fresh=True):
            session.append(entry.type, entry.data)
        core = self._request.request
        apply_child_composition(
            child,
            self._parent,
            persona=core.intent.persona,
            tool_filter=core.intent.tool_filter,
            roster=self._host.roster,
        )
        if core.output_schema is not None:
            self._capture = StructuredCapture(child, session, core.output_schema)
        if self._request.budget is not None:
            self._request.budget.attach(child, session.id)
        payload = _descriptor_payload(self._request.descriptor)

        def append_descriptor(_entering: StepEntering) -> None:
            stop_listening()
            session.append(DESCRIPTOR_EVENT, payload)

        stop_listening = child.step_entering.subscribe(append_descriptor)
        child.ctx.defer(stop_listening)
        self._child = child

    async def _host_setup(self, _ctx: Scope) -> None:
        assert self._host.setup is not None
        assert self._child is not None
        signal = self._setup_abort.signal
        await race_abort(self._host.setup(self._child, signal), signal)

    def _drive(self) -> None:
        """Send the prompt, then conclude once the child is idle (callbacks, no task)."""
        assert self._child is not None
        if self.work_cancelled:
            self._conclude()
            return
        try:
            self._child.followup(create_user_message(self._request.request.intent.prompt))
        except Exception as error:
            self._settle_fault(error)
        else:
            self._child.on_idle(self._conclude)

    def _conclude(self) -> None:
        assert self._child is not None
        own = self._child.session.events[self._own_from :]
        capture = self._capture
        try:
            result = one_shot_result(
                own,
                cancelled=self.work_cancelled,
                structured_requested=capture is not None,
                captured=capture.captured if capture is not None else None,
            )
        except Exception as error:
            self._settle_fault(error)
        else:
            limit = exhausted_limit(own)
            if limit is not None:
                result = attrs.evolve(result, diagnostic=f"budget exhausted: {limit.value}")
            self._settle(result)

    def _cancel_work(self) -> None:
        if self._child is not None:
            self._child.cancel(PARENT_CANCEL)

    async def _release(self) -> None:
        assert self._handle is not None
        handle = self._handle
        try:
            await self._host.agents.store.flush(handle.agent.session)
        except Exception as error:
            _log.warning(
                "one-shot child %s was not flushed: %s",
                self._child_id,
                error,
                extra=fields(self._child_id, self._parent.id, None, self._request.run_id),
            )
        self._host.cascade.unlink(self._parent, self)
        await handle.dispose()


async def start_in_process(
    host: InProcessHost, request: ResolvedStartRequest, seed: tuple[SessionEvent, ...] | None
) -> InProcessRun:
    """Start a one-shot in-process child (the shared driver behind spawn and fork)."""
    parent = request.parent
    agent_id = getattr(parent, "id", None)
    if not isinstance(agent_id, str) or host.agents.get(SessionId(agent_id)) is not parent:
        raise invalid("request.parent", "must be a live agent of this provider's registry")
    return await InProcessRun(host, request, parent, seed).start()


__all__ = [
    "STRUCTURED_ACK",
    "STRUCTURED_DESCRIPTION",
    "STRUCTURED_INSTRUCTION",
    "STRUCTURED_TOOL",
    "ChildSetup",
    "InProcessHost",
    "InProcessRun",
    "StructuredCapture",
    "child_agent_options",
    "start_in_process",
]
