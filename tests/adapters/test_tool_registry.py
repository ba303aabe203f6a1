"""The tool registry: registration, scoped restriction and execution (HARNESS-28)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from dsh_subagent.adapters.protocols import Tool, ToolCall, ToolOutcome
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import JsonObject, TextBlock, text_of


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


async def ok(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
    return ToolOutcome((TextBlock(f"ran {dict(args)}"),))


async def broken(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
    raise ValueError("handler bug")


def registry(*names: str) -> ToolRegistry:
    tools = ToolRegistry()
    for name in names:
        tools.register(Tool(name, ok))
    return tools


def test_harness_28_register_validates_and_unregisters_once() -> None:
    tools = registry("read")
    with pytest.raises(SubagentError) as dup:
        tools.register(Tool("read", ok))
    assert dup.value.field == "tool.name"
    with pytest.raises(SubagentError) as empty:
        tools.register(Tool("", ok))
    assert empty.value.field == "tool.name"
    with pytest.raises(SubagentError) as schema:
        tools.register(Tool("x", ok, schema={"bad": float("nan")}))
    assert schema.value.field == "tool.schema.bad"
    with pytest.raises(SubagentError) as not_tool:
        tools.register("read")  # type: ignore[arg-type]
    assert not_tool.value.field == "tool"
    unregister = tools.register(Tool("write", ok))
    assert tools.names() == ("read", "write")
    unregister()
    unregister()
    assert tools.names() == ("read",)


@pytest.mark.parametrize(
    ("allow", "deny", "field"),
    [(["read", "nope"], None, "allow[1]"), (None, ["nope"], "deny[0]"), ("read", None, "allow")],
)
def test_harness_28_restrict_rejects_unknown_names_loudly(
    allow: list[str] | None, deny: list[str] | None, field: str
) -> None:
    with pytest.raises(SubagentError) as bad:
        registry("read", "write").restrict(allow=allow, deny=deny)
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT
    assert bad.value.field == field


def test_harness_28_restriction_hides_and_refuses() -> None:
    async def main() -> None:
        tools = registry("read", "write", "shell")
        view = tools.restrict(allow=["read", "write"]).restrict(deny=["write"])
        assert view.names() == ("read",)
        assert view.get("write") is None
        signal = AbortController().signal
        refused = await view.execute(ToolCall("c1", "write"), signal)
        assert refused.is_error
        assert "not available" in text_of(refused.content)
        allowed = await view.execute(ToolCall("c2", "read", {"p": 1}), signal)
        assert not allowed.is_error
        assert allowed.content == (TextBlock("ran {'p': 1}"),)
        assert (await tools.execute(ToolCall("c3", "write"), signal)).is_error is False

    run(main)


def test_harness_28_deny_only_views_show_later_tools_allow_lists_do_not() -> None:
    tools = registry("read")
    deny_view = tools.restrict(deny=["read"])
    allow_view = tools.restrict(allow=["read"])
    deny_view.register(Tool("late", ok))  # registers on the root
    assert deny_view.names() == ("late",)
    assert allow_view.names() == ("read",)
    assert tools.names() == ("read", "late")


def test_harness_31_handler_failure_is_data_but_abort_propagates() -> None:
    async def main() -> None:
        tools = ToolRegistry()
        tools.register(Tool("broken", broken))
        controller = AbortController()
        reason = KeyError("stop")

        async def aborts_then_fails(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
            controller.abort(reason)
            raise RuntimeError("gave up")

        tools.register(Tool("aborting", aborts_then_fails))
        failed = await tools.execute(ToolCall("c", "broken"), controller.signal)
        assert failed.is_error
        assert "handler bug" in text_of(failed.content)
        with pytest.raises(KeyError) as raised:
            await tools.execute(ToolCall("c", "aborting"), controller.signal)
        assert raised.value is reason

    run(main)


def test_tool_24_an_outcome_after_the_abort_stands_and_later_calls_are_refused() -> None:
    async def main() -> None:
        tools = registry("ok")
        controller = AbortController()
        ran: list[str] = []

        async def cancelled(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
            controller.abort("stop")
            return ToolOutcome((TextBlock("Error: subagent run was cancelled"),), is_error=True)

        async def counted(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
            ran.append("counted")
            return await ok(args, signal)

        tools.register(Tool("cancelled", cancelled))
        tools.register(Tool("counted", counted))
        first = await tools.execute(ToolCall("c1", "cancelled"), controller.signal)
        assert (text_of(first.content), first.is_error) == (
            "Error: subagent run was cancelled",
            True,
        )
        sibling = await tools.execute(ToolCall("c2", "counted"), controller.signal)
        assert (text_of(sibling.content), sibling.is_error) == (
            "Error: tool call aborted before dispatch",
            True,
        )
        assert ran == []

    run(main)
