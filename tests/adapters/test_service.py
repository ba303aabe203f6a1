"""SubagentService: provider registry, start-time admission and lifecycle events (REG, CAP,
ONE, EVT)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import attrs
import pytest

from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ResolvedStartRequest,
    StartRequest,
    can_prepare_continuable,
)
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.session import adopt_seed
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core import lifecycle, oneshot_observer
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import (
    PROVIDER_ADDED,
    PROVIDER_REMOVED,
    SUBAGENT_END,
    SUBAGENT_START,
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
)
from dsh_subagent.core.values import (
    EventId,
    KnownStop,
    SubagentCapabilities,
    SubagentResult,
    TextBlock,
    ToolFilter,
)
from tests.adapters.service_world import FakeProvider, FakeRun, World, ask, run
from tests.flat_intent import evolve_flat


def names_of(events: Sequence[tuple[str, object]]) -> list[str]:
    return [name for name, _ in events]


# --------------------------------------------------------------------------- REG


def test_reg_1_list_and_get_provider_in_insertion_order() -> None:
    service = SubagentService()
    first, second = FakeProvider("b"), FakeProvider("a")
    service.register_provider(first)
    service.register_provider(second)
    assert service.list() == ["b", "a"]
    assert service.get_provider("a") is second
    assert service.get_provider("missing") is None


def test_reg_2_provider_receives_a_resolved_request() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        fake_run = await world.service.start("fake", ask(parent, label="x"))
        (resolved,) = fake.requests
        assert resolved.parent is parent
        assert resolved.request.parent.session_id == parent.id
        assert resolved.descriptor.provider == "fake"
        assert fake_run is fake.runs[0]

    run(main)


def test_reg_3_duplicate_name_raises_and_keeps_the_entry_and_disposer_is_single_shot() -> None:
    service = SubagentService()
    events: list[object] = []
    service.on(PROVIDER_REMOVED, events.append)
    original = FakeProvider("p")
    dispose = service.register_provider(original)
    with pytest.raises(SubagentError) as caught:
        service.register_provider(FakeProvider("p"))
    assert caught.value.code is ErrorCode.DUPLICATE_PROVIDER
    assert 'named "p" is already registered' in caught.value.message
    assert service.get_provider("p") is original
    dispose()
    dispose()
    assert service.list() == []
    assert events == [ProviderRemovedInfo("p")]


def test_reg_4_a_raising_provider_added_listener_vetoes_and_rolls_back() -> None:
    service = SubagentService()
    seen: list[str] = []

    def veto(payload: object) -> None:
        seen.append("added")
        raise RuntimeError("no")

    service.on(PROVIDER_ADDED, veto)
    service.on(PROVIDER_REMOVED, lambda payload: seen.append("removed"))
    with pytest.raises(RuntimeError, match="no"):
        service.register_provider(FakeProvider("p"))
    assert service.list() == []
    assert seen == ["added", "removed"]


def test_reg_5_provider_removed_listeners_are_contained(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        service = SubagentService()
        seen: list[str] = []

        def broken(payload: object) -> None:
            raise RuntimeError("sync boom")

        async def failing(payload: object) -> None:
            raise RuntimeError("async boom")

        service.on(PROVIDER_REMOVED, broken)
        service.on(PROVIDER_REMOVED, failing)
        service.on(PROVIDER_REMOVED, lambda payload: seen.append("peer"))
        service.register_provider(FakeProvider("p"))()
        await asyncio.sleep(0)  # let the failing awaitable's callback run
        assert seen == ["peer"]

    with caplog.at_level(logging.WARNING):
        run(main)
    assert "sync boom" in caplog.text
    assert "async boom" in caplog.text


def test_reg_6_removal_blocks_only_new_work() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("late"))])
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        world.unregister["spawn"]()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", ask(parent))
        assert caught.value.code is ErrorCode.NO_PROVIDER
        gate.open()
        result = await started.result
        assert result.stop_reason is KnownStop.COMPLETED
        await started.dispose()
        end = world.events[-1][1]
        assert isinstance(end, RunEndInfo)
        assert end.start.provider == "spawn"

    run(main)


def test_reg_7_an_unregistered_name_is_no_provider() -> None:
    async def main() -> None:
        world = World()
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("nope", ask(parent))
        assert caught.value.code is ErrorCode.NO_PROVIDER
        assert caught.value.message == 'no subagent provider registered for "nope"'
        assert world.names() == []

    run(main)


def test_reg_8_the_caller_request_is_never_mutated() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        request = ask(parent, label="keep")
        before = attrs.asdict(request, recurse=False)
        await world.service.start("fake", request)
        assert attrs.asdict(request, recurse=False) == before
        assert fake.requests[0].descriptor.label == "keep"

    run(main)


def test_reg_9_concurrent_sibling_failure_does_not_settle_another() -> None:
    async def main() -> None:
        world = World()
        good = FakeProvider("good")
        bad = FakeProvider("bad", failure=RuntimeError("setup failed"))
        world.service.register_provider(good)
        world.service.register_provider(bad)
        parent = await world.parent()
        outcomes = await asyncio.gather(
            world.service.start("good", ask(parent)),
            world.service.start("bad", ask(parent)),
            return_exceptions=True,
        )
        assert isinstance(outcomes[1], RuntimeError)
        assert not good.runs[0].result.done()
        assert good.runs[0].disposals == 0

    run(main)


def test_reg_10_inherits_parent_context_is_descriptive() -> None:
    world = World()
    assert world.spawn.inherits_parent_context is False
    assert world.fork.inherits_parent_context is True


def test_reg_11_consumers_mirror_added_and_removed_events() -> None:
    service = SubagentService()
    mirrored: set[str] = set()

    def on_added(payload: object) -> None:
        assert isinstance(payload, ProviderAddedInfo)
        mirrored.add(payload.name)

    def on_removed(payload: object) -> None:
        assert isinstance(payload, ProviderRemovedInfo)
        mirrored.discard(payload.name)

    service.on(PROVIDER_ADDED, on_added)
    service.on(PROVIDER_REMOVED, on_removed)
    dispose_b = service.register_provider(FakeProvider("b"))
    service.register_provider(FakeProvider("a"))
    dispose_b()
    assert mirrored == {"a"}


# --------------------------------------------------------------------------- CAP


def test_cap_1_cap_2_first_unsupported_capability_in_order_and_provider_never_called() -> None:
    async def main() -> None:
        world = World()
        bare = FakeProvider("bare", SubagentCapabilities())
        world.service.register_provider(bare)
        parent = await world.parent()
        request = ask(
            parent,
            output_schema={"type": "object"},
            max_depth=3,
            tool_filter=ToolFilter(deny=("x",)),
            persona="p",
        )
        for expected in ("outputSchema", "depthLimit", "toolFilter", "persona"):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("bare", request)
            assert caught.value.code is ErrorCode.UNSUPPORTED_CAPABILITY
            assert caught.value.field == expected
            field = {
                "outputSchema": "output_schema",
                "depthLimit": "max_depth",
                "toolFilter": "tool_filter",
                "persona": "persona",
            }[expected]
            request = evolve_flat(request, **{field: None})
        assert bare.requests == []
        assert world.names() == []

    run(main)


def test_cap_3_presence_not_truthiness_requests_a_capability() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider("bare", SubagentCapabilities()))
        parent = await world.parent()
        for fields in (
            {"persona": ""},
            {"max_depth": 0},
            {"tool_filter": ToolFilter(allow=())},
        ):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("bare", ask(parent, **fields))
            assert caught.value.code is ErrorCode.UNSUPPORTED_CAPABILITY

    run(main)


def test_cap_4_capability_check_runs_before_the_depth_domain() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider("bare", SubagentCapabilities()))
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("bare", ask(parent, max_depth=-1))
        assert caught.value.code is ErrorCode.UNSUPPORTED_CAPABILITY

    run(main)


def test_cap_5_continuable_capability_is_the_method_presence() -> None:
    world = World()
    assert can_prepare_continuable(world.spawn)
    assert not can_prepare_continuable(FakeProvider())
    added: list[object] = []
    service = SubagentService()
    service.on(PROVIDER_ADDED, added.append)
    service.register_provider(world.spawn)
    service.register_provider(FakeProvider())
    assert [getattr(info, "continuable", None) for info in added] == [True, False]


def test_cap_7_prepare_continuable_returns_data_only() -> None:
    async def main() -> None:
        world = World([reply("first answer")])
        parent = await world.parent()
        parent.followup(parent_message("hi"))
        await parent.when_idle()
        signal = AbortController().signal
        fresh = await world.spawn.prepare_continuable(
            ContinuableCreateRequest(parent.id, parent, signal)
        )
        seeded = await world.fork.prepare_continuable(
            ContinuableCreateRequest(parent.id, parent, signal)
        )
        assert fresh.seed is None
        assert seeded.seed is not None
        adopt_seed(seeded.seed)  # contiguous from 0, lossless JSON, balanced
        assert attrs.fields_dict(type(seeded)).keys() == {"seed"}

    run(main)


def parent_message(text: str):  # type: ignore[no-untyped-def]
    from dsh_subagent.adapters.protocols import create_user_message

    return create_user_message((TextBlock(text),))


# --------------------------------------------------------------------------- ONE (service level)


def test_one_1_the_signal_and_parent_are_required() -> None:
    async def main() -> None:
        world = World()
        parent = await world.parent()
        for bad, field in (
            (attrs.evolve(ask(parent), signal=None), "request.signal"),  # type: ignore[arg-type]
            (attrs.evolve(ask(parent), parent=object()), "request.parent"),  # type: ignore[arg-type]
        ):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("spawn", bad)
            assert caught.value.field == field
        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", "not a request")  # type: ignore[arg-type]
        assert caught.value.field == "request"

    run(main)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"output_schema": {"type": "array"}}, "request.output_schema.type"),
        ({"output_schema": {"type": "object", "$ref": "#/x"}}, "request.output_schema.$ref"),
        ({"output_schema": {"type": "object", "minProperties": -1}}, "request.output_schema"),
        ({"max_depth": -1}, "request.max_depth"),
        ({"max_depth": 1.5}, "request.max_depth"),
        ({"label": ""}, "request.label"),
        ({"persona": 7}, "request.persona"),
        ({"tool_filter": ToolFilter(allow=("",))}, "request.tool_filter.allow[0]"),
        ({"tool_filter": ToolFilter(deny=("a", "a"))}, "request.tool_filter.deny[1]"),
        ({"tool_filter": ToolFilter()}, "request.tool_filter"),
        ({"agent_options": "bad"}, None),
    ],
)
def test_one_2_each_malformed_field_is_rejected_before_any_child(
    fields: dict[str, object], field: str | None
) -> None:
    from dsh_subagent.core.values import AgentOptions

    if fields.get("agent_options") == "bad":
        fields = {"agent_options": AgentOptions(provider="", max_tokens=0)}
        field = "request.agent_options.provider"

    async def main() -> None:
        world = World()
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("spawn", ask(parent, **fields))  # type: ignore[arg-type]
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
        assert caught.value.field is not None
        assert caught.value.field.startswith(field or "")
        assert [a.id for a in world.registry.list()] == [parent.id]
        assert world.names() == []

    run(main)


def test_one_2_malformed_prompt_and_max_tokens_are_rejected() -> None:
    from dsh_subagent.core.values import AgentOptions

    async def main() -> None:
        world = World()
        parent = await world.parent()
        blank = StartRequest((TextBlock("  "),), parent, AbortController().signal)
        for request, field in (
            (blank, "request.prompt"),
            (ask(parent, agent_options=AgentOptions(max_tokens=0)), "request.agent_options"),
        ):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("spawn", request)
            assert caught.value.field is not None
            assert caught.value.field.startswith(field)
        assert len(world.registry.list()) == 1

    run(main)


def test_one_3_the_descriptor_names_the_lookup_provider_and_the_label() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        await world.service.start("fake", ask(parent))
        await world.service.start("fake", ask(parent, label="short"))
        assert [r.descriptor.label for r in fake.requests] == [None, "short"]
        assert {r.descriptor.provider for r in fake.requests} == {"fake"}

    run(main)


def test_one_8_a_rejected_result_still_closes_the_pair_as_error() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        await world.service.start("fake", ask(parent))
        fake.runs[0].result.set_exception(RuntimeError("transport lost"))
        await asyncio.sleep(0)
        name, end = world.events[-1]
        assert name == SUBAGENT_END
        assert isinstance(end, RunEndInfo)
        assert end.stop_reason is KnownStop.ERROR
        assert end.last_assistant_message is None

    run(main)


def test_one_16_each_successful_start_has_one_pair_a_rejected_start_none() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider("bad", failure=RuntimeError("x")))
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        with pytest.raises(RuntimeError):
            await world.service.start("bad", ask(parent))
        assert world.names() == []
        await world.service.start("fake", ask(parent))
        fake.runs[0].result.set_result(SubagentResult((), KnownStop.COMPLETED))
        await asyncio.sleep(0)
        assert world.names() == [SUBAGENT_START, SUBAGENT_END]

    run(main)


def test_one_8_a_cancelled_or_non_result_value_is_a_fault() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        world.service.register_provider(fake)
        parent = await world.parent()
        await world.service.start("fake", ask(parent))
        await world.service.start("fake", ask(parent))
        fake.runs[0].result.cancel()
        fake.runs[1].result.set_result("nonsense")  # type: ignore[arg-type]
        await asyncio.sleep(0)
        ends = [p for n, p in world.events if n == SUBAGENT_END]
        assert [e.stop_reason for e in ends] == [KnownStop.ERROR, KnownStop.ERROR]  # type: ignore[union-attr]

    run(main)


def test_one_5_an_unpublishable_run_is_disposed_and_the_start_fails() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider(run_id="")
        world.service.register_provider(fake)
        parent = await world.parent()
        with pytest.raises(SubagentError):
            await world.service.start("fake", ask(parent))
        assert fake.runs[0].disposals == 1
        assert world.names() == []

    run(main)


# --------------------------------------------------------------------------- EVT


def test_evt_1_evt_2_the_four_events_and_their_payloads() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        dispose = world.service.register_provider(fake)
        parent = await world.parent()
        await world.service.start("fake", ask(parent, label="L"))
        fake.runs[0].result.set_result(
            SubagentResult(({"type": "text", "text": "hi"},), KnownStop.COMPLETED)
        )
        await asyncio.sleep(0)
        dispose()
        assert names_of(world.events)[-3:] == [SUBAGENT_START, SUBAGENT_END, PROVIDER_REMOVED]
        start, end = world.events[-3][1], world.events[-2][1]
        assert isinstance(start, RunStartInfo)
        assert isinstance(end, RunEndInfo)
        assert (start.provider, start.child_id, start.local) == ("fake", "remote-1", False)
        assert end.start == start
        assert end.last_assistant_message == ({"type": "text", "text": "hi"},)
        assert lifecycle.start_payload(start)["runId"] == start.run_id

    run(main)


def test_evt_1_provider_events_carry_info_records_not_the_provider() -> None:
    service = SubagentService()
    fake = FakeProvider("fake", SubagentCapabilities(persona=True))
    seen: list[tuple[object, object]] = []
    for name in (PROVIDER_ADDED, PROVIDER_REMOVED):
        service.on(name, lambda info: seen.append((info, service.get_provider("fake"))))
    service.register_provider(fake)()
    assert seen == [
        (ProviderAddedInfo("fake", SubagentCapabilities(persona=True), continuable=False), fake),
        (ProviderRemovedInfo("fake"), None),
    ]


def test_evt_3_run_ids_are_fresh_and_never_derived_from_names() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider())
        parent = await world.parent()
        for _ in range(3):
            await world.service.start("fake", ask(parent))
        ids = [p.run_id for _, p in world.events if isinstance(p, RunStartInfo)]
        assert len(set(ids)) == 3
        assert not {"fake", "remote-1"} & set(ids)

    run(main)


def test_evt_4_local_is_snapshotted_from_the_exact_local_agent() -> None:
    async def main() -> None:
        world = World([reply("x")])
        world.service.register_provider(FakeProvider())
        parent = await world.parent()
        local = await world.service.start("spawn", ask(parent))
        await world.service.start("fake", ask(parent))
        starts = [p for _, p in world.events if isinstance(p, RunStartInfo)]
        assert [s.local for s in starts] == [True, False]
        assert local.local_agent is world.registry.get(local.id)  # type: ignore[arg-type]
        await local.dispose()

    run(main)


def test_evt_5_the_provider_name_is_the_one_recorded_at_creation() -> None:
    async def main() -> None:
        world = World()
        fake = FakeProvider()
        dispose = world.service.register_provider(fake)
        parent = await world.parent()
        await world.service.start("fake", ask(parent))
        dispose()
        fake.runs[0].result.set_result(SubagentResult((), KnownStop.COMPLETED))
        await asyncio.sleep(0)
        end = world.events[-1][1]
        assert isinstance(end, RunEndInfo)
        assert end.start.provider == "fake"

    run(main)


def test_evt_6_start_precedes_end_even_for_an_already_settled_result() -> None:
    async def main() -> None:
        world = World()

        class Settled(FakeProvider):
            async def start(self, request: ResolvedStartRequest) -> FakeRun:
                fake = await super().start(request)
                fake.result.set_result(SubagentResult((), KnownStop.COMPLETED))
                return fake

        settled = Settled("settled")
        world.service.register_provider(settled)
        parent = await world.parent()
        returned = await world.service.start("settled", ask(parent))
        assert returned is settled.runs[0]  # the provider's own run, unchanged
        assert world.names() == [SUBAGENT_START]
        await asyncio.sleep(0)
        assert world.names() == [SUBAGENT_START, SUBAGENT_END]

    run(main)


def test_evt_7_a_rejected_start_emits_nothing() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider("bad", failure=RuntimeError("x")))
        parent = await world.parent()
        with pytest.raises(RuntimeError):
            await world.service.start("bad", ask(parent))
        assert world.names() == []

    run(main)


def test_evt_12_run_events_reach_only_listeners_scoped_to_their_parent() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(FakeProvider())
        first = await world.parent("p1")
        second = await world.parent("p2")
        seen: list[str] = []
        world.service.on(SUBAGENT_START, lambda p: seen.append("p1"), parent=first.id)
        world.service.on(SUBAGENT_START, lambda p: seen.append("all"))
        await world.service.start("fake", ask(first))
        await world.service.start("fake", ask(second))
        assert seen == ["p1", "all", "all"]
        with pytest.raises(SubagentError):
            world.service.on(PROVIDER_ADDED, lambda p: None, parent=first.id)
        with pytest.raises(SubagentError):
            world.service.on("subagent/nope", lambda p: None)

    run(main)


def recorder(seen: list[str], name: str) -> Callable[[object], None]:
    return lambda _payload: seen.append(name)


def test_evt_13_evt_15_listener_failures_are_contained_and_change_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unrenderable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("cannot render")

    async def main() -> None:
        world = World([reply("fine")])
        seen: list[str] = []

        def sync_raise(payload: object) -> None:
            raise Unrenderable

        async def async_raise(payload: object) -> None:
            raise RuntimeError("async listener boom")

        for name in (SUBAGENT_START, SUBAGENT_END):
            world.service.on(name, sync_raise)
            world.service.on(name, async_raise)
            world.service.on(name, recorder(seen, name))
        parent = await world.parent()
        started = await world.service.start("spawn", ask(parent))
        result = await started.result
        await started.dispose()
        await asyncio.sleep(0)
        assert result.stop_reason is KnownStop.COMPLETED
        assert seen == [SUBAGENT_START, SUBAGENT_END]

    with caplog.at_level(logging.WARNING):
        run(main)
    assert "<unrenderable>" in caplog.text
    assert "async listener boom" in caplog.text


def test_evt_13_an_awaitable_outside_a_loop_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    service = SubagentService()

    async def listener(payload: object) -> None:
        return None

    service.on(PROVIDER_REMOVED, listener)
    with caplog.at_level(logging.WARNING):
        service.register_provider(FakeProvider("p"))()
    assert "outside a loop" in caplog.text


def test_evt_16_the_service_event_stream_satisfies_the_pairing_monitor() -> None:
    async def main() -> None:
        world = World([reply("a"), reply("b")])
        observed: list[oneshot_observer.ObserverEvent] = []
        for name in world.service.list():
            provider = world.service.get_provider(name)
            assert provider is not None
            info = ProviderAddedInfo(name, provider.capabilities)
            observed.append(oneshot_observer.ProviderAdded(EventId("x"), info))
        parent = await world.parent()
        for provider_name in ("spawn", "fork"):
            started = await world.service.start(provider_name, ask(parent))
            await started.dispose()
        for name, payload in world.events:
            if isinstance(payload, RunStartInfo):
                observed.append(oneshot_observer.RunStarted(EventId(name), payload))
            elif isinstance(payload, RunEndInfo):
                observed.append(oneshot_observer.RunEnded(EventId(name), payload))
        state = oneshot_observer.Observation()
        for event in observed:
            state, effects = oneshot_observer.apply(state, event)
            assert effects == ()
        assert oneshot_observer.is_paired(state)

    run(main)


def test_evt_13_an_unsubscribed_listener_is_not_called() -> None:
    service = SubagentService()
    seen: list[object] = []
    stop = service.on(PROVIDER_REMOVED, seen.append)
    stop()
    stop()
    service.register_provider(FakeProvider("p"))()
    assert seen == []
