"""Scoped prompt composition and ``apply_child_composition`` (POLICY-7, POLICY-12, DRIVER-7,
DRIVER-8)."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.child_composition import apply_child_composition
from dsh_subagent.adapters.protocols import Tool, ToolCall, ToolOutcome
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer, PromptPart
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.signals import AbortController, AbortSignal, Scope
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.policy import DELEGATION_STATEMENT
from dsh_subagent.core.values import JsonObject, SessionId, TextBlock, ToolFilter


async def ok(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
    return ToolOutcome((TextBlock("ok"),))


def family(*global_tools: str) -> tuple[ToolRegistry, ReferenceAgent, ReferenceAgent]:
    globals_ = ToolRegistry()
    for name in global_tools:
        globals_.register(Tool(name, ok))
    deployment = PromptComposer()
    deployment.section("deployment:persona", 0, "deployment persona")

    def agent(sid: str) -> ReferenceAgent:
        return ReferenceAgent(
            LiveSession.detached(SessionId(sid)),
            model=NullModel(),
            tools=ScopedTools(globals_),
            prompt=PromptComposer(deployment),
        )

    return globals_, agent("parent"), agent("child")


def test_policy_7_driver_7_composition_steps_in_order_and_scoped_to_the_child() -> None:
    class Roster:
        joined = False

        def compose_from(self, child: Scope, parent: Scope) -> None:
            self.joined = True

        def composed_preset(self, ctx: Scope) -> str | None:
            return None

    _, parent, child = family("read", "write")
    roster = Roster()
    apply_child_composition(
        child, parent, persona="", tool_filter=ToolFilter(allow=("read",)), roster=roster
    )
    assert roster.joined
    assert child.prompt.runtime_context() == (
        PromptPart("subagent:delegation", 120, DELEGATION_STATEMENT),
    )
    assert child.prompt.system_prompt() == (PromptPart("deployment:persona", 0, ""),)
    assert parent.prompt.system_prompt() == (
        PromptPart("deployment:persona", 0, "deployment persona"),
    )
    assert parent.prompt.runtime_context() == ()
    assert child.tools.names() == ("read",)
    assert parent.tools.names() == ("read", "write")
    asyncio.run(child.ctx.dispose())
    assert child.prompt.runtime_context() == ()
    assert child.tools.names() == ("read", "write")


def test_policy_7_omitted_persona_keeps_the_deployment_persona() -> None:
    _, parent, child = family()
    apply_child_composition(child, parent, persona=None, tool_filter=None)
    assert child.prompt.system_prompt() == (
        PromptPart("deployment:persona", 0, "deployment persona"),
    )


def test_policy_12_driver_8_restrictions_intersect_and_stay_live() -> None:
    globals_, _, child = family("read", "write", "shell")
    child.tools.register(Tool("report", ok))
    lift = child.tools.install_restriction(allow=("read", "write"))
    child.tools.install_restriction(deny=("write",))
    assert child.tools.names() == ("read", "report")
    globals_.register(Tool("late", ok))
    assert "late" not in child.tools.names()  # an allow list excludes later globals
    lift()
    lift()
    assert child.tools.names() == ("read", "shell", "late", "report")  # deny-only admits them

    async def refused() -> bool:
        outcome = await child.tools.execute(ToolCall("c", "write"), AbortController().signal)
        return outcome.is_error

    assert asyncio.run(refused())
    assert child.tools.global_layer() is globals_
    with pytest.raises(SubagentError):
        child.tools.install_restriction()
    with pytest.raises(SubagentError):
        child.tools.register("nope")  # type: ignore[arg-type]
    with pytest.raises(SubagentError):
        child.tools.register(Tool("report", ok))


def test_driver_8_guards_refuse_before_execution() -> None:
    _, _, child = family("read")
    stop = child.tools.add_guard(lambda call: f"no {call.name}")

    async def outcome() -> ToolOutcome:
        return await child.tools.execute(ToolCall("c", "read"), AbortController().signal)

    assert asyncio.run(outcome()).content == (TextBlock("no read"),)
    stop()
    stop()
    assert asyncio.run(outcome()).is_error is False


def test_policy_7_prompt_parts_validate_and_unregister_once() -> None:
    composer = PromptComposer()
    remove = composer.section("b", 2, "two")
    composer.section("a", 2, "also two")
    assert [p.name for p in composer.system_prompt()] == ["a", "b"]
    with pytest.raises(SubagentError):
        composer.section("a", 1, "again")
    with pytest.raises(SubagentError):
        composer.context("", 1, "x")
    remove()
    remove()
    assert [p.name for p in composer.system_prompt()] == ["a"]
