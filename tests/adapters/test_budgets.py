"""Tree budgets through the real seam and the reference harness (BUDGET-12..17)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.protocols import (
    ModelRequest,
    ModelStep,
    Tool,
    ToolOutcome,
    Usage,
    create_user_message,
)
from dsh_subagent.adapters.providers.base import StartRequest
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import (
    FunctionModel,
    Gate,
    NullModel,
    call_tool,
)
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.adapters.tools.control import render_entry
from dsh_subagent.adapters.tools.subagent_config import SubagentToolConfig
from dsh_subagent.core.budget import Amounts, Budget
from dsh_subagent.core.budget_log import BUDGET_CHARGED, BUDGET_SET, CHARGED, fold_budget
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import ChildRow
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TURN_END,
    AgentOptions,
    JsonObject,
    KnownStop,
    SessionEvent,
    SessionId,
    SubagentIntent,
)

ModelFor = Callable[[object, object], object]


def turn_ends(events: tuple[SessionEvent, ...]) -> list[object]:
    return [event.data for event in events if event.type == TURN_END]


def charges(events: tuple[SessionEvent, ...]) -> int:
    """The charged requests: each answer carries its charge, no record of its own."""
    assert not [e for e in events if e.type == BUDGET_CHARGED]
    return sum(e.type == ASSISTANT_MESSAGE and CHARGED in e.data for e in events)  # type: ignore[operator]


def dump(events: tuple[SessionEvent, ...]) -> str:
    return json.dumps([event.data for event in events])


async def noop(_arguments: JsonObject, _signal: AbortSignal) -> ToolOutcome:
    return ToolOutcome(())


def looping(usage: Usage | None = None) -> FunctionModel:
    """A child that calls ``noop`` at every step, never finishing on its own."""
    return FunctionModel(lambda request: call_tool("noop", usage=usage))


def by_parent(root: object, child: Callable[[], object]) -> ModelFor:
    def model_for(session: object, _options: object) -> object:
        if session.header.parent_session is None:  # type: ignore[attr-defined]
            return root
        return child()

    return model_for


def signal() -> AbortSignal:
    return AbortController().signal


def test_budget_13_exhaustion_ends_the_childs_turn_mid_turn_naming_the_limit() -> None:
    async def main() -> None:
        model_for = by_parent(NullModel(), lambda: looping(Usage(10, 5)))
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            harness.tools.register(Tool("noop", noop))
            parent = await harness.create_agent("parent", budget=Budget(model_requests=10))
            request = StartRequest("go", parent, signal(), budget=Budget(model_requests=3))
            run = await harness.service.start("spawn", request)
            async with run:
                child = run.local_agent
                assert child is not None
                result = await run.result
                events = child.session.events
            assert result.stop_reason is KnownStop.BUDGET_EXHAUSTED
            assert result.diagnostic == "budget exhausted: model_requests"
            assert turn_ends(events) == [
                {"turn": 1, "reason": "budget-exhausted", "limit": "model_requests"}
            ]
            assert fold_budget(events).consumed == Amounts(3, 30, 15)
            assert sum(e.type == "step/start" for e in events) == 3
            # Closing the child charged its 3 requests and returned the rest of its carve.
            assert harness.service.remaining_budget(parent.id) == Budget(model_requests=7)

    asyncio.run(main())


def test_budget_12_a_budget_is_validated_at_the_boundary_before_any_side_effect() -> None:
    async def main() -> None:
        async with ReferenceHarness.open(by_parent(NullModel(), NullModel)) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent")
            bad = StartRequest("go", parent, signal(), budget=Budget(output_tokens=-1))
            with pytest.raises(SubagentError) as caught:
                await harness.service.start("spawn", bad)
            assert caught.value.field == "request.budget.output_tokens"
            spec = ContinuableStartSpec(
                "spawn",
                "x",
                parent,
                "go",
                budget={"model_requests": 1},  # type: ignore[arg-type]
            )
            with pytest.raises(SubagentError) as caught:
                await harness.service.start_continuable(spec)
            assert caught.value.field == "spec.budget"
            with pytest.raises(SubagentError) as caught:
                SubagentToolConfig("spawn", budget=Budget(wall_ms=-5))
            assert caught.value.field == "budget.wall_ms"
            with pytest.raises(SubagentError) as caught:
                await harness.create_agent("other", budget=Budget(model_requests=True))
            assert caught.value.field == "budget.model_requests"
            assert harness.registry.list() == [parent]
            assert harness.service.remaining_budget(parent.id) is None

    asyncio.run(main())


def test_budget_12_the_tool_ceiling_caps_every_child_and_the_result_names_the_limit() -> None:
    def parent_step(request: ModelRequest) -> ModelStep | str:
        if request.step == 1:
            return call_tool("subagent", {"prompt": "work", "description": "worker"})
        return "done"

    async def main() -> None:
        children: list[FunctionModel] = []

        def child() -> FunctionModel:
            children.append(looping(Usage(1, 1)))
            return children[-1]

        model_for = by_parent(FunctionModel(parent_step), child)
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            harness.tools.register(Tool("noop", noop))
            ceiling = Budget(model_requests=2, output_tokens=100)
            harness.install_tools(
                subagent=SubagentToolConfig("spawn", enable_run_in_background=False, budget=ceiling)
            )
            parent = await harness.create_agent("parent")
            parent.followup(create_user_message("go"))
            await parent.when_idle()
            schema = harness.tools.get("subagent")
            assert schema is not None
            assert "budget" not in json.dumps(schema.schema)  # the model has no say in it
            assert len(children) == 1
            assert [r.max_tokens for r in children[0].requests] == [100, 99]
            log = dump(parent.session.events)
            assert "subagent run ran out of budget before finishing" in log
            assert "budget exhausted: model_requests" in log

    asyncio.run(main())


def test_budget_14_budget_16_followups_are_refused_until_the_host_raises_the_budget() -> None:
    async def main() -> None:
        model_for = by_parent(NullModel(), lambda: NullModel("ok", usage=Usage(3, 2)))
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent")
            spec = ContinuableStartSpec(
                "spawn", "helper", parent, "first", budget=Budget(model_requests=1)
            )
            started = await harness.service.start_continuable(spec)
            child = harness.registry.get(started.child_id)
            assert child is not None
            await child.when_idle()
            assert harness.service.remaining_budget(started.child_id) == Budget(model_requests=0)
            authority = ParentAgent(parent)
            with pytest.raises(SubagentError) as refused:
                await harness.service.followup(started.child_id, "more", authority)
            assert refused.value.code is ErrorCode.BUDGET_EXHAUSTED
            assert refused.value.field == "budget.model_requests"
            assert "more" not in dump(child.session.events)
            [row] = await harness.service.list_children(parent.id)
            assert isinstance(row, ChildRow)
            assert row.budget == Budget(model_requests=0)
            assert render_entry(row, "idle").endswith("helper (budget left: model_requests=0)")
            [below] = await harness.service.list_descendants(parent.id)
            assert below.row == row
            harness.service.raise_budget(started.child_id, Budget(model_requests=2))
            await harness.service.followup(started.child_id, "more", authority)
            child = harness.registry.get(started.child_id)  # this epoch's Activation
            assert child is not None
            await child.when_idle()
            assert [e["reason"] for e in turn_ends(child.session.events)] == [  # type: ignore[index]
                "completed",
                "completed",
            ]
            assert fold_budget(child.session.events).budget == Budget(model_requests=2)

    asyncio.run(main())


def test_budget_15_a_budget_and_its_consumption_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    model_for = by_parent(NullModel(), lambda: NullModel("ok", usage=Usage(7, 4)))

    async def first() -> SessionId:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent", budget=Budget(output_tokens=50_000))
            spec = ContinuableStartSpec(
                "spawn",
                "helper",
                parent,
                "first",
                budget=Budget(model_requests=2, input_tokens=100),
            )
            started = await harness.service.start_continuable(spec)
            child = harness.registry.get(started.child_id)
            assert child is not None
            await child.when_idle()
            return started.child_id

    async def second(child_id: SessionId) -> None:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.resume_agent("parent")
            assert harness.service.remaining_budget(parent.id) == Budget(output_tokens=50_000)
            authority = ParentAgent(parent)
            await harness.service.followup(child_id, "again", authority)
            child = harness.registry.get(child_id)
            assert child is not None
            await child.when_idle()
            # Reopened from its log: its own caps, both epochs' charges, and the output it
            # shares with the parent's account charged there too.
            assert harness.service.remaining_budget(child_id) == Budget(
                model_requests=0, input_tokens=100 - 14, output_tokens=50_000 - 8
            )
            with pytest.raises(SubagentError) as refused:
                await harness.service.followup(child_id, "once more", authority)
            assert refused.value.code is ErrorCode.BUDGET_EXHAUSTED
            sets = [e.data for e in child.session.events if e.type == BUDGET_SET]
            assert sets == [{"model_requests": 2, "input_tokens": 100}]
            assert charges(child.session.events) == 2

    child_id = asyncio.run(first())
    asyncio.run(second(child_id))


def test_budget_15_a_child_sharing_its_parents_budget_is_charged_there_across_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    model_for = by_parent(NullModel(), lambda: NullModel("ok", usage=Usage(7, 4)))

    async def first() -> SessionId:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent", budget=Budget(model_requests=5))
            spec = ContinuableStartSpec("spawn", "helper", parent, "first")  # asks for none
            started = await harness.service.start_continuable(spec)
            child = harness.registry.get(started.child_id)
            assert child is not None
            await child.when_idle()
            assert harness.service.remaining_budget(started.child_id) == Budget(model_requests=4)
            assert harness.service.remaining_budget(parent.id) == Budget(model_requests=4)
            with pytest.raises(SubagentError) as refused:  # its caps are its parent's
                harness.service.raise_budget(started.child_id, Budget(model_requests=9))
            assert refused.value.code is ErrorCode.INVALID_ARGUMENT
            assert refused.value.field == "budget.model_requests"
            harness.service.raise_budget(started.child_id, Budget())  # nothing to raise
            assert harness.service.remaining_budget(parent.id) == Budget(model_requests=4)
            assert not [e for e in child.session.events if e.type == BUDGET_SET]
            assert charges(child.session.events) == 1
            return started.child_id

    async def second(child_id: SessionId) -> None:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.resume_agent("parent")
            assert harness.service.remaining_budget(parent.id) == Budget(model_requests=5)
            await harness.service.followup(child_id, "again", ParentAgent(parent))
            child = harness.registry.get(child_id)
            assert child is not None
            await child.when_idle()
            # Resumed: both epochs' charges are the parent's (the child has no caps).
            assert harness.service.remaining_budget(parent.id) == Budget(model_requests=3)
            assert harness.service.remaining_budget(child_id) == Budget(model_requests=3)

    child_id = asyncio.run(first())
    asyncio.run(second(child_id))


def test_budget_12_concurrent_fan_out_through_the_seam_never_overshoots() -> None:
    fan_out, cap, step_output = 8, 13, 10
    gate = Gate()

    async def child_step(request: ModelRequest) -> ModelStep:
        await gate.pass_through(request)  # every sibling is in flight before any settles
        assert request.max_tokens is not None
        return call_tool("noop", usage=Usage(1, request.max_tokens))

    async def main() -> None:
        model_for = by_parent(NullModel(), lambda: FunctionModel(child_step))
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            harness.tools.register(Tool("noop", noop))
            output_cap = cap * step_output - 5
            tree = Budget(model_requests=cap, output_tokens=output_cap)
            parent = await harness.create_agent("parent", budget=tree)
            options = AgentOptions(max_tokens=step_output)
            runs = [
                await harness.service.start(
                    "spawn",
                    StartRequest(
                        SubagentIntent(f"job {i}", agent_options=options), parent, signal()
                    ),
                )
                for i in range(fan_out)
            ]
            for _ in range(1_000):  # yields, not a timed wait: every child reaches its step
                if gate.arrivals == fan_out:
                    break
                await asyncio.sleep(0)
            assert gate.arrivals == fan_out
            gate.open()
            results = [await run.result for run in runs]
            logs = [run.local_agent.session.events for run in runs]  # type: ignore[union-attr]
            for run in runs:
                await run.dispose()
            charged = [fold_budget(log).consumed for log in logs]
            spent = sum(c.output_tokens for c in charged)
            assert sum(c.model_requests for c in charged) == cap
            assert spent <= output_cap
            assert all(r.stop_reason is KnownStop.BUDGET_EXHAUSTED for r in results)
            assert harness.service.remaining_budget(parent.id) == Budget(
                model_requests=0, output_tokens=output_cap - spent
            )

    asyncio.run(main())


def test_budget_17_usage_is_optional_and_max_tokens_reaches_every_request() -> None:
    unmetered = FunctionModel(lambda request: "plain")
    metered = FunctionModel(lambda request: "no usage reported")

    async def main() -> None:
        async with ReferenceHarness.open(by_parent(unmetered, lambda: metered)) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent")
            options = AgentOptions(max_tokens=77)
            intent = SubagentIntent("go", agent_options=options)
            run = await harness.service.start(
                "spawn", StartRequest(intent, parent, signal(), budget=Budget(input_tokens=5))
            )
            async with run:
                assert (await run.result).stop_reason is KnownStop.COMPLETED
                child = run.local_agent
                assert child is not None
                # No usage reported: only the model request is counted.
                assert fold_budget(child.session.events).consumed == Amounts(1, 0, 0)
            parent.followup(create_user_message("hi"))
            await parent.when_idle()
            assert [r.max_tokens for r in metered.requests] == [77]  # uncapped output
            assert [r.max_tokens for r in unmetered.requests] == [None]

    asyncio.run(main())


def test_budget_15_a_request_with_no_recorded_answer_is_charged_in_a_record_of_its_own() -> None:
    controller = AbortController()

    async def failing(request: ModelRequest) -> ModelStep:
        raise RuntimeError("model down")

    async def aborting(request: ModelRequest) -> ModelStep:
        controller.abort("stop")  # answered, but the run was aborted meanwhile
        return ModelStep(content=(), usage=Usage(3, 2))

    async def charged_for(model: FunctionModel, stop: AbortSignal) -> tuple[SessionEvent, ...]:
        async with ReferenceHarness.open(by_parent(NullModel(), lambda: model)) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent", budget=Budget(output_tokens=100))
            request = StartRequest("go", parent, stop, budget=Budget(model_requests=4))
            run = await harness.service.start("spawn", request)
            async with run:
                assert (await run.result).stop_reason is not KnownStop.COMPLETED
                assert run.local_agent is not None
                return run.local_agent.session.events

    async def main() -> None:
        failed = await charged_for(FunctionModel(failing), signal())
        # A failed request is charged its whole grant: 1 request, 1 input, 100 output.
        assert [e.data for e in failed if e.type == BUDGET_CHARGED] == [
            {"model_requests": 1, "input_tokens": 1, "output_tokens": 100}
        ]
        assert fold_budget(failed).consumed == Amounts(1, 1, 100)
        aborted = await charged_for(FunctionModel(aborting), controller.signal)
        assert not [e for e in aborted if e.type == ASSISTANT_MESSAGE]
        # Aborted after the answer came: its reported usage, recorded though the answer is not.
        assert [e.data for e in aborted if e.type == BUDGET_CHARGED] == [
            {"model_requests": 1, "input_tokens": 3, "output_tokens": 2}
        ]

    asyncio.run(main())


def test_budget_16_a_cold_childs_listing_folds_its_remaining_budget_from_the_stored_log(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    model_for = by_parent(NullModel(), lambda: NullModel("ok", usage=Usage(7, 4)))
    caps = Budget(model_requests=3, input_tokens=100)

    async def first() -> SessionId:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.create_agent("parent")
            spec = ContinuableStartSpec("spawn", "helper", parent, "first", budget=caps)
            started = await harness.service.start_continuable(spec)
            child = harness.registry.get(started.child_id)
            assert child is not None
            await child.when_idle()
            return started.child_id

    async def second(child_id: SessionId) -> None:
        async with ReferenceHarness.open(model_for, db=db) as harness:  # type: ignore[arg-type]
            parent = await harness.resume_agent("parent")
            assert harness.service.remaining_budget(child_id) is None  # no node open here
            [row] = await harness.service.list_children(parent.id)
            assert isinstance(row, ChildRow)
            assert row.id == child_id
            assert row.budget == Budget(model_requests=2, input_tokens=93)
            assert render_entry(row, "idle").endswith(
                "helper (budget left: model_requests=2 input_tokens=93)"
            )
            [below] = await harness.service.list_descendants(parent.id)
            assert below.row == row
            assert harness.registry.get(child_id) is None  # listed, never loaded

    child_id = asyncio.run(first())
    asyncio.run(second(child_id))
