"""The scripted and null models used by tests, demos and benchmarks (HARNESS-9 support)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from dsh_subagent.adapters.protocols import ModelRequest, ModelStep, ToolCall
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    NullModel,
    ScriptedModel,
    ScriptExhausted,
    call_tool,
    fail,
    hit_max_tokens,
    refuse,
    reply,
    structured,
)
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.core.values import DataBlock, SessionId, TextBlock


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def request(signal: AbortSignal | None = None, turn: int = 1) -> ModelRequest:
    return ModelRequest(SessionId("a"), turn, 1, (), (), signal or AbortController().signal)


def test_harness_9_script_items_map_to_model_steps() -> None:
    assert reply("hi") == ModelStep(content=(TextBlock("hi"),), chunks=("hi",))
    assert reply("hi", chunks=["h", "i"]).chunks == ("h", "i")
    assert call_tool("t", {"a": 1}) == ModelStep(tool_calls=(ToolCall("call-t", "t", {"a": 1}),))
    assert call_tool("t", call_id="c9").tool_calls[0].id == "c9"
    assert structured({"k": [1]}).content == (DataBlock({"k": [1]}),)
    assert refuse().refusal
    assert refuse("no").content == (TextBlock("no"),)
    assert hit_max_tokens().max_tokens
    assert hit_max_tokens().content == ()
    assert hit_max_tokens("cut").content == (TextBlock("cut"),)


def test_harness_9_scripted_model_answers_in_order_fails_and_exhausts() -> None:
    async def main() -> None:
        model = ScriptedModel([reply("one")])
        model.extend([fail("bad")])
        assert model.remaining == 2
        assert (await model.step(request())).content == (TextBlock("one"),)
        with pytest.raises(RuntimeError, match="bad"):
            await model.step(request())
        with pytest.raises(ScriptExhausted):
            await model.step(request(turn=3))
        assert [r.turn for r in model.requests] == [1, 1, 3]

    run(main)


def test_harness_9_gate_holds_a_step_until_opened() -> None:
    async def main() -> None:
        gate = Gate()
        model = ScriptedModel([Gated(gate, Gated(gate, reply("through")))])
        stepping = asyncio.ensure_future(model.step(request()))
        await gate.reached()
        assert not stepping.done()
        assert not gate.is_open
        assert gate.arrivals == 1
        gate.open()
        assert (await stepping).content == (TextBlock("through"),)
        assert gate.arrivals == 2

    run(main)


def test_harness_31_gated_step_gives_up_with_the_abort_reason() -> None:
    async def main() -> None:
        gate, controller = Gate(), AbortController()
        model = ScriptedModel([Gated(gate, reply("never"))])
        stepping = asyncio.ensure_future(model.step(request(controller.signal)))
        await gate.reached()
        reason = TimeoutError("stop")
        controller.abort(reason)
        with pytest.raises(TimeoutError) as raised:
            await stepping
        assert raised.value is reason

    run(main)


def test_null_model_replies_immediately() -> None:
    async def main() -> None:
        step = await NullModel("pong").step(request())
        assert step.content == (TextBlock("pong"),)
        assert step.chunks == ("pong",)

    run(main)
