"""The ``subagent`` tool: binding, mounting, wording, routing, foreground runs (TOOL-*)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.protocols import CancelCause, create_user_message
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    call_tool,
    hit_max_tokens,
    reply,
)
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.adapters.tools import (
    BackgroundMode,
    BackgroundValue,
    ContinuableValue,
    ForegroundValue,
    SubagentTool,
    SubagentToolConfig,
    render_value,
    value_json,
)
from dsh_subagent.adapters.tools.calling import acting_as, calling_agent
from dsh_subagent.adapters.tools.schemas import guarded, parameters
from dsh_subagent.adapters.tools.subagent_config import failure_message, guidance_text
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    AgentOptions,
    CancelKind,
    JsonObject,
    JsonValue,
    KnownStop,
    OtherStop,
    SessionId,
    SubagentCapabilities,
    SubagentResult,
    TextBlock,
    ToolFilter,
)
from tests.adapters.service_world import FakeProvider, FakeRun
from tests.adapters.tools_world import (
    ToolsWorld,
    call,
    check_snapshot,
    handle,
    run,
    text,
    transcript,
    until,
)

CONTINUABLE = BackgroundMode.CONTINUABLE
ARGS: JsonObject = {"description": "scoped job", "prompt": "child task"}
NO_CAPS = SubagentCapabilities()
ALL_CAPS = SubagentCapabilities(True, True, True, True)


def result(
    reason: KnownStop | OtherStop, text: str = "", diagnostic: str | None = None
) -> SubagentResult:
    output = ({"type": "text", "text": text},) if text else ()
    return SubagentResult(output, reason, diagnostic=diagnostic)


async def fake_world(
    capabilities: SubagentCapabilities = ALL_CAPS, **config: object
) -> tuple[ToolsWorld, FakeProvider, SubagentTool]:
    world = ToolsWorld()
    fake = FakeProvider("fake", capabilities)
    world.service.register_provider(fake)
    return world, fake, world.tool("fake", **config)


async def foreground(world: ToolsWorld, fake: FakeProvider, settle: SubagentResult) -> str:
    parent = world.registry.get(SessionId("parent")) or await world.parent()
    before = len(fake.runs)
    pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
    await until(lambda: len(fake.runs) > before)
    fake.runs[-1].result.set_result(settle)
    return text(await pending)


# ----------------------------------------------------------------------------- binding


def test_tool_1_one_instance_binds_one_provider_to_one_name() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        world.tool("fork", tool_name="subagent_fork")
        schema = world.globals.get("subagent")
        assert schema is not None
        properties = schema.schema["properties"]
        assert isinstance(properties, dict)
        assert set(properties) == {
            "description",
            "prompt",
            "run_in_background",
        }
        parent = await world.parent()
        world.model.script("child task", reply("from spawn"))
        assert text(await call(parent, "subagent", ARGS)) == "from spawn"

    run(main)


def test_tool_2_an_instance_needs_a_validated_config() -> None:
    world = ToolsWorld()
    with pytest.raises(SubagentError) as caught:
        SubagentTool(world.service, world.globals, {"provider": "spawn"})  # type: ignore[arg-type]
    assert caught.value.field == "config"


def test_tool_3_registration_follows_the_provider(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        world = ToolsWorld()
        with caplog.at_level(logging.INFO):
            tool = world.tool("late")
        assert (
            'subagent provider "late" not registered yet; the "subagent" tool will register '
            "when it appears"
        ) in caplog.text
        assert world.globals.get("subagent") is None
        world.service.register_provider(FakeProvider("other"))
        assert world.globals.get("subagent") is None  # other names are ignored
        remove = world.service.register_provider(FakeProvider("late"))
        assert tool.mounted
        assert "does not see this conversation" in tool.description
        remove()
        assert world.globals.get("subagent") is None
        inheriting = FakeProvider("late")
        inheriting.inherits_parent_context = True
        world.service.register_provider(inheriting)
        mounted = world.globals.get("subagent")
        assert mounted is not None
        assert "inherits this conversation" in mounted.description
        tool.dispose()
        assert world.globals.get("subagent") is None

    run(main)


def test_tool_3_a_disposed_waiting_instance_never_mounts() -> None:
    world = ToolsWorld()
    tool = world.tool("late")
    tool.dispose()
    world.service.register_provider(FakeProvider("late"))
    assert world.globals.get("subagent") is None
    assert not tool.mounted


def test_tool_4_a_numeric_cap_needs_the_depth_capability() -> None:
    world = ToolsWorld()
    world.service.register_provider(FakeProvider("remote", NO_CAPS))
    with pytest.raises(SubagentError) as caught:
        world.tool("remote")
    assert caught.value.message == (
        'tool-subagent: provider "remote" cannot enforce maxDepth (no depthLimit capability) '
        "— set maxDepth: 'provider-managed' to leave the recursion budget to the provider"
    )
    assert world.globals.get("subagent") is None
    world.tool("remote", max_depth="provider-managed")
    assert world.globals.get("subagent") is not None


def test_tool_4_a_failing_mount_rolls_the_provider_registration_back() -> None:
    world = ToolsWorld()
    world.tool("remote")
    with pytest.raises(SubagentError):
        world.service.register_provider(FakeProvider("remote", NO_CAPS))
    assert "remote" not in world.service.list()
    assert world.globals.get("subagent") is None


def test_tool_4_continuable_mode_needs_continuable_support() -> None:
    world = ToolsWorld()
    world.service.register_provider(FakeProvider("fake"))
    with pytest.raises(SubagentError) as caught:
        world.tool("fake", background_mode=CONTINUABLE)
    assert caught.value.message == (
        'tool-subagent: provider "fake" does not support `backgroundMode: continuable`'
    )


def test_tool_5_duplicate_names_fail_at_apply_even_while_waiting() -> None:
    world = ToolsWorld()
    world.tool("late-a")
    with pytest.raises(SubagentError) as caught:
        world.tool("late-b")
    assert caught.value.message == 'tool-subagent: the tool name "subagent" is already taken'
    assert caught.value.field == "tool_name"
    with pytest.raises(SubagentError):
        world.tool("spawn", tool_name="task_list")  # a taken global name


# ----------------------------------------------------------------------------- config


def test_tool_6_config_defaults() -> None:
    config = SubagentToolConfig("spawn")
    assert (config.tool_name, config.enable_run_in_background, config.max_depth) == (
        "subagent",
        True,
        3,
    )
    assert config.background_mode is BackgroundMode.ONE_SHOT
    assert (config.agent_options, config.persona, config.tool_filter) == (None, None, None)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"provider": ""}, "provider"),
        ({"tool_name": ""}, "tool_name"),
        ({"enable_run_in_background": "yes"}, "enable_run_in_background"),
        ({"background_mode": "continuable"}, "background_mode"),
        ({"agent_options": {}}, "agent_options"),
        ({"agent_options": AgentOptions(max_tokens=0)}, "agent_options.max_tokens"),
        ({"persona": 3}, "persona"),
        ({"tool_filter": ["read"]}, "tool_filter"),
    ],
)
def test_tool_6_config_fields_are_validated(fields: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"provider": "spawn", **fields}
    with pytest.raises(SubagentError) as caught:
        SubagentToolConfig(**values)  # type: ignore[arg-type]
    assert caught.value.field == field


@given(
    st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=2**53),
        st.floats(),
        st.booleans(),
        st.text(),
    )
)
def test_tool_7_a_bad_max_depth_fails_with_the_catalog_text(value: object) -> None:
    if value == "provider-managed":
        return
    with pytest.raises(SubagentError) as caught:
        SubagentToolConfig("spawn", max_depth=value)
    assert caught.value.message == "subagent maxDepth must be a non-negative safe integer"


def test_tool_7_an_empty_tool_filter_fails() -> None:
    with pytest.raises(SubagentError) as caught:
        SubagentToolConfig("spawn", tool_filter=ToolFilter())
    assert caught.value.message == (
        "tool-subagent: `toolFilter` is configured but names neither `allow` nor `deny` — "
        "remove the key or fill the filter"
    )


def test_tool_8_persona_capability_is_checked_per_call_not_at_mount() -> None:
    async def main() -> None:
        world, fake, tool = await fake_world(
            SubagentCapabilities(depth_limit=True), persona="terse"
        )
        assert tool.mounted
        parent = await world.parent()
        outcome = await call(parent, "subagent", ARGS)
        assert outcome.is_error
        assert text(outcome) == (
            'Error: subagent provider "fake" does not support the "persona" capability'
        )
        assert fake.requests == []

    run(main)


# ----------------------------------------------------------------------------- wording


@pytest.mark.parametrize(
    ("snapshot", "provider", "fields"),
    [
        ("subagent_fresh_one_shot", "spawn", {}),
        ("subagent_fresh_continuable", "spawn", {"background_mode": CONTINUABLE}),
        ("subagent_fresh_foreground_only", "spawn", {"enable_run_in_background": False}),
        ("subagent_inheriting_one_shot", "fork", {}),
    ],
)
def test_tool_9_schema_and_description_snapshots(
    snapshot: str, provider: str, fields: dict[str, object]
) -> None:
    world = ToolsWorld()
    world.tool(provider, **fields)
    tool = world.globals.get("subagent")
    assert tool is not None
    assert tool.schema["required"] == ["description", "prompt"]
    check_snapshot(snapshot, tool)


def test_tool_9_no_run_in_background_when_disabled() -> None:
    world = ToolsWorld()
    tool = world.tool("spawn", enable_run_in_background=False)
    properties = tool.schema["properties"]
    assert isinstance(properties, dict)
    assert list(properties) == ["description", "prompt"]


def test_tool_10_description_is_base_then_suffix_joined_by_a_space() -> None:
    world = ToolsWorld()
    tool = world.tool("spawn", enable_run_in_background=False)
    assert tool.description.endswith(
        "it does not see this conversation. The call waits for the subagent and returns its result."
    )


def test_tool_11_wording_follows_context_inheritance() -> None:
    world = ToolsWorld()
    fresh = world.tool("spawn")
    forked = world.tool("fork", tool_name="subagent_fork")
    assert "does not see this conversation" in fresh.description
    assert "include everything it needs" in str(fresh.schema)
    assert "inherits this conversation" in forked.description
    assert "does not see this conversation" not in forked.description
    assert "completed turns" in str(forked.schema)


def test_tool_12_suffix_follows_the_background_mode() -> None:
    world = ToolsWorld()
    one_shot = world.tool("spawn")
    continuable = world.tool("spawn", tool_name="c", background_mode=CONTINUABLE)
    disabled = world.tool("spawn", tool_name="d", enable_run_in_background=False)
    assert "task_output" in one_shot.description
    assert "Defaults to false" in str(one_shot.schema)
    assert "runs in the background by default" in continuable.description
    assert "send_message" in continuable.description
    for absent in ("task_output", "task_kill", "never poll or wait on it"):
        assert absent not in continuable.description
    assert "Defaults to true" in str(continuable.schema)
    assert "task_output" not in disabled.description


def test_tool_13_canonical_values() -> None:
    output: tuple[JsonValue, ...] = ({"type": "text", "text": "a"}, {"type": "data", "value": 1})
    assert value_json(ForegroundValue("run-1", output)) == {
        "kind": "foreground",
        "run_id": "run-1",
        "output": list(output),
    }
    assert value_json(BackgroundValue("subagent-1")) == {
        "kind": "background",
        "task_id": "subagent-1",
    }
    assert value_json(ContinuableValue("c-1")) == {"kind": "continuable", "subagent_id": "c-1"}
    assert (
        render_value(BackgroundValue("subagent-1")) == "started background subagent task subagent-1"
    )
    assert render_value(ContinuableValue("c-1")) == "started subagent c-1"


def test_tool_14_continuable_instances_register_a_guidance_section() -> None:
    world = ToolsWorld()
    tool = world.tool("spawn", background_mode=CONTINUABLE)
    sections = {part.name: part for part in world.prompt.system_prompt()}
    assert sections["tool:subagent"].text == guidance_text("subagent")
    assert sections["tool:subagent"].text.startswith("Use subagent in the background by default.")
    tool.dispose()
    assert "tool:subagent" not in {part.name for part in world.prompt.system_prompt()}


def test_tool_15_the_section_leaves_with_the_tool() -> None:
    world = ToolsWorld()
    world.tool("spawn", background_mode=CONTINUABLE)
    world.unregister["spawn"]()
    assert world.globals.get("subagent") is None
    assert "tool:subagent" not in {part.name for part in world.prompt.system_prompt()}
    one_shot = ToolsWorld()
    one_shot.tool("spawn")
    assert "tool:subagent" not in {part.name for part in one_shot.prompt.system_prompt()}


# ----------------------------------------------------------------------------- routing


def test_tool_16_a_call_needs_a_calling_agent() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        tool = world.globals.get("subagent")
        assert tool is not None
        outcome = await asyncio.ensure_future(tool.handler(ARGS, AbortController().signal))
        assert text(outcome) == (
            "Error: subagent tool requires a calling agent (exec.agent was undefined)"
        )

    run(main)


def test_tool_17_forced_background_is_rejected_when_disabled() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world(enable_run_in_background=False)
        parent = await world.parent()
        outcome = await call(parent, "subagent", {**ARGS, "run_in_background": True})
        assert text(outcome) == (
            "Error: run_in_background is disabled for this tool instance "
            "(enableRunInBackground: false)"
        )
        assert fake.requests == []

    run(main)


def test_tool_17_defaults_follow_the_background_mode() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", background_mode=CONTINUABLE)
        world.tool("spawn", tool_name="one_shot")
        parent = await world.parent()
        started = text(await call(parent, "subagent", ARGS))
        assert started.startswith("started subagent ")
        assert text(await call(parent, "one_shot", ARGS)) == "ok"
        waited = await call(parent, "subagent", {**ARGS, "run_in_background": False})
        assert text(waited) == "ok"  # an ordinary one-shot child
        assert world.jobs.list(parent) == []
        await world.settle()

    run(main)


def test_tool_18_the_request_carries_only_configured_policy() -> None:
    async def main() -> None:
        options = AgentOptions(model="small")
        world, fake, _ = await fake_world(
            agent_options=options, persona="terse", tool_filter=ToolFilter(deny=("task_list",))
        )
        parent = await world.parent()
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
        await until(lambda: fake.runs)
        request = fake.requests[0].request
        assert request.label == "scoped job"
        intent = request.intent
        assert [block.text for block in intent.prompt] == ["child task"]  # type: ignore[union-attr]
        assert (intent.max_depth, intent.persona, intent.agent_options) == (3, "terse", options)
        assert intent.tool_filter == ToolFilter(deny=("task_list",))
        assert request.output_schema is None
        assert request.parent.session_id == "parent"
        fake.runs[0].result.set_result(result(KnownStop.COMPLETED))
        await pending
        managed, managed_fake, _ = await fake_world(NO_CAPS, max_depth="provider-managed")
        parent = await managed.parent()
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
        await until(lambda: managed_fake.runs)
        assert managed_fake.requests[0].request.intent.max_depth is None
        managed_fake.runs[0].result.set_result(result(KnownStop.COMPLETED))
        await pending

    run(main)


# ----------------------------------------------------------------------------- foreground


def test_tool_19_the_call_signal_drives_the_run_and_startup_errors_surface() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        parent = await world.parent()
        signal = AbortController().signal
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS, signal=signal))
        await until(lambda: fake.runs)
        assert fake.requests[0].signal is signal
        fake.runs[0].result.set_result(result(KnownStop.COMPLETED, "done"))
        assert text(await pending) == "done"
        fake.failure = SubagentError(ErrorCode.UNSUPPORTED_CAPABILITY, "setup failed")
        outcome = await call(parent, "subagent", ARGS)
        assert outcome.is_error
        assert text(outcome) == "Error: setup failed"

    run(main)


class FailingRun(FakeRun):
    def __init__(self, error: Exception) -> None:
        super().__init__("run-x")
        self.error = error

    async def _dispose(self) -> None:
        self.disposals += 1
        raise self.error


class FailingDisposeProvider(FakeProvider):
    async def start(self, request: object) -> FakeRun:
        fake = FailingRun(RuntimeError("release failed"))
        self.runs.append(fake)
        return fake


def test_tool_20_dispose_is_always_awaited_and_its_failure_surfaces() -> None:
    async def main() -> None:
        world = ToolsWorld()
        fake = FailingDisposeProvider("fake")
        world.service.register_provider(fake)
        world.tool("fake")
        parent = await world.parent()
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
        await until(lambda: fake.runs)
        fake.runs[0].result.set_result(result(KnownStop.COMPLETED, "done"))
        assert text(await pending) == "Error: release failed"
        assert fake.runs[0].disposals == 1
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
        await until(lambda: len(fake.runs) == 2)
        fake.runs[1].result.set_exception(RuntimeError("result lost"))
        assert text(await pending) == (
            "Error: subagent run failed: result lost; dispose failed: release failed"
        )

    run(main)


def test_tool_20_a_rejected_result_is_an_error_after_dispose() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        parent = await world.parent()
        pending = asyncio.ensure_future(call(parent, "subagent", ARGS))
        await until(lambda: fake.runs)
        fake.runs[0].result.set_exception(RuntimeError("result lost"))
        assert text(await pending) == "Error: result lost"
        assert fake.runs[0].disposals == 1

    run(main)


@pytest.mark.parametrize(
    ("reason", "headline"),
    [
        (KnownStop.ABORTED, "subagent run was cancelled"),
        (KnownStop.ERROR, "subagent run failed"),
        (KnownStop.MAX_TOKENS, "subagent run hit its token limit before finishing"),
        (KnownStop.REFUSAL, "subagent declined the task"),
        (OtherStop("policy-stop"), "subagent run ended abnormally (policy-stop)"),
    ],
)
def test_tool_22_stop_reason_headlines(reason: KnownStop | OtherStop, headline: str) -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        assert await foreground(world, fake, result(reason)) == f"Error: {headline}"

    run(main)


def test_tool_21_a_failure_carries_its_diagnostic_but_no_partial_output() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        settle = result(
            KnownStop.ERROR, "partial assistant text", "Claude Code denied a tool request"
        )
        assert await foreground(world, fake, settle) == (
            "Error: subagent run failed\nDiagnostic: Claude Code denied a tool request"
        )
        assert failure_message(result(KnownStop.ERROR)) == "subagent run failed"

    run(main)


def test_tool_23_success_renders_only_the_text_blocks() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        output: tuple[JsonValue, ...] = (
            {"type": "text", "text": "a"},
            {"type": "data", "value": {"x": 1}},
            {"type": "text", "text": "b"},
        )
        assert await foreground(world, fake, SubagentResult(output, KnownStop.COMPLETED)) == "ab"
        assert await foreground(world, fake, SubagentResult((), KnownStop.COMPLETED)) == ""

    run(main)


def test_tool_24_cancelling_the_call_cancels_the_child() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        gate = Gate()
        world.model.script("child task", Gated(gate, reply("never")))
        controller = AbortController()
        pending = asyncio.ensure_future(handle(parent, "subagent", ARGS, controller.signal))
        await gate.reached()
        controller.abort("stop")
        outcome = await pending
        assert outcome.is_error
        assert text(outcome) == "Error: subagent run was cancelled"

    run(main)


def test_tool_24_aborted_foreground_call_is_errored_result() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        gate = Gate()
        first = call_tool("subagent", {"description": "a", "prompt": "first"})
        second = call_tool("subagent", {"description": "b", "prompt": "second"}, call_id="c2")
        world.model.script(
            "parent", type(first)(tool_calls=(*first.tool_calls, *second.tool_calls))
        )
        world.model.script("first", Gated(gate, reply("never")))
        parent.followup(create_user_message((TextBlock("go"),)))
        await gate.reached()
        parent.cancel(CancelCause(CancelKind.USER))
        await world.settle()
        assert transcript(parent)[-2:] == [
            ("error tool subagent", "Error: subagent run was cancelled"),
            ("error tool subagent", "Error: tool call aborted before dispatch"),
        ]
        ends = [e.data for e in parent.session.events if e.type == "turn/end"]
        assert isinstance(ends[-1], dict)
        assert ends[-1]["reason"] == "aborted"
        assert [r.agent for r in world.model.requests].count(parent.id) == 1

    run(main)


def test_tool_24_an_aborted_call_leaves_its_sibling_call_undisturbed() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        gates = Gate(), Gate()
        world.model.script("one", Gated(gates[0], reply("never")))
        world.model.script("two", Gated(gates[1], reply("two done")))
        aborted, kept = AbortController(), AbortController()
        one = asyncio.ensure_future(
            call(parent, "subagent", {"description": "a", "prompt": "one"}, signal=aborted.signal)
        )
        two = asyncio.ensure_future(
            call(parent, "subagent", {"description": "b", "prompt": "two"}, signal=kept.signal)
        )
        await gates[0].reached()
        await gates[1].reached()
        aborted.abort("stop")
        cancelled = await one
        assert (cancelled.is_error, text(cancelled)) == (True, "Error: subagent run was cancelled")
        gates[1].open()
        finished = await two
        assert (finished.is_error, text(finished)) == (False, "two done")

    run(main)


def test_tool_24_an_aborted_call_never_reaches_the_provider() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world()
        parent = await world.parent()
        controller = AbortController()
        controller.abort("early")
        outcome = await handle(parent, "subagent", ARGS, controller.signal)
        assert text(outcome) == "Error: tool call aborted before dispatch"
        assert fake.requests == []

    run(main)


# ----------------------------------------------------------------------------- depth


def test_tool_25_each_start_checks_the_callers_current_depth() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        world.tool("spawn", tool_name="never", max_depth=0)
        at_cap = await world.parent("deep", depth=3)
        outcome = await call(at_cap, "subagent", ARGS)
        assert text(outcome) == "Error: subagent depth 4 exceeds maxDepth 3"
        root = await world.parent("root")
        assert text(await call(root, "never", ARGS)) == "Error: subagent depth 1 exceeds maxDepth 0"
        assert text(await call(root, "subagent", ARGS)) == "ok"

    run(main)


def test_tool_26_depth_rejection_in_each_route() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", max_depth=0)
        world.tool("spawn", tool_name="c", background_mode=CONTINUABLE, max_depth=0)
        parent = await world.parent()
        started = await call(parent, "subagent", {**ARGS, "run_in_background": True})
        assert text(started) == "started background subagent task subagent-1"
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "(no new output)\n[status: failed, SubagentError: subagent depth 1 exceeds maxDepth 0]"
        )
        refused = await call(parent, "c", ARGS)
        assert text(refused) == "Error: subagent depth 1 exceeds maxDepth 0"
        assert await world.service.list_children(parent.id) == []

    run(main)


def test_tool_27_service_checks_capabilities_before_any_provider_work() -> None:
    async def main() -> None:
        world, fake, _ = await fake_world(
            SubagentCapabilities(depth_limit=True), tool_filter=ToolFilter(allow=("task_list",))
        )
        parent = await world.parent()
        assert text(await call(parent, "subagent", ARGS)) == (
            'Error: subagent provider "fake" does not support the "toolFilter" capability'
        )
        assert fake.requests == []

    run(main)


# ----------------------------------------------------------------------------- instances


def test_tool_40_calls_in_one_message_run_one_after_another() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        both = call_tool("subagent", {"description": "a", "prompt": "first"})
        second = call_tool("subagent", {"description": "b", "prompt": "second"}, call_id="c2")
        world.model.script(
            "parent",
            type(both)(tool_calls=(*both.tool_calls, *second.tool_calls)),
            reply("both done"),
        )
        world.model.script("first", reply("one"))
        world.model.script("second", reply("two"))
        parent.followup(create_user_message((TextBlock("go"),)))
        await world.settle()
        assert transcript(parent)[-3:] == [
            ("tool subagent", "one"),
            ("tool subagent", "two"),
            ("assistant", "both done"),
        ]

    run(main)


def test_tool_41_concurrent_background_starts_settle_independently() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        world.model.script("a", reply("A"))
        world.model.script("b", reply("B"))
        await call(
            parent, "subagent", {"description": "a", "prompt": "a", "run_in_background": True}
        )
        await call(
            parent, "subagent", {"description": "b", "prompt": "b", "run_in_background": True}
        )
        world.jobs.kill("subagent-1", parent)
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-2"})) == (
            "B\n[status: completed]"
        )
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "(no new output)\n[status: killed]"
        )

    run(main)


def test_tool_44_removing_a_provider_removes_only_its_tools() -> None:
    world = ToolsWorld()
    world.tool("spawn", background_mode=CONTINUABLE)
    world.tool("fork", tool_name="subagent_fork")
    world.unregister["fork"]()
    assert world.globals.get("subagent_fork") is None
    assert world.globals.get("subagent") is not None
    with pytest.raises(SubagentError) as caught:
        world.service.register_provider(FakeProvider("spawn"))
    assert caught.value.code is ErrorCode.DUPLICATE_PROVIDER


def test_tool_45_each_instance_fixes_its_own_child_policy() -> None:
    async def main() -> None:
        world = ToolsWorld()
        fake = FakeProvider("fake", ALL_CAPS)
        world.service.register_provider(fake)
        world.tool("fake", persona="terse")
        world.tool("fake", tool_name="chatty", persona="chatty", max_depth=5)
        parent = await world.parent()
        for name in ("subagent", "chatty"):
            pending = asyncio.ensure_future(call(parent, name, ARGS))
            before = len(fake.runs)
            await until(lambda: len(fake.runs) > before)  # noqa: B023
            fake.runs[-1].result.set_result(result(KnownStop.COMPLETED))
            await pending
        assert [(r.request.intent.persona, r.request.intent.max_depth) for r in fake.requests] == [
            ("terse", 3),
            ("chatty", 5),
        ]

    run(main)


def test_tool_3_instances_share_no_reservation_across_registries() -> None:
    world = ToolsWorld()
    other = ToolRegistry()
    SubagentTool(world.service, other, SubagentToolConfig("spawn")).apply()
    world.tool("spawn")
    assert other.get("subagent") is not None
    assert world.globals.get("subagent") is not None


def test_tool_21_a_real_child_out_of_tokens_returns_no_partial_output() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        world.model.script("child task", hit_max_tokens("half an answer"))
        outcome = await call(parent, "subagent", ARGS)
        assert outcome.is_error
        assert text(outcome) == "Error: subagent run hit its token limit before finishing"

    run(main)


def test_tool_3_apply_is_single_shot() -> None:
    world = ToolsWorld()
    tool = world.tool("spawn")
    with pytest.raises(SubagentError) as caught:
        tool.apply()
    assert caught.value.field == "apply"
    unapplied = SubagentTool(world.service, world.globals, SubagentToolConfig("spawn"))
    unapplied.dispose()
    assert world.globals.get("subagent") is not None


def test_tool_16_no_calling_agent_outside_a_loop_or_binding() -> None:
    assert calling_agent() is None

    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        world.callers.attach(world.registry)  # binding twice changes nothing
        assert len(parent.tools._guards) == 1
        assert calling_agent() is None
        with acting_as(parent):
            assert calling_agent() is parent
        assert calling_agent() is None

    run(main)


def test_tool_24_a_success_after_the_call_aborted_is_replaced() -> None:
    async def main() -> None:
        controller = AbortController()

        async def body(_args: JsonObject) -> str:
            controller.abort("late")
            return "started"

        outcome = await guarded(parameters({}), {}, controller.signal, body)
        assert text(outcome) == "Error: tool call aborted"
        assert outcome.is_error

    run(main)


def test_tool_5_a_disposed_instance_frees_its_name_once() -> None:
    world = ToolsWorld()
    first = world.tool("late")
    first.dispose()
    second = world.tool("late")
    first.dispose()  # a second dispose must not free the new owner's reservation
    with pytest.raises(SubagentError):
        world.tool("late")
    second.dispose()
