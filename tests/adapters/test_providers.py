"""The spawn and fork providers over the shared in-process driver (SPAWN, FORK, DRIVER, STRUCT,
DEPTH, POLICY, DESC and the one-shot lifecycle ONE), against the reference harness."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from dsh_subagent.adapters.protocols import (
    Agent,
    CreateOptions,
    ModelStep,
    Tool,
    ToolCall,
    ToolOutcome,
    create_user_message,
)
from dsh_subagent.adapters.providers.base import ABORTED_BEFORE_PUBLICATION
from dsh_subagent.adapters.providers.fork import ForkProvider, completed_turn_prefix
from dsh_subagent.adapters.providers.in_process import (
    STRUCTURED_ACK,
    STRUCTURED_DESCRIPTION,
    STRUCTURED_TOOL,
    StructuredCapture,
    child_agent_options,
)
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    NullModel,
    call_tool,
    fail,
    hit_max_tokens,
    reply,
)
from dsh_subagent.adapters.reference.session import LiveSession, LogOverride, bind_persistence
from dsh_subagent.adapters.service import LifecyclePayload
from dsh_subagent.adapters.signals import AbortController, AbortSignal, Scope
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import SUBAGENT_END, SUBAGENT_START, RunEndInfo, RunStartInfo
from dsh_subagent.core.policy import DELEGATION_STATEMENT
from dsh_subagent.core.values import (
    APPROVAL_POLICY,
    DESCRIPTOR_EVENT,
    END_SEED,
    SANDBOX_MODE,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_SOURCE,
    AgentOptions,
    JsonObject,
    KnownStop,
    Origin,
    SessionEvent,
    SessionId,
    TextBlock,
    ToolFilter,
)
from tests.adapters.service_world import DEPLOYMENT_PERSONA, World, ask, run

SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def types(events: tuple[SessionEvent, ...]) -> list[str]:
    return [event.type for event in events]


def texts(outcome: tuple[object, ...]) -> list[object]:
    return [block["text"] for block in outcome if isinstance(block, Mapping)]


async def ok_tool(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
    return ToolOutcome((TextBlock("ok"),))


async def completed_parent(world: World, text: str = "hi") -> ReferenceAgent:
    parent = await world.parent()
    parent.followup(create_user_message((TextBlock(text),)))
    await parent.when_idle()
    return parent


def child_of(world: World, run_id: str) -> ReferenceAgent:
    child = world.registry.get(SessionId(run_id))
    assert child is not None
    return child


# --------------------------------------------------------------------------- SPAWN


def test_spawn_1_spawn_2_named_provider_with_every_capability() -> None:
    world = World()
    assert world.spawn.name == "spawn"
    caps = world.spawn.capabilities
    assert (caps.output_schema, caps.depth_limit, caps.tool_filter, caps.persona) == (
        True,
        True,
        True,
        True,
    )
    assert world.spawn.inherits_parent_context is False
    assert SpawnProvider(world.host, name="helper").name == "helper"
    with pytest.raises(SubagentError) as caught:
        world.service.register_provider(SpawnProvider(world.host))
    assert caught.value.code is ErrorCode.DUPLICATE_PROVIDER


def test_spawn_3_a_spawned_child_starts_with_an_empty_log() -> None:
    async def main() -> None:
        world = World([reply("parent answer"), reply("child answer")])
        parent = await completed_parent(world)
        started = await world.service.start("spawn", ask(parent))
        result = await started.result
        child = started.local_agent
        assert child is not None
        assert child.session.header.seed_length is None
        assert child.session.events[0].type != TURN_START
        assert all("parent answer" not in str(e.data) for e in child.session.events)
        assert texts(result.output) == ["child answer"]
        await started.dispose()

    run(main)


def test_spawn_4_continuable_preparation_is_an_empty_spec() -> None:
    async def main() -> None:
        from dsh_subagent.adapters.providers.base import ContinuableCreateRequest

        world = World()
        parent = await world.parent()
        spec = await world.spawn.prepare_continuable(
            ContinuableCreateRequest(SessionId("c"), parent, AbortController().signal)
        )
        assert spec.seed is None

    run(main)


def test_spawn_5_unloading_after_a_start_does_not_revoke_the_run() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("done"))])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        world.unregister["spawn"]()
        with pytest.raises(SubagentError):
            await world.service.start("spawn", ask(parent))
        gate.open()
        assert (await started.result).stop_reason is KnownStop.COMPLETED
        await started.dispose()

    run(main)


# --------------------------------------------------------------------------- FORK


def test_fork_1_fork_named_and_inherits_parent_context() -> None:
    world = World()
    assert world.fork.name == "fork"
    assert world.fork.capabilities == world.spawn.capabilities
    assert world.fork.inherits_parent_context is True
    assert ForkProvider(world.host, name="f2").name == "f2"


def test_fork_2_cap_8_seed_is_the_prefix_through_the_last_turn_end() -> None:
    events = (
        SessionEvent(TURN_START, 0, 0.0, {"turn": 1}),
        SessionEvent(TURN_END, 1, 0.0, {"turn": 1, "reason": "completed"}),
        SessionEvent(TURN_START, 2, 0.0, {"turn": 2}),
        SessionEvent(STEP_START, 3, 0.0, {}),
    )
    assert completed_turn_prefix(events) == events[:2]
    assert completed_turn_prefix(events[:1]) is None
    assert completed_turn_prefix(()) is None


def test_fork_2_in_flight_turn_is_excluded_and_no_turn_means_spawn_like() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("parent")), reply("child")])
        parent = await world.parent()
        parent.followup(create_user_message((TextBlock("go"),)))
        await gate.reached()  # the parent is inside its (only) turn
        started = await world.service.start("fork", ask(parent))
        child = started.local_agent
        assert child is not None
        assert child.session.header.seed_length is None
        await started.result
        gate.open()
        await parent.when_idle()
        await started.dispose()

    run(main)


def test_fork_3_fork_4_the_seed_is_a_snapshot_and_results_read_only_own_events() -> None:
    async def main() -> None:
        world = World([reply("parent answer"), ModelStep()])
        parent = await completed_parent(world)
        seed_length = len(completed_turn_prefix(parent.session.events) or ())
        started = await world.service.start("fork", ask(parent))
        result = await started.result
        child = started.local_agent
        assert child is not None
        assert child.session.header.seed_length == seed_length
        assert child.session.events[seed_length].type == END_SEED
        assert result.output == ()  # never the parent's last answer
        parent.session.append("custom/later", {})
        assert all(e.type != "custom/later" for e in child.session.events)
        await started.dispose()

    run(main)


def test_fork_5_continuable_preparation_captures_the_prefix_once() -> None:
    async def main() -> None:
        from dsh_subagent.adapters.providers.base import ContinuableCreateRequest

        world = World([reply("parent answer")])
        parent = await completed_parent(world)
        spec = await world.fork.prepare_continuable(
            ContinuableCreateRequest(SessionId("c"), parent, AbortController().signal)
        )
        assert spec.seed == completed_turn_prefix(parent.session.events)

    run(main)


# --------------------------------------------------------------------------- ONE (in-process)


def test_one_4_one_5_published_before_fulfilment_with_the_header_recording_the_parent() -> None:
    async def main() -> None:
        world = World([reply("x")])
        parent = await world.parent()
        seen: list[object] = []

        def look_up(info: LifecyclePayload) -> None:
            assert isinstance(info, RunStartInfo)
            seen.append(world.registry.get(SessionId(info.child_id)))

        world.service.on(SUBAGENT_START, look_up)
        started = await world.service.start("spawn", ask(parent))
        child = started.local_agent
        assert child is not None
        assert seen == [child]
        assert started.id == child.session.id
        assert child.session.header.parent_session == parent.id
        await started.dispose()

    run(main)


def test_one_7_abort_before_publication_rejects_after_rollback_with_no_events() -> None:
    async def main() -> None:
        controller = AbortController()
        entered = asyncio.Event()

        async def slow_setup(child: Agent, signal: AbortSignal) -> None:
            entered.set()
            await asyncio.Event().wait()

        world = World(setup=slow_setup)
        parent = await world.parent()
        pending = asyncio.ensure_future(
            world.service.start("spawn", ask(parent, signal=controller.signal))
        )
        await entered.wait()
        controller.abort()
        with pytest.raises(SubagentError) as caught:
            await pending
        assert caught.value.code is ErrorCode.CANCELLED
        assert caught.value.message == ABORTED_BEFORE_PUBLICATION
        assert [a.id for a in world.registry.list()] == [parent.id]
        assert [s.id for s in world.store.list()] == [parent.id]
        assert world.names() == []

    run(main)


def test_one_7_driver_1_an_already_aborted_signal_rejects_before_creation() -> None:
    async def main() -> None:
        controller = AbortController()
        controller.abort()
        world = World()
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", ask(parent, signal=controller.signal))
        assert caught.value.message == ABORTED_BEFORE_PUBLICATION
        assert len(world.registry.list()) == 1

    run(main)


def test_one_7_driver_3_abort_after_publication_cancels_the_turn_and_keeps_the_id() -> None:
    async def main() -> None:
        gate = Gate()
        controller = AbortController()
        world = World([Gated(gate, reply("never"))])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, signal=controller.signal))
        await gate.reached()
        controller.abort()
        result = await started.result
        assert result.stop_reason is KnownStop.ABORTED
        child = child_of(world, started.id)
        end = child.session.events[-1]
        assert end.type == TURN_END
        assert wire.turn_end_reason(end.data).value == "aborted"
        assert isinstance(end.data, Mapping)
        assert end.data["cause"] == {"kind": "parent"}
        await started.dispose()
        assert world.names() == [SUBAGENT_START, SUBAGENT_END]

    run(main)


def test_driver_3_abort_in_the_handoff_publishes_an_aborted_run_with_no_output() -> None:
    async def main() -> None:
        controller = AbortController()
        world = World([reply("never")])
        world.registry.created.subscribe(
            lambda agent: controller.abort() if agent.id != "parent" else None
        )
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, signal=controller.signal))
        result = await started.result
        assert (result.output, result.stop_reason) == ((), KnownStop.ABORTED)
        assert world.model.requests == []
        await started.dispose()

    run(main)


def test_driver_3_the_prompt_is_a_user_followup() -> None:
    async def main() -> None:
        world = World([reply("x")])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, "the prompt"))
        await started.result
        child = child_of(world, started.id)
        message = next(e for e in child.session.events if e.type == "user/message")
        decoded = wire.decode_message(field_of(message.data, "message"), "m")  # type: ignore[arg-type]
        assert decoded.content == (TextBlock("the prompt"),)
        assert decoded.source == USER_SOURCE
        await started.dispose()

    run(main)


def test_one_8_one_10_driver_10_child_failures_resolve_with_a_stop_reason() -> None:
    async def main() -> None:
        world = World([fail("model down"), hit_max_tokens("partial")])
        parent = await world.parent()
        reasons = []
        for _ in range(2):
            started = await world.service.start("spawn", ask(parent))
            reasons.append((await started.result).stop_reason)
            await started.dispose()
        assert reasons == [KnownStop.ERROR, KnownStop.MAX_TOKENS]

    run(main)


def test_one_20_driver_10_a_blocked_turn_is_a_refusal() -> None:
    async def block(claimed: object, turn: int, step: int, signal: AbortSignal) -> bool:
        return False

    async def main() -> None:
        world = World(pre_step=block)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        assert (await started.result).stop_reason is KnownStop.REFUSAL
        await started.dispose()

    run(main)


def test_one_9_driver_4_dispose_is_idempotent_and_waits_for_settlement_and_release() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("never"))])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        await gate.reached()
        child = child_of(world, started.id)
        first = started.dispose()
        assert started.dispose() is first
        await first
        assert started.result.done()
        assert started.result.result().stop_reason is KnownStop.ABORTED
        assert world.registry.get(child.id) is None
        assert world.store.get(child.id) is None
        assert child.ctx.disposed
        await started.dispose()

    run(main)


def test_one_9_dispose_rejects_only_for_a_release_failure() -> None:
    async def failing_release(child: Agent, signal: AbortSignal) -> None:
        def boom() -> None:
            raise RuntimeError("release failed")

        child.ctx.defer(boom)

    async def main() -> None:
        world = World([reply("done")], setup=failing_release)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        result = await started.result
        with pytest.raises(RuntimeError, match="release failed"):
            await started.dispose()
        assert result.stop_reason is KnownStop.COMPLETED

    run(main)


def test_one_11_one_12_driver_12_output_is_the_last_non_empty_message_else_streamed_text() -> None:
    async def main() -> None:
        world = World(
            [
                call_tool("noop"),
                ModelStep(content=(TextBlock("final"),), chunks=("final",)),
                ModelStep(chunks=("par", "tial")),
            ]
        )
        world.globals.register(Tool("noop", ok_tool))
        parent = await world.parent()
        outputs = []
        for _ in range(2):
            started = await world.service.start("spawn", ask(parent))
            outputs.append(texts((await started.result).output))
            await started.dispose()
        assert outputs == [["final"], ["partial"]]

    run(main)


def test_one_17_a_run_has_no_steer_resume_or_followup() -> None:
    async def main() -> None:
        world = World([reply("x")])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        for member in ("steer", "resume", "followup"):
            assert not hasattr(started, member)
        await started.dispose()

    run(main)


def test_one_18_a_disposed_child_is_discoverable_only_if_it_reached_persistence() -> None:
    async def main() -> None:
        persistence = InMemoryPersistence(clock=lambda: 1.0)
        world = World([reply("x")], persistence=persistence)
        bind_persistence(world.store, persistence)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        await started.result
        await started.dispose()
        record = await persistence.inspect(SessionId(started.id))
        assert record.header.parent_session == parent.id
        assert record.events[-1].type == TURN_END

    run(main)


def test_one_18_a_failing_flush_is_best_effort() -> None:
    async def main() -> None:
        world = World([reply("x")])

        def broken(session: LiveSession) -> None:
            raise RuntimeError("disk full")

        world.store.on_flush(broken)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        assert (await started.result).stop_reason is KnownStop.COMPLETED
        await started.dispose()

    run(main)


def test_reg_9_concurrent_in_process_siblings_are_isolated() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("good"))])
        parent = await world.parent()
        good = await world.service.start("spawn", ask(parent))
        await gate.reached()
        with pytest.raises(SubagentError):
            await world.service.start(
                "spawn", ask(parent, tool_filter=ToolFilter(allow=("missing",)))
            )
        assert not good.result.done()
        gate.open()
        assert (await good.result).stop_reason is KnownStop.COMPLETED
        await good.dispose()

    run(main)


def test_driver_4_parent_disposal_cascades_to_the_child() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("never"))])
        parent_handle = await world.registry.create(CreateOptions(SessionId("parent")))
        started = await world.service.start("spawn", ask(parent_handle.agent))
        await gate.reached()
        await parent_handle.dispose()
        assert (await started.result).stop_reason is KnownStop.ABORTED
        await started.dispose()
        assert world.registry.list() == []

    run(main)


# --------------------------------------------------------------------------- DESC


def test_desc_2_desc_12_the_descriptor_is_appended_once_inside_the_initial_turn() -> None:
    async def main() -> None:
        world = World([call_tool("noop"), reply("done")])
        world.globals.register(Tool("noop", ok_tool))
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, label="Short"))
        await started.result
        events = child_of(world, started.id).session.events
        kinds = types(events)
        assert kinds.count(DESCRIPTOR_EVENT) == 1
        at = kinds.index(DESCRIPTOR_EVENT)
        assert kinds.index(TURN_START) < at < kinds.index(STEP_START)
        assert events[at].data == {
            "version": 2,
            "mode": "one-shot",
            "provider": "spawn",
            "label": "Short",
        }
        first_request = world.model.requests[0]
        assert DESCRIPTOR_EVENT in types(first_request.events)
        await started.dispose()

    run(main)


# --------------------------------------------------------------------------- DEPTH


def test_depth_1_depth_6_driver_6_the_child_header_and_options_record_depth() -> None:
    async def main() -> None:
        world = World([reply("x")])
        parent = await world.parent(cwd="/repo")
        started = await world.service.start("spawn", ask(parent))
        child = child_of(world, started.id)
        header = child.session.header
        assert (header.delegation_depth, child.options.subagent_depth) == (1, 1)
        assert (header.cwd, header.origin, header.parent_session) == (
            "/repo",
            Origin.SUBAGENT,
            parent.id,
        )
        await started.dispose()

    run(main)


def test_depth_2_the_header_is_a_floor_runtime_options_may_deepen() -> None:
    async def main() -> None:
        world = World([reply("a"), reply("b")])
        floor = await world.parent("p1", depth=3, options=AgentOptions(subagent_depth=1))
        deeper = await world.parent("p2", depth=1, options=AgentOptions(subagent_depth=4))
        depths = []
        for parent in (floor, deeper):
            started = await world.service.start("spawn", ask(parent))
            depths.append(child_of(world, started.id).session.header.delegation_depth)
            await started.dispose()
        assert depths == [4, 5]

    run(main)


def test_depth_3_depth_5_the_cap_is_inclusive_and_checked_before_creation() -> None:
    async def main() -> None:
        world = World([reply("x")])
        top = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", ask(top, max_depth=0))
        assert caught.value.code is ErrorCode.DEPTH_LIMIT_EXCEEDED
        assert "1" in caught.value.message
        assert "0" in caught.value.message
        assert len(world.registry.list()) == 1
        started = await world.service.start("spawn", ask(top, max_depth=1))
        await started.dispose()

    run(main)


def test_depth_8_the_service_checks_only_the_domain_the_provider_enforces_the_cap() -> None:
    async def main() -> None:
        from tests.adapters.service_world import FakeProvider

        world = World()
        lenient = FakeProvider("lenient")
        world.service.register_provider(lenient)
        top = await world.parent()
        await world.service.start("lenient", ask(top, max_depth=0))
        assert lenient.requests[0].request.intent.max_depth == 0

    run(main)


# --------------------------------------------------------------------------- POLICY / DRIVER-9


def test_policy_1_policy_3_driver_9_delegated_policy_events_follow_the_seed() -> None:
    async def main() -> None:
        sandbox = LogOverride(SANDBOX_MODE, "mode")
        approval = LogOverride(APPROVAL_POLICY, "policy")
        world = World([reply("parent"), reply("child")], sandbox=sandbox, approval=approval)
        parent = await completed_parent(world)
        parent.session.append(SANDBOX_MODE, {"mode": "read-only"})
        parent.session.append(APPROVAL_POLICY, {"policy": "on-request"})
        started = await world.service.start("fork", ask(parent))
        await started.result
        events = child_of(world, started.id).session.events
        seed_length = (
            events[0:].__len__() and child_of(world, started.id).session.header.seed_length
        )
        assert seed_length is not None
        own = types(events[seed_length:])
        assert own[:3] == [END_SEED, SANDBOX_MODE, APPROVAL_POLICY]
        assert events[seed_length + 1].data == {"mode": "read-only", "source": "delegation"}
        assert events[seed_length + 2].data == {"policy": "never", "source": "delegation"}
        await started.dispose()

    run(main)


def test_policy_2_capture_happens_before_the_first_await() -> None:
    async def main() -> None:
        sandbox = LogOverride(SANDBOX_MODE, "mode")
        release = asyncio.Event()
        entered = asyncio.Event()

        async def hold(child: Agent, signal: AbortSignal) -> None:
            entered.set()
            await release.wait()

        world = World([reply("x")], sandbox=sandbox, setup=hold)
        parent = await world.parent()
        parent.session.append(SANDBOX_MODE, {"mode": "read-only"})
        pending = asyncio.ensure_future(world.service.start("spawn", ask(parent)))
        await entered.wait()
        parent.session.append(SANDBOX_MODE, {"mode": "danger-full-access"})
        release.set()
        started = await pending
        modes = [
            e.data for e in child_of(world, started.id).session.events if e.type == SANDBOX_MODE
        ]
        assert modes == [{"mode": "read-only", "source": "delegation"}]
        await started.dispose()

    run(main)


def test_policy_4_an_unswitched_parent_writes_no_sandbox_mode() -> None:
    async def main() -> None:
        world = World(
            [reply("x")],
            sandbox=LogOverride(SANDBOX_MODE, "mode"),
            approval=LogOverride(APPROVAL_POLICY, "policy"),
        )
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        kinds = types(child_of(world, started.id).session.events)
        assert SANDBOX_MODE not in kinds
        assert kinds.count(APPROVAL_POLICY) == 1
        await started.dispose()

    run(main)


def test_policy_8_driver_7_the_delegation_statement_is_runtime_context_of_children_only() -> None:
    async def main() -> None:
        world = World([reply("child"), reply("parent")])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, persona="Be terse."))
        await started.result
        child_request = world.model.requests[0]
        assert ("subagent:delegation", 120, DELEGATION_STATEMENT) in child_request.runtime_context
        assert ("deployment:persona", 0, "Be terse.") in child_request.system_prompt
        parent.followup(create_user_message((TextBlock("hi"),)))
        await parent.when_idle()
        parent_request = world.model.requests[1]
        assert parent_request.runtime_context == ()
        assert ("deployment:persona", 0, DEPLOYMENT_PERSONA) in parent_request.system_prompt
        await started.dispose()

    run(main)


def test_policy_9_the_header_records_the_parents_live_preset() -> None:
    class Roster:
        def __init__(self) -> None:
            self.joined: list[tuple[Scope, Scope]] = []

        def compose_from(self, child: Scope, parent: Scope) -> None:
            self.joined.append((child, parent))

        def composed_preset(self, ctx: Scope) -> str | None:
            return "reviewer"

    async def main() -> None:
        roster = Roster()
        world = World([reply("x")], roster=roster)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        child = child_of(world, started.id)
        assert child.session.header.agent_preset == "reviewer"
        assert roster.joined == [(child.ctx, parent.ctx)]
        await started.dispose()

    run(main)


def test_policy_12_driver_8_the_filter_is_visibility_and_child_tools_follow_it() -> None:
    async def main() -> None:
        world = World([structured_call({"answer": 1})])
        for name in ("read", "write"):
            world.globals.register(Tool(name, ok_tool))
        parent = await world.parent()
        started = await world.service.start(
            "spawn",
            ask(parent, tool_filter=ToolFilter(allow=()), output_schema=SCHEMA),
        )
        await started.result
        assert world.model.requests[0].tools == (STRUCTURED_TOOL,)
        await started.dispose()

    run(main)


def test_driver_8_unknown_and_reserved_names_reject_the_start_with_no_orphan() -> None:
    async def main() -> None:
        world = World()
        world.globals.register(Tool("read", ok_tool))
        parent = await world.parent()
        for names, fragment in (
            (("nope",), 'names unknown global tool "nope"; known global tools: read'),
            (("a", "b"), 'names unknown global tools "a", "b"'),
            (("run_code",), 'reserved Code Mode presentation transport "run_code"'),
        ):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("spawn", ask(parent, tool_filter=ToolFilter(deny=names)))
            assert fragment in caught.value.message
        assert [a.id for a in world.registry.list()] == [parent.id]
        assert world.names() == []

    run(main)


def test_driver_5_child_options_overlay_the_parents_route() -> None:
    parent = AgentOptions(provider="p", model="m", max_tokens=10, subagent_depth=2)
    assert child_agent_options(parent, None, 3) == AgentOptions("p", "m", 10, 3)
    assert child_agent_options(parent, AgentOptions(model="n"), 1) == AgentOptions("p", "n", 10, 1)
    assert child_agent_options(AgentOptions(), AgentOptions(max_tokens=5), 1) == AgentOptions(
        None, None, 5, 1
    )

    async def main() -> None:
        world = World([reply("x")])
        parent = await world.parent(options=AgentOptions(provider="p", model="m"))
        started = await world.service.start(
            "spawn", ask(parent, agent_options=AgentOptions(model="other", max_tokens=7))
        )
        assert child_of(world, started.id).options == AgentOptions("p", "other", 7, 1)
        await started.dispose()

    run(main)


def test_driver_13_each_run_has_a_start_end_pair_scoped_to_its_parent() -> None:
    async def main() -> None:
        world = World([reply("done")])
        parent = await world.parent()
        seen: list[str] = []
        world.service.on(SUBAGENT_END, lambda info: seen.append("end"), parent=parent.id)
        started = await world.service.start("spawn", ask(parent))
        await started.result
        await started.dispose()
        end = world.events[-1][1]
        assert isinstance(end, RunEndInfo)
        assert end.last_assistant_message == ({"type": "text", "text": "done"},)
        assert seen == ["end"]

    run(main)


# --------------------------------------------------------------------------- STRUCT


def captured_value(capture: StructuredCapture) -> object:
    return None if capture.captured is None else capture.captured.value


def field_of(data: object, key: str) -> object:
    assert isinstance(data, Mapping)
    return data[key]


def structured_call(arguments: JsonObject, call_id: str = "s1") -> ModelStep:
    return ModelStep(tool_calls=(ToolCall(call_id, STRUCTURED_TOOL, arguments),))


def test_struct_1_unsupported_schemas_are_rejected_at_start() -> None:
    async def main() -> None:
        world = World()
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start(
                "spawn", ask(parent, output_schema={"type": "object", "oneOf": []})
            )
        assert "unsupported JSON schema" in caught.value.message
        assert len(world.registry.list()) == 1

    run(main)


def test_struct_2_the_capture_tool_and_section_exist_only_in_the_child() -> None:
    async def main() -> None:
        world = World([structured_call({"answer": 42})])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, output_schema=SCHEMA))
        child = child_of(world, started.id)
        tool = child.tools.get(STRUCTURED_TOOL)
        assert tool is not None
        assert (tool.schema, tool.description) == (SCHEMA, STRUCTURED_DESCRIPTION)
        assert parent.tools.get(STRUCTURED_TOOL) is None
        result = await started.result
        sections = [name for name, _, _ in world.model.requests[0].system_prompt]
        assert "tool:structured_output" in sections
        assert (result.structured, result.has_structured) == ({"answer": 42}, True)
        assert result.stop_reason is KnownStop.COMPLETED
        await started.dispose()
        assert child.tools.get(STRUCTURED_TOOL) is None  # gone with the child (STRUCT-6)

    run(main)


def test_struct_3_invalid_arguments_are_an_error_and_the_model_may_retry() -> None:
    async def main() -> None:
        world = World(
            [structured_call({"answer": "x"}, "s1"), structured_call({"answer": 7}, "s2")]
        )
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, output_schema=SCHEMA))
        result = await started.result
        results = [
            e.data for e in child_of(world, started.id).session.events if e.type == TOOL_RESULT
        ]
        first, second = results
        assert isinstance(first, Mapping)
        assert first["isError"] is True
        assert first["content"] == [
            {"type": "text", "text": "invalid arguments: answer: 'x' is not of type 'integer'"}
        ]
        assert isinstance(second, Mapping)
        assert second["content"] == [{"type": "text", "text": STRUCTURED_ACK}]
        assert result.structured == {"answer": 7}
        await started.dispose()

    run(main)


def test_struct_4_a_staged_value_commits_only_on_a_non_error_final_result() -> None:
    async def main() -> None:
        session = LiveSession.detached(SessionId("c"))
        child = ReferenceAgent(
            session,
            model=NullModel(),
        )
        capture = StructuredCapture(child, session, SCHEMA)
        tool = child.tools.get(STRUCTURED_TOOL)
        assert tool is not None
        signal = AbortController().signal
        await tool.handler({"answer": 1}, signal)
        session.append(TOOL_RESULT, wire.tool_result_data(STRUCTURED_TOOL, "a", (), is_error=True))
        assert captured_value(capture) is None
        session.append(TOOL_RESULT, wire.tool_result_data("other", "b", (), is_error=False))
        await tool.handler({"answer": 2}, signal)
        session.append(TOOL_RESULT, wire.tool_result_data(STRUCTURED_TOOL, "c", (), is_error=False))
        assert captured_value(capture) == {"answer": 2}
        session.append("custom/other", {})

    run(main)


def test_struct_5_calls_after_the_capture_are_refused() -> None:
    async def main() -> None:
        step = ModelStep(
            tool_calls=(
                ToolCall("n1", "noop", {}),
                ToolCall("s1", STRUCTURED_TOOL, {"answer": 3}),
                ToolCall("n2", "noop", {}),
            )
        )
        world = World([step])
        world.globals.register(Tool("noop", ok_tool))
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent, output_schema=SCHEMA))
        result = await started.result
        results = [
            e.data for e in child_of(world, started.id).session.events if e.type == TOOL_RESULT
        ]
        assert [field_of(r, "isError") for r in results] == [False, False, True]
        assert field_of(results[2], "content") == [
            {
                "type": "text",
                "text": "structured output already recorded: the run is complete, "
                "so `noop` is not executed",
            }
        ]
        assert result.structured == {"answer": 3}
        await started.dispose()

    run(main)


def test_struct_6_driver_11_capture_ends_the_turn_and_no_capture_is_an_error() -> None:
    async def main() -> None:
        world = World([structured_call({"answer": 1}), reply("plain text")])
        parent = await world.parent()
        captured = await world.service.start("spawn", ask(parent, output_schema=SCHEMA))
        await captured.result
        assert len(world.model.requests) == 1  # no further model step after the capture
        plain = await world.service.start("spawn", ask(parent, output_schema=SCHEMA))
        result = await plain.result
        assert (result.stop_reason, result.has_structured) == (KnownStop.ERROR, False)
        assert len(world.model.requests) == 2  # no re-prompt
        await captured.dispose()
        await plain.dispose()

    run(main)


def test_one_8_an_unreadable_child_log_rejects_the_result_as_an_infrastructure_fault() -> None:
    async def corrupt(child: Agent, signal: AbortSignal) -> None:
        child.session.append("assistant/message", {"message": "not an object"})

    async def main() -> None:
        world = World([reply("x")], setup=corrupt)
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        with pytest.raises(SubagentError) as caught:
            await started.result
        assert caught.value.code is ErrorCode.CORRUPT_SESSION
        await started.dispose()
        end = world.events[-1][1]
        assert isinstance(end, RunEndInfo)
        assert (end.stop_reason, end.last_assistant_message) == (KnownStop.ERROR, None)

    run(main)


def test_driver_1_in_process_providers_need_a_live_parent_of_their_registry() -> None:
    async def main() -> None:
        world = World()
        parent = await world.parent()

        class Foreign:
            id = parent.id
            session = parent.session
            options = parent.options
            ctx = parent.ctx

        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", ask(Foreign()))  # type: ignore[arg-type]
        assert caught.value.field == "request.parent"

    run(main)
