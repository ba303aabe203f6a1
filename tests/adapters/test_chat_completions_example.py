"""The chat-completions porting example (``dsh_subagent.examples.chat_completions``) on a plain
fake endpoint: a function that reads only the chat it is sent, as a real API would."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_subagent.adapters.protocols import Tool, ToolOutcome, create_user_message
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core import wire
from dsh_subagent.core.values import (
    TURN_END,
    AgentOptions,
    JsonObject,
    TextBlock,
    TurnEndReason,
)
from dsh_subagent.examples.chat_completions import (
    ChatEndpoint,
    ChatMessage,
    check_chat,
    open_chat_harness,
    step_of,
)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class EchoEndpoint:
    """Calls ``lookup`` when asked to, reports a tool result, else echoes; records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[ChatMessage], list[ChatMessage]]] = []

    async def __call__(self, messages: list[ChatMessage], tools: list[ChatMessage]) -> ChatMessage:
        check_chat(messages)
        self.calls.append((messages, tools))
        last = messages[-1]
        if last["role"] == "tool":
            return {"message": {"role": "assistant", "content": f"found {last['content']}"}}
        if "look it up" in last["content"]:
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"key": "k"}'},
            }
            return {
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        return {"message": {"role": "assistant", "content": f"you said {last['content']}"}}

    def endpoint_for(self, session: LiveSession, options: AgentOptions) -> ChatEndpoint:
        return self


def reasons(events: Any) -> list[TurnEndReason]:
    return [wire.turn_end_reason(e.data) for e in events if e.type == TURN_END]


def test_harness_9_a_chat_step_sends_the_whole_chat_and_runs_the_tool_calls() -> None:
    async def main() -> None:
        endpoint = EchoEndpoint()
        harness = await open_chat_harness(endpoint.endpoint_for)
        agent = await harness.create_agent("a")
        agent.prompt.section("rules", 1, "Be brief.")
        seen: list[JsonObject] = []

        async def lookup(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
            seen.append(args)
            return ToolOutcome((TextBlock("42"),))

        schema: JsonObject = {"type": "object", "properties": {"key": {"type": "string"}}}
        agent.tools.register(Tool("lookup", lookup, schema, "Look a key up."))
        agent.followup(create_user_message("please look it up"))
        await agent.when_idle()
        assert seen == [{"key": "k"}]
        (first, tools), (second, _) = endpoint.calls
        assert first == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "please look it up"},
        ]
        assert tools == [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look a key up.",
                    "parameters": schema,
                },
            }
        ]
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
        assert second[-1] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
        assert reasons(agent.session.events) == [TurnEndReason.COMPLETED]
        await harness.close()

    run(main)


def test_harness_17_a_resumed_chat_agent_continues_the_same_conversation(tmp_path: Path) -> None:
    db = str(tmp_path / "chat.db")

    async def main() -> None:
        endpoint = EchoEndpoint()
        first = await open_chat_harness(endpoint.endpoint_for, db=db)
        agent = await first.create_agent("a")
        agent.followup(create_user_message("hello"))
        await agent.when_idle()
        await first.close()
        second = await open_chat_harness(endpoint.endpoint_for, db=db)
        resumed = await second.resume_agent("a")
        resumed.followup(create_user_message("again"))
        await resumed.when_idle()
        assert endpoint.calls[-1][0] == [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "you said hello"},
            {"role": "user", "content": "again"},
        ]
        await second.close()

    run(main)


def test_harness_9_finish_reasons_and_a_raising_endpoint_end_the_turn() -> None:
    said = {"role": "assistant", "content": "cut"}
    assert step_of({"message": said, "finish_reason": "length"}).max_tokens
    assert step_of({"message": said, "finish_reason": "content_filter"}).refusal
    plain = step_of({"message": said, "finish_reason": "stop"})
    assert (plain.max_tokens, plain.refusal, plain.content) == (False, False, (TextBlock("cut"),))

    async def down(messages: list[ChatMessage], tools: list[ChatMessage]) -> ChatMessage:
        raise ConnectionError("endpoint down")

    async def main() -> None:
        harness = await open_chat_harness(lambda session, options: down)
        agent = await harness.create_agent("a")
        agent.followup(create_user_message("hi"))
        await agent.when_idle()
        assert reasons(agent.session.events) == [TurnEndReason.ERROR]
        await harness.close()

    run(main)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "robot", "content": "x"}],
        [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}],
        [{"role": "tool", "tool_call_id": "nobody", "content": "x"}],
        [{"role": "user", "content": 3}],
    ],
)
def test_harness_9_the_fake_endpoint_refuses_a_malformed_chat(messages: list[ChatMessage]) -> None:
    with pytest.raises(ValueError, match=r"messages\["):
        check_chat(messages)
