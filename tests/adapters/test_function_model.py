"""``FunctionModel``: the offline model backed by a plain or async function (issue 20)."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent import (
    AbortController,
    ErrorCode,
    FunctionModel,
    JsonObject,
    KnownStop,
    ModelRequest,
    ModelStep,
    ReferenceHarness,
    StartRequest,
    SubagentError,
    SubagentResult,
    call_tool,
)


def one_shot(model: FunctionModel, prompt: str = "hello") -> SubagentResult:
    """Run one spawned child on ``model`` (the parent's model is never asked)."""

    async def main() -> SubagentResult:
        async with ReferenceHarness.open(lambda _s, _o: model) as harness:
            parent = await harness.agent("parent")
            request = StartRequest(prompt, parent, AbortController().signal)
            async with await harness.service.start("spawn", request) as run:
                return await run.result

    return asyncio.run(main())


def test_harness_9_function_model_answers_with_the_functions_text() -> None:
    model = FunctionModel(lambda request: f"turn {request.turn}, step {request.step}")
    result = one_shot(model)
    assert result.stop_reason == KnownStop.COMPLETED
    assert result.text == f"turn {model.requests[0].turn}, step {model.requests[0].step}"
    assert len(model.requests) == 1


def test_harness_9_function_model_awaits_an_async_function_that_calls_a_tool() -> None:
    async def answer(request: ModelRequest) -> ModelStep | str:
        await asyncio.sleep(0)
        if request.step == model.requests[0].step:
            return call_tool("no_such_tool", {"x": 1})
        return "after the tool"

    model = FunctionModel(answer)
    result = one_shot(model)
    assert result.text == "after the tool"
    assert len(model.requests) == 2  # the tool's result went back to the function
    assert "tool/result" in {event.type for event in model.requests[1].events}


def test_harness_9_function_model_failure_ends_the_turn_with_error() -> None:
    def boom(_request: ModelRequest) -> str:
        raise RuntimeError("the model is down")

    result = one_shot(FunctionModel(boom))
    assert result.stop_reason == KnownStop.ERROR


def test_harness_9_function_model_answer_of_another_type_fails_the_step() -> None:
    model = FunctionModel(lambda _request: 42)  # type: ignore[arg-type,return-value]
    request = ModelRequest("a", 1, 1, (), (), AbortController().signal)  # type: ignore[arg-type]
    with pytest.raises(SubagentError) as raised:
        asyncio.run(model.step(request))
    assert (raised.value.code, raised.value.field) == (ErrorCode.INVALID_ARGUMENT, "fn")
    assert one_shot(model).stop_reason == KnownStop.ERROR


def test_harness_9_function_model_refuses_what_is_not_callable() -> None:
    with pytest.raises(SubagentError) as raised:
        FunctionModel("not a function")  # type: ignore[arg-type]
    assert (raised.value.code, raised.value.field) == (ErrorCode.INVALID_ARGUMENT, "fn")


def test_struct_a_one_shot_answer_comes_back_as_a_pydantic_model() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Answer(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        value: int

    def answer(request: ModelRequest) -> ModelStep | str:
        if "structured_output" in request.tools and len(model.requests) == 1:
            return call_tool("structured_output", {"value": 42})
        return "reported"

    model = FunctionModel(answer)

    async def main() -> SubagentResult:
        async with ReferenceHarness.open(lambda _s, _o: model) as harness:
            parent = await harness.agent("parent")
            schema: JsonObject = {"type": "object", "properties": {"value": {"type": "integer"}}}
            request = StartRequest(
                "six times seven", parent, AbortController().signal, output_schema=schema
            )
            async with await harness.service.start("spawn", request) as run:
                return await run.result

    result = asyncio.run(main())
    assert result.stop_reason == KnownStop.COMPLETED
    assert result.output_as(Answer) == Answer(value=42)
