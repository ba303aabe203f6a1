"""End to end on pydantic-ai: a parent delegates through the ``subagent`` tool to a continuable
pydantic-ai child, the process "restarts" on SQLite, the parent follows the child up through
``send_message`` (a cold resume), and the settlement notices reach the parent (CONT-14, -17,
NOTICE-6, TOOL-17, BG-20).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent as PydanticAgent
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

from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.pydantic_ai import open_pydantic_ai_harness
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.service import LifecyclePayload
from dsh_subagent.adapters.tools import (
    BackgroundMode,
    CallingAgents,
    ControlTools,
    SubagentTool,
    SubagentToolConfig,
)
from dsh_subagent.core.lifecycle import RunEndInfo
from dsh_subagent.core.values import AgentOptions, MessageId, TextBlock, UserMessage


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def last_input(messages: list[ModelMessage]) -> str:
    """The text of the newest request part: a user prompt or a tool return."""
    last = messages[-1]
    assert isinstance(last, PydanticRequest)
    part = last.parts[-1]
    if isinstance(part, ToolReturnPart):
        return f"tool: {part.model_response_str()}"
    assert isinstance(part, UserPromptPart)
    return str(part.content)


class World:
    """The parent's and the child's pydantic-ai models, and what each was asked."""

    def __init__(self) -> None:
        self.parent_saw: list[str] = []
        self.child_saw: list[list[str]] = []
        self.child_id = ""
        self.ended: asyncio.Event = asyncio.Event()

    async def parent(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen = last_input(messages)
        self.parent_saw.append(seen)
        if seen == "delegate the research":
            args = {"description": "research", "prompt": "find the answer"}
            return ModelResponse(parts=[ToolCallPart("subagent", args, tool_call_id="d1")])
        if seen == "ask the child again":
            args = {"subagent_id": self.child_id, "message": "and the reason?"}
            return ModelResponse(parts=[ToolCallPart("send_message", args, tool_call_id="s1")])
        if seen.startswith("tool: started subagent "):
            self.child_id = seen.removeprefix("tool: started subagent ")
        return ModelResponse(parts=[TextPart("noted")])

    async def child(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = [
            str(part.content)
            for message in messages
            if isinstance(message, PydanticRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]
        self.child_saw.append(prompts)
        return ModelResponse(parts=[TextPart(f"answer {len(self.child_saw)}")])

    def agent_for(self, session: LiveSession, options: AgentOptions) -> PydanticAgent[None, str]:
        answer = self.parent if session.header.parent_session is None else self.child
        return PydanticAgent(FunctionModel(answer))

    def on_end(self, payload: LifecyclePayload) -> None:
        if isinstance(payload, RunEndInfo):
            self.ended.set()

    async def open(self, db: Path) -> ReferenceHarness:
        harness = await open_pydantic_ai_harness(self.agent_for, db=str(db))
        SubagentTool(
            harness.service,
            harness.tools,
            SubagentToolConfig("spawn", background_mode=BackgroundMode.CONTINUABLE),
            prompt=harness.prompt,
        ).apply()
        ControlTools(harness.service).register(harness.tools)
        CallingAgents().attach(harness.registry)
        harness.service.on("subagent/end", self.on_end)
        return harness

    async def settle(self, parent: Agent) -> None:
        """Wait for the child's settlement, then for the parent to take the notice."""
        await self.ended.wait()
        self.ended.clear()
        await parent.when_idle()


def ask(text: str, message_id: str) -> UserMessage:
    return UserMessage(MessageId(message_id), (TextBlock(text),))


def test_cont_17_pydantic_ai_parent_follows_up_its_child_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    world = World()

    async def main() -> None:
        first = await world.open(db)
        parent = await first.create_agent("parent")
        parent.followup(ask("delegate the research", "m1"))
        await world.settle(parent)
        assert world.child_id
        assert world.child_saw == [["find the answer"]]
        finished = f"Background subagent {world.child_id} finished"
        assert any(finished in seen for seen in world.parent_saw)
        await first.close()

        second = await world.open(db)  # a new process: only SQLite survives
        parent = await second.resume_agent("parent")
        assert second.registry.get(world.child_id) is None  # type: ignore[arg-type]
        parent.followup(ask("ask the child again", "m2"))
        await world.settle(parent)
        # The child was cold-resumed with its whole conversation, as a new pydantic-ai run.
        assert world.child_saw[-1] == ["find the answer", "and the reason?"]
        assert f"tool: message queued as the next turn for subagent {world.child_id}" in (
            world.parent_saw
        )
        notices = [seen for seen in world.parent_saw if finished in seen]
        assert len(notices) == 2
        assert notices[-1].endswith("answer 2")
        await second.close()

    run(main)
