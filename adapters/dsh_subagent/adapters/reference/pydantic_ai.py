"""pydantic-ai as a child agent loop: each model step of the reference loop is one agent run.

Theory of operation
-------------------
1. ``PydanticAIModel`` is a ``Model`` (``protocols.Model``): the reference loop keeps the
   durable two-list inbox, wake latch, cancel and disposal (HARNESS-3/5/10/11/18), and every
   step it takes is one run of a ``pydantic_ai.Agent``. A follow-up or a settlement notice is
   therefore a new run over the kept message history.
2. The history is rebuilt from the session log on every run (``history_of``): ``user/message``
   becomes a ``UserPromptPart``, ``tool/result`` a ``ToolReturnPart``, and each
   ``assistant/message`` a response of text and tool-call parts. Nothing lives only in
   memory, so a child cold-resumed from SQLite continues the same conversation. The loop's
   system-prompt sections and runtime context become the run's instructions.
3. The harness's tools (the ones the step's request lists as visible) are offered to the run
   as tools that defer (``CallDeferred``): a run that calls them ends with
   ``DeferredToolRequests``, which become the step's tool calls, so the loop executes them
   (as the calling agent, under its guards) and logs ``tool/result`` in our vocabulary.
   With pydantic-ai's instrumentation on, each deferral runs inside its ``execute_tool``
   span; the tool captures that span's context and ``tool_scope`` runs the loop's execution
   of the call under it, so our spans (the ``subagent`` tool's, its child's) nest under
   pydantic-ai's tool span in its trace (OBS-2). That span has ended by then: it times the
   deferral, ours time the call. Tools of the pydantic-ai agent itself run
   inside the run and are kept as ``inner-tool-call`` data blocks of the assistant message.
4. Cancellation: an abort of the step's signal calls ``AgentRun.cancel()`` on the live run;
   the loop then records ``aborted`` with the cancel cause.
5. Stop reasons: a run ending with finish reason ``length`` or raising
   ``UsageLimitExceeded`` is ``max-tokens``; ``content_filter`` is a refusal; any other
   exception propagates and the loop records ``error``; otherwise ``completed``. The run's
   usage becomes the step's ``usage``; the request's ``max_tokens`` goes in as a model
   setting (BUDGET-12).
6. Steering lands at the next step boundary (the next run's input), not through
   ``AgentRun.enqueue``: a message handed to a live run would leave the durable inbox
   without a claim the log records, breaking "every accepted message leaves once"
   (HARNESS-11) across a crash.
7. ``bridge(model)`` turns any of our ``Model``s (e.g. a scripted one) into a pydantic-ai
   ``FunctionModel``, so the conformance suite's scripts drive real pydantic-ai runs.
8. pydantic-ai comes with the ``pydantic-ai`` extra; without it, importing this module raises
   ``MissingExtra`` naming that extra.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Mapping, Sequence

from dsh_subagent.core.extras import MissingExtra

try:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai import (
        AgentRun,
        AgentRunResult,
        CallDeferred,
        DeferredToolRequests,
        FunctionToolset,
        RunContext,
        Tool,
        UsageLimitExceeded,
        UsageLimits,
    )
    from pydantic_ai.messages import (
        FinishReason,
        ModelMessage,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.messages import ModelRequest as PydanticRequest
    from pydantic_ai.models.function import AgentInfo, FunctionModel
except ModuleNotFoundError as err:  # the base install has no pydantic-ai
    raise MissingExtra("the pydantic-ai adapter", "pydantic-ai-slim", "pydantic-ai") from err

from dsh_subagent.adapters import telemetry
from dsh_subagent.adapters.protocols import Model, ModelRequest, ModelStep, ToolCall, Usage
from dsh_subagent.adapters.reference.harness import ReferenceHarness, ToolsOf, open_with_tools_of
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TOOL_RESULT,
    USER_MESSAGE,
    AgentOptions,
    Content,
    DataBlock,
    JsonObject,
    JsonValue,
    SessionEvent,
    TextBlock,
)

AgentFor = Callable[[LiveSession, AgentOptions], PydanticAgent[None, str]]
"""Builds the pydantic-ai agent a child's turns run on."""
"""The harness tool layer of a live agent, for the tool definitions offered to a run."""

_current: contextvars.ContextVar[ModelRequest] = contextvars.ContextVar("dsh_model_request")
_OUTPUT = [str, DeferredToolRequests]


def _plain(content: Content) -> str:
    parts = [b.text if isinstance(b, TextBlock) else json.dumps(b.value) for b in content]
    return "\n".join(parts)


def _response_parts(content: Content) -> list[ModelResponsePart]:
    parts: list[ModelResponsePart] = []
    for block in content:
        value = block.value if isinstance(block, DataBlock) else None
        if isinstance(value, Mapping) and value.get("type") == "tool-call":
            arguments = value.get("arguments")
            args = dict(arguments) if isinstance(arguments, Mapping) else {}
            parts.append(ToolCallPart(str(value["name"]), args, tool_call_id=str(value["id"])))
        elif isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
    return parts


def _decoded(event: SessionEvent, data: Mapping[str, JsonValue]) -> ModelRequestPart | Content:
    if event.type == USER_MESSAGE:
        message = wire.decode_message(data.get("message"), "message")
        return UserPromptPart(_plain(message.content))
    if event.type == TOOL_RESULT:
        content = wire.decode_content(data.get("content"), "content")
        name, call_id = str(data.get("tool")), str(data.get("callId"))
        return ToolReturnPart(name, _plain(content), tool_call_id=call_id)
    body = data.get("message")
    return wire.decode_content(body.get("content") if isinstance(body, Mapping) else None, "c")


def history_of(events: Sequence[SessionEvent]) -> list[ModelMessage]:
    """The pydantic-ai message history a session log holds, ending with any pending input."""
    history: list[ModelMessage] = []
    pending: list[ModelRequestPart] = []
    for event in events:
        data = event.data
        if event.type not in {USER_MESSAGE, TOOL_RESULT, ASSISTANT_MESSAGE}:
            continue
        if not isinstance(data, Mapping):
            field = f"events[{event.seq}]"
            raise SubagentError(ErrorCode.CORRUPT_SESSION, f"{field}: not an object", field=field)
        decoded = _decoded(event, data)
        if not isinstance(decoded, tuple):
            pending.append(decoded)
            continue
        if pending:
            history.append(PydanticRequest(parts=pending))
            pending = []
        history.append(ModelResponse(parts=_response_parts(decoded)))
    if pending:
        history.append(PydanticRequest(parts=pending))
    return history


def _instructions(request: ModelRequest) -> str | None:
    lines = [text for _, _, text in (*request.system_prompt, *request.runtime_context)]
    return "\n\n".join(lines) or None


def _inner_calls(messages: Sequence[ModelMessage]) -> list[DataBlock]:
    """The run's own (non-deferred) tool calls with their returns, as data blocks."""
    returns = {
        part.tool_call_id: part.model_response_str()
        for message in messages
        if isinstance(message, PydanticRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    blocks = []
    for message in messages:
        for part in message.parts if isinstance(message, ModelResponse) else ():
            if isinstance(part, ToolCallPart) and part.tool_call_id in returns:
                arguments: JsonValue = part.args_as_dict()
                block = {"type": "inner-tool-call", "name": part.tool_name}
                result = returns[part.tool_call_id]
                blocks.append(DataBlock({**block, "arguments": arguments, "result": result}))
    return blocks


def _deferred(output: object) -> tuple[ToolCall, ...]:
    if not isinstance(output, DeferredToolRequests):
        return ()
    return tuple(
        ToolCall(call.tool_call_id, call.tool_name, _arguments(call)) for call in output.calls
    )


def _arguments(call: ToolCallPart) -> JsonObject:
    arguments: JsonObject = call.args_as_dict()
    return arguments


class PydanticAIModel:
    """Runs each step of the reference loop as one ``pydantic_ai.Agent`` run."""

    def __init__(
        self,
        agent: PydanticAgent[None, str],
        *,
        tools_of: ToolsOf | None = None,
        usage_limits: UsageLimits | None = None,
    ) -> None:
        self.agent = agent
        self.tools_of = tools_of
        self.usage_limits = usage_limits
        self._contexts: dict[str, object] = {}  # tool call id -> pydantic-ai's span context

    def _toolset(self, request: ModelRequest) -> FunctionToolset[None]:
        registry = self.tools_of(request.agent) if self.tools_of is not None else None
        tools = [registry.get(name) for name in request.tools] if registry is not None else []
        return FunctionToolset(
            [
                Tool.from_schema(self._defer, t.name, t.description, dict(t.schema), takes_ctx=True)
                for t in tools
                if t is not None
            ]
        )

    async def _defer(self, ctx: RunContext[None], **_arguments: object) -> None:
        """A harness tool inside the run: hand the call to the loop (rule 3)."""
        context = telemetry.current_context()
        if context is not None and ctx.tool_call_id is not None:
            self._contexts[ctx.tool_call_id] = context
        raise CallDeferred()

    def tool_scope(self, call: ToolCall) -> contextlib.AbstractContextManager[None]:
        """Run the loop's execution of ``call`` under pydantic-ai's tool span (rule 3)."""
        return telemetry.within(self._contexts.pop(call.id, None))

    async def step(self, request: ModelRequest) -> ModelStep:
        self._contexts.clear()  # the previous step's calls have run
        token = _current.set(request)
        run: AgentRun[None, str | DeferredToolRequests]
        node: object
        result: AgentRunResult[str | DeferredToolRequests] | None
        try:
            async with self.agent.iter(
                None,
                output_type=_OUTPUT,
                message_history=history_of(request.events),
                instructions=_instructions(request),
                usage_limits=self.usage_limits,
                toolsets=[self._toolset(request)],
                model_settings=None
                if request.max_tokens is None
                else {"max_tokens": request.max_tokens},
            ) as run:
                remove = request.signal.add_listener(lambda _reason: run.cancel())
                try:
                    async for node in run:
                        del node
                finally:
                    remove()
                result = run.result
        except UsageLimitExceeded as exc:
            return ModelStep(content=(TextBlock(str(exc)),), chunks=(), max_tokens=True)
        finally:
            _current.reset(token)
        assert result is not None  # a run that ended without raising has a result
        response = result.response
        texts = tuple(part.content for part in response.parts if isinstance(part, TextPart))
        used = result.usage
        return ModelStep(
            content=(*_inner_calls(result.new_messages()), *map(TextBlock, texts)),
            chunks=texts,
            tool_calls=_deferred(result.output),
            refusal=response.finish_reason == "content_filter",
            max_tokens=response.finish_reason == "length",
            usage=Usage(used.input_tokens, used.output_tokens),
        )


def bridge(model: Model) -> FunctionModel:
    """A pydantic-ai ``FunctionModel`` answering from one of our ``Model``s.

    Only usable under ``PydanticAIModel.step`` (it reads that step's request): text and data
    blocks become text, tool calls become tool-call parts, ``max_tokens`` and ``refusal``
    become the ``length`` and ``content_filter`` finish reasons.
    """

    async def answer(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        step = await model.step(_current.get())
        parts: list[ModelResponsePart] = [TextPart(_plain(step.content))]
        parts += [
            ToolCallPart(c.name, dict(c.arguments), tool_call_id=c.id) for c in step.tool_calls
        ]
        finish: FinishReason = "stop"
        if step.max_tokens or step.refusal:
            finish = "length" if step.max_tokens else "content_filter"
        return ModelResponse(parts=parts, finish_reason=finish)

    return FunctionModel(answer)


async def open_pydantic_ai_harness(
    agent_for: AgentFor, *, db: str | None = None, usage_limits: UsageLimits | None = None
) -> ReferenceHarness:
    """The reference harness whose agents' turns run on pydantic-ai agents."""

    def model_for(session: LiveSession, options: AgentOptions, tools_of: ToolsOf) -> Model:
        return PydanticAIModel(
            agent_for(session, options), tools_of=tools_of, usage_limits=usage_limits
        )

    return await open_with_tools_of(model_for, db=db)


async def conformance_harness(
    model_for: Callable[[LiveSession, AgentOptions], Model], db: str | None = None
) -> ReferenceHarness:
    """The conformance suite's factory: pydantic-ai agents on ``bridge``d scripted models."""

    def agent_for(session: LiveSession, options: AgentOptions) -> PydanticAgent[None, str]:
        return PydanticAgent(bridge(model_for(session, options)))

    return await open_pydantic_ai_harness(agent_for, db=db)
