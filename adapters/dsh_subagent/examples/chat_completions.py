"""A worked port: the reference loop on a model behind a chat-completions-style API.

Theory of operation
-------------------
1. A chat endpoint is one async function, ``endpoint(messages, tools) -> completion``, with
   the shapes chat-completions APIs use: ``messages`` are ``{"role": "system" | "user" |
   "assistant" | "tool", "content": ...}`` dicts (an assistant message may carry
   ``tool_calls``, a tool message answers one by ``tool_call_id``), ``tools`` are function
   definitions, and the completion is ``{"message": <assistant message>, "finish_reason":
   ...}``. An HTTP client fits behind it in a few lines (``docs/porting.md``).
2. ``ChatCompletionsModel`` is a ``Model``, so the port is at the model step: the reference
   loop keeps the durable inbox, wake latch, cancel, turns, registry, store and persistence.
   Each step rebuilds the whole chat from the session log (``messages_of``), so nothing lives
   only in memory and a cold-resumed agent continues the same conversation.
3. The loop runs each step under the turn's abort signal and cancels it on abort, which
   cancels the endpoint call; the loop then records ``aborted`` with the cancel cause. An
   endpoint that raises ends the turn ``error``. Finish reason ``length`` is ``max-tokens``
   and ``content_filter`` a refusal; tool calls become the step's tool calls, which the loop
   runs as the calling agent and logs as ``tool/result``.
4. ``open_chat_harness(endpoint_for, db=...)`` is a ``ReferenceHarness`` whose agents step
   through ``endpoint_for(session, options)``.
5. ``scripted_endpoint(model)`` is a fake in-process endpoint: it checks that what it is sent
   is a well-formed chat, then answers with ``model``'s step for the request in flight
   (``in_flight``, set around every endpoint call). ``conformance_harness`` drives the
   conformance suite's scripted models through it:
   ``pytest --pyargs dsh_subagent.conformance
   --dsh-harness=dsh_subagent.examples.chat_completions:conformance_harness``.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from dsh_subagent.adapters.protocols import Model, ModelRequest, ModelStep, ToolCall, ToolHost
from dsh_subagent.adapters.reference.harness import ReferenceHarness, open_with_tools_of
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core import wire
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TOOL_RESULT,
    USER_MESSAGE,
    AgentOptions,
    Content,
    DataBlock,
    SessionEvent,
    SessionId,
    TextBlock,
)

ChatMessage = dict[str, Any]
"""One chat message as a chat-completions API takes it (plain JSON)."""
ChatEndpoint = Callable[[list[ChatMessage], list[ChatMessage]], Awaitable[ChatMessage]]
"""``endpoint(messages, tools) -> {"message": ..., "finish_reason": ...}``."""
EndpointFor = Callable[[LiveSession, AgentOptions], ChatEndpoint]
ToolsOf = Callable[[SessionId], ToolHost | None]

in_flight: contextvars.ContextVar[ModelRequest] = contextvars.ContextVar("chat_request")
"""The model request an endpoint call answers (for test doubles; a real endpoint ignores it)."""

# ------------------------------------------------------------------ the log as a chat


def _text(content: Content) -> str:
    return "\n".join(b.text if isinstance(b, TextBlock) else json.dumps(b.value) for b in content)


def _assistant(content: Content) -> ChatMessage:
    calls = [b.value for b in content if isinstance(b, DataBlock) and _is_call(b.value)]
    said = tuple(b for b in content if not (isinstance(b, DataBlock) and _is_call(b.value)))
    message: ChatMessage = {"role": "assistant", "content": _text(said) or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
            for call in calls
            if isinstance(call, Mapping)
        ]
    return message


def _is_call(value: object) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "tool-call"


def _message_of(event: SessionEvent) -> ChatMessage | None:
    data = event.data
    if not isinstance(data, Mapping):
        return None
    if event.type == USER_MESSAGE:
        message = wire.decode_message(data.get("message"), f"events[{event.seq}].message")
        return {"role": "user", "content": _text(message.content)}
    if event.type == ASSISTANT_MESSAGE:
        body = data.get("message")
        raw = body.get("content") if isinstance(body, Mapping) else None
        return _assistant(wire.decode_content(raw, f"events[{event.seq}].message.content"))
    if event.type == TOOL_RESULT:
        content = wire.decode_content(data.get("content"), f"events[{event.seq}].content")
        return {"role": "tool", "tool_call_id": data.get("callId"), "content": _text(content)}
    return None


def messages_of(request: ModelRequest) -> list[ChatMessage]:
    """The chat a step sends: the system prompt, then every message the log holds, in order."""
    system = [text for _, _, text in (*request.system_prompt, *request.runtime_context)]
    messages = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    for event in request.events:
        message = _message_of(event)
        if message is not None:
            messages.append(message)
    return messages


def step_of(completion: Mapping[str, Any]) -> ModelStep:
    """The ``ModelStep`` a completion stands for."""
    message = completion["message"]
    text = message.get("content") or ""
    calls = tuple(
        ToolCall(call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message.get("tool_calls") or ()
    )
    finish = completion.get("finish_reason")
    return ModelStep(
        content=(TextBlock(text),) if text else (),
        chunks=(text,) if text else (),
        tool_calls=calls,
        refusal=finish == "content_filter",
        max_tokens=finish == "length",
    )


# ------------------------------------------------------------------ the model and the harness


class ChatCompletionsModel:
    """A ``Model`` whose every step is one call of a chat-completions endpoint."""

    def __init__(self, endpoint: ChatEndpoint, *, tools_of: ToolsOf | None = None) -> None:
        self.endpoint = endpoint
        self.tools_of = tools_of

    def _tools(self, request: ModelRequest) -> list[ChatMessage]:
        host = self.tools_of(request.agent) if self.tools_of is not None else None
        found = [host.get(name) for name in request.tools] if host is not None else []
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": dict(tool.schema),
                },
            }
            for tool in found
            if tool is not None
        ]

    async def step(self, request: ModelRequest) -> ModelStep:
        token = in_flight.set(request)
        try:
            completion = await self.endpoint(messages_of(request), self._tools(request))
        finally:
            in_flight.reset(token)
        return step_of(completion)


async def open_chat_harness(
    endpoint_for: EndpointFor, *, db: str | None = None
) -> ReferenceHarness:
    """The reference harness whose agents step through a chat-completions endpoint."""

    def model_for(session: LiveSession, options: AgentOptions, tools_of: ToolsOf) -> Model:
        return ChatCompletionsModel(endpoint_for(session, options), tools_of=tools_of)

    return await open_with_tools_of(model_for, db=db)


# ------------------------------------------------------------------ a fake endpoint


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def check_chat(messages: Sequence[ChatMessage]) -> None:
    """Raise ``ValueError`` unless ``messages`` is a well-formed chat."""
    called: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in _ROLES or not isinstance(message.get("content"), str | None):
            raise ValueError(f"messages[{index}]: not a chat message: {message!r}")
        if role == "system" and index:
            raise ValueError(f"messages[{index}]: a system message comes first")
        called.update(call["id"] for call in message.get("tool_calls") or ())
        if role == "tool" and message.get("tool_call_id") not in called:
            raise ValueError(f"messages[{index}]: answers no earlier tool call")


def completion_of(step: ModelStep) -> ChatMessage:
    """The completion an endpoint would send for ``step``."""
    message: ChatMessage = {"role": "assistant", "content": _text(step.content) or None}
    if step.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in step.tool_calls
        ]
    finish = "tool_calls" if step.tool_calls else "stop"
    if step.max_tokens or step.refusal:
        finish = "length" if step.max_tokens else "content_filter"
    return {"message": message, "finish_reason": finish}


def scripted_endpoint(model: Model) -> ChatEndpoint:
    """A fake endpoint answering a well-formed chat with ``model``'s step for the request."""

    async def endpoint(messages: list[ChatMessage], tools: list[ChatMessage]) -> ChatMessage:
        check_chat(messages)
        return completion_of(await model.step(in_flight.get()))

    return endpoint


async def conformance_harness(
    model_for: Callable[[LiveSession, AgentOptions], Model], db: str | None = None
) -> ReferenceHarness:
    """The conformance suite's factory: chat agents on fake endpoints over its scripts."""

    def endpoint_for(session: LiveSession, options: AgentOptions) -> ChatEndpoint:
        return scripted_endpoint(model_for(session, options))

    return await open_chat_harness(endpoint_for, db=db)
