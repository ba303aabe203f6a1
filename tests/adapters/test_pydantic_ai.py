"""The pydantic-ai child loop, offline on ``FunctionModel`` / ``TestModel`` (HARNESS-9, -17)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import UsageLimits
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelRequest as PydanticRequest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from dsh_subagent.adapters.protocols import CancelCause, Tool, ToolOutcome, create_user_message
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.pydantic_ai import PydanticAIModel, bridge, history_of
from dsh_subagent.adapters.reference.scripted_model import ScriptedModel, call_tool, reply
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    TOOL_RESULT,
    TURN_END,
    USER_MESSAGE,
    CancelKind,
    JsonObject,
    JsonValue,
    SessionEvent,
    SessionId,
    TextBlock,
)

Answer = Callable[[list[ModelMessage], AgentInfo], Awaitable[ModelResponse]]


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def child(model: PydanticAIModel) -> ReferenceAgent:
    return ReferenceAgent(LiveSession.detached(SessionId("child")), model=model)


def on(answer: Answer, usage_limits: UsageLimits | None = None) -> PydanticAIModel:
    return PydanticAIModel(PydanticAgent(FunctionModel(answer)), usage_limits=usage_limits)


async def turn(agent: ReferenceAgent, text: str) -> None:
    agent.followup(create_user_message((TextBlock(text),)))
    await agent.when_idle()


def ends(agent: ReferenceAgent) -> list[JsonValue]:
    return [e.data for e in agent.session.events if e.type == TURN_END]


def replies(agent: ReferenceAgent) -> list[JsonValue]:
    found: list[JsonValue] = []
    for event in agent.session.events:
        if event.type == ASSISTANT_MESSAGE and isinstance(event.data, Mapping):
            body = event.data["message"]
            assert isinstance(body, Mapping)
            found.append(body["content"])
    return found


def test_harness_9_a_test_model_turn_completes_with_chunks_and_message() -> None:
    async def main() -> None:
        agent = child(PydanticAIModel(PydanticAgent(TestModel(custom_output_text="hello"))))
        await turn(agent, "hi")
        assert ends(agent) == [{"turn": 1, "reason": "completed"}]
        chunks = [e.data for e in agent.session.events if e.type == ASSISTANT_CHUNK]
        assert chunks == [{"chunk": "hello"}]
        assert replies(agent) == [[{"type": "text", "text": "hello"}]]

    run(main)


def test_harness_4_followups_are_new_runs_over_the_kept_history() -> None:
    seen: list[list[str]] = []

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = [
            str(part.content)
            for message in messages
            if isinstance(message, PydanticRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]
        seen.append(prompts)
        return ModelResponse(parts=[TextPart(f"reply {len(seen)}")])

    async def main() -> None:
        agent = child(on(answer))
        await turn(agent, "first")
        await turn(agent, "second")
        assert seen == [["first"], ["first", "second"]]
        history = history_of(agent.session.events)
        assert [type(m).__name__ for m in history] == [
            "ModelRequest",
            "ModelResponse",
            "ModelRequest",
            "ModelResponse",
        ]

    run(main)


def test_harness_9_usage_limit_and_length_finish_map_to_max_tokens() -> None:
    async def long(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("a very long answer indeed")])

    async def cut(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("cut")], finish_reason="length")

    async def main() -> None:
        limited = child(on(long, usage_limits=UsageLimits(output_tokens_limit=1)))
        await turn(limited, "go")
        assert ends(limited) == [{"turn": 1, "reason": "max-tokens"}]
        truncated = child(on(cut))
        await turn(truncated, "go")
        assert ends(truncated) == [{"turn": 1, "reason": "max-tokens"}]

    run(main)


def test_harness_9_a_raising_model_ends_the_turn_error() -> None:
    async def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider down")

    async def main() -> None:
        agent = child(on(broken))
        await turn(agent, "go")
        [end] = ends(agent)
        assert isinstance(end, Mapping)
        assert end["reason"] == "error"
        assert "provider down" in str(end["error"])

    run(main)


def test_harness_9_content_filter_is_a_refusal() -> None:
    async def filtered(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("no")], finish_reason="content_filter")

    async def main() -> None:
        agent = child(on(filtered))
        await turn(agent, "go")
        messages = [e.data for e in agent.session.events if e.type == ASSISTANT_MESSAGE]
        assert messages == [wire.assistant_message_data((TextBlock("no"),), refusal=True)]

    run(main)


def test_harness_5_cancel_aborts_the_live_run_with_its_cause() -> None:
    reached = asyncio.Event()

    async def forever(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover

    async def main() -> None:
        agent = child(on(forever))
        agent.followup(create_user_message((TextBlock("go"),)))
        await reached.wait()
        agent.cancel(CancelCause(CancelKind.USER))
        await agent.when_idle()
        assert ends(agent) == [{"turn": 1, "reason": "aborted", "cause": {"kind": "user"}}]

    run(main)


def test_harness_9_the_runs_own_tool_calls_are_kept_as_inner_tool_call_blocks() -> None:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("found")])

    async def main() -> None:
        agent_ = PydanticAgent(FunctionModel(answer))

        @agent_.tool_plain
        def lookup(q: str) -> str:
            return f"result for {q}"

        agent = child(PydanticAIModel(agent_))
        await turn(agent, "go")
        call = {
            "type": "inner-tool-call",
            "name": "lookup",
            "arguments": {"q": "x"},
            "result": "result for x",
        }
        assert replies(agent) == [
            [{"type": "data", "value": call}, {"type": "text", "text": "found"}]
        ]

    run(main)


def test_harness_9_harness_tools_are_external_and_run_by_the_loop() -> None:
    async def echo(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        return ToolOutcome((TextBlock(f"echo {arguments['q']}"),))

    registry = ToolRegistry()
    registry.register(Tool("echo", echo, description="echo q"))
    script = ScriptedModel([call_tool("echo", {"q": "x"}, call_id="c1"), reply("done")])

    async def main() -> None:
        agent = ReferenceAgent(
            LiveSession.detached(SessionId("child")),
            model=PydanticAIModel(PydanticAgent(bridge(script)), tools_of=lambda _id: registry),
            tools=registry,
        )
        await turn(agent, "go")
        results = [e.data for e in agent.session.events if e.type == TOOL_RESULT]
        assert results == [
            wire.tool_result_data("echo", "c1", (TextBlock("echo x"),), is_error=False)
        ]
        assert ends(agent) == [{"turn": 1, "reason": "completed"}]
        second = script.requests[-1]
        history = history_of(second.events)
        assert isinstance(history[-1], PydanticRequest)
        assert isinstance(history[-1].parts[0], ToolReturnPart)

    run(main)


def test_harness_10_a_corrupt_message_event_raises_corrupt_session() -> None:
    bad = SessionEvent(USER_MESSAGE, 0, 0.0, "not an object")
    with pytest.raises(SubagentError) as raised:
        history_of([bad])
    assert raised.value.code is ErrorCode.CORRUPT_SESSION
    assert raised.value.field == "events[0]"
