"""The out-of-process provider base, proven with a test-double remote provider (OOP, ONE-6,
ONE-15, DEPTH-9, POLICY-11)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from dsh_subagent.adapters.providers.acp import AcpProvider
from dsh_subagent.adapters.providers.base import (
    ABORTED_BEFORE_PUBLICATION,
    ResolvedStartRequest,
    can_meter_budgets,
    can_prepare_continuable,
)
from dsh_subagent.adapters.providers.fork import ForkProvider
from dsh_subagent.adapters.providers.out_of_process import (
    DIAGNOSTIC_LIMIT,
    NO_START_CAPABILITIES,
    TRUNCATION_SUFFIX,
    Attempt,
    OutOfProcessProvider,
    limit_diagnostic,
    require_positive_finite,
    require_usable_cwd,
    resolve_child_cwd,
    validate_configured_cwd,
)
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import SUBAGENT_END, SUBAGENT_START, RunStartInfo
from dsh_subagent.core.values import KnownStop, SessionId, SubagentResult, ToolFilter
from tests.adapters.service_world import World, ask, run


class RemoteDouble(OutOfProcessProvider):
    """A remote provider whose attempt streams text and then does what the test says."""

    def __init__(
        self,
        name: str = "remote",
        *,
        outcome: SubagentResult | BaseException | None = None,
        launch_failure: BaseException | None = None,
        diagnostic: str | None = None,
        sink_failure: bool = False,
    ) -> None:
        super().__init__(name)
        self.outcome = outcome
        self.launch_failure = launch_failure
        self.diagnostic = diagnostic
        self.sink_failure = sink_failure
        self.release = asyncio.Event()
        self.trace: list[str] = []
        self.sunk: list[BaseException] = []

    async def launch(self, request: ResolvedStartRequest, attempt: Attempt) -> None:
        self.trace.append("launch")
        if self.launch_failure is not None:
            raise self.launch_failure

    async def run(self, request: ResolvedStartRequest, attempt: Attempt) -> SubagentResult:
        attempt.push_text("partial ")
        attempt.push_text("text")
        await self.release.wait()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome or SubagentResult((), KnownStop.COMPLETED)

    async def teardown(self, attempt: Attempt) -> None:
        self.trace.append("teardown")
        self.release.set()

    def report_error(self, error: BaseException) -> None:
        self.sunk.append(error)
        if self.sink_failure:
            raise RuntimeError("sink broke")

    def diagnostic_for(self, error: BaseException) -> str | None:
        return self.diagnostic


class Minimal(OutOfProcessProvider):
    """Only ``run``: the default launch, teardown, sink and diagnostic."""

    async def run(self, request: ResolvedStartRequest, attempt: Attempt) -> SubagentResult:
        raise RuntimeError("raw product error with secrets")


COLLECTED = ({"type": "text", "text": "partial text"},)


def test_oop_1_no_start_capabilities_and_no_continuable_preparation() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble()
        world.service.register_provider(remote)
        assert remote.capabilities == NO_START_CAPABILITIES
        assert not can_prepare_continuable(remote)
        assert remote.inherits_parent_context is False
        parent = await world.parent()
        for fields in (
            {"output_schema": {"type": "object"}},
            {"max_depth": 2},
            {"tool_filter": ToolFilter(deny=("x",))},
            {"persona": ""},
        ):
            with pytest.raises(SubagentError) as caught:
                await world.service.start("remote", ask(parent, **fields))
            assert caught.value.code is ErrorCode.UNSUPPORTED_CAPABILITY
        assert remote.trace == []

    run(main)


def test_budget_12_a_budgeted_start_through_a_provider_that_cannot_meter_is_refused() -> None:
    assert can_meter_budgets(SpawnProvider)
    assert can_meter_budgets(ForkProvider)
    assert not can_meter_budgets(RemoteDouble)
    assert not can_meter_budgets(AcpProvider)

    async def main() -> None:
        world = World()
        remote = RemoteDouble()
        world.service.register_provider(remote)
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("remote", ask(parent, budget=Budget(model_requests=1)))
        assert (caught.value.code, caught.value.field) == (
            ErrorCode.UNSUPPORTED_CAPABILITY,
            "request.budget",
        )
        world.service.set_budget(parent, Budget(model_requests=5))
        with pytest.raises(SubagentError) as caught:
            await world.service.start("remote", ask(parent))  # would escape the parent's caps
        assert (caught.value.code, caught.value.field) == (
            ErrorCode.UNSUPPORTED_CAPABILITY,
            "request.parent",
        )
        assert remote.trace == []  # nothing launched
        assert world.service.remaining_budget(parent.id) == Budget(model_requests=5)

    run(main)


def test_oop_2_timing_bounds_must_be_positive_and_finite() -> None:
    assert require_positive_finite(2, "timeoutMs", "acp") == 2.0
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(SubagentError) as caught:
            require_positive_finite(bad, "timeoutMs", "acp")
        assert caught.value.message.endswith("acp: timeoutMs must be a positive finite number")


def test_oop_3_oop_4_oop_5_working_directories(tmp_path: Path) -> None:
    here = str(tmp_path)
    assert require_usable_cwd(here, prefix="acp", source="parent") == here
    with pytest.raises(SubagentError, match="not absolute"):
        require_usable_cwd("relative/dir", prefix="acp", source="configured")
    with pytest.raises(SubagentError, match="cannot be entered"):
        require_usable_cwd(str(tmp_path / "missing"), prefix="acp", source="configured")
    assert validate_configured_cwd(None, prefix="acp") is None
    with pytest.raises(SubagentError, match="empty"):
        validate_configured_cwd("", prefix="acp")
    previous = os.getcwd()
    os.chdir(tmp_path)
    try:
        (tmp_path / "sub").mkdir()
        assert validate_configured_cwd("sub", prefix="acp") == str(tmp_path / "sub")
    finally:
        os.chdir(previous)
    assert resolve_child_cwd("/configured", here, prefix="acp") == "/configured"
    assert resolve_child_cwd(None, here, prefix="acp") == here
    with pytest.raises(SubagentError, match="no working directory"):
        resolve_child_cwd(None, None, prefix="acp")


def test_oop_6_one_6_a_resolved_attempt_stands_and_the_run_is_remote() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble(outcome=SubagentResult(COLLECTED, KnownStop.COMPLETED))
        world.service.register_provider(remote)
        parent = await world.parent()
        first = await world.service.start("remote", ask(parent))
        second = await world.service.start("remote", ask(parent))
        assert first.id.startswith("parent/remote-")
        assert second.id.startswith("parent/remote-")
        assert first.id != second.id
        assert RemoteDouble().mint_run_id(parent.id) not in (first.id, second.id)  # a restart
        assert first.local_agent is None
        remote.release.set()
        assert (await first.result).stop_reason is KnownStop.COMPLETED
        await first.dispose()
        await second.dispose()
        starts = [p for _, p in world.events if isinstance(p, RunStartInfo)]
        assert [s.local for s in starts] == [False, False]
        assert world.registry.get(SessionId(first.id)) is None  # no local session (OOP-9)

    run(main)


def test_oop_6_a_cancelled_attempt_settles_aborted_with_the_collected_output() -> None:
    async def main() -> None:
        for outcome in (
            SubagentResult((), KnownStop.COMPLETED, diagnostic="x"),
            RuntimeError("late"),
        ):
            world = World()
            remote = RemoteDouble(outcome=outcome)
            world.service.register_provider(remote)
            controller = AbortController()
            parent = await world.parent()
            started = await world.service.start("remote", ask(parent, signal=controller.signal))
            controller.abort()
            remote.release.set()
            result = await started.result
            assert (result.output, result.stop_reason, result.diagnostic) == (
                COLLECTED,
                KnownStop.ABORTED,
                None,
            )
            await started.dispose()
            assert remote.sunk == []

    run(main)


def test_oop_6_oop_7_one_15_a_failed_attempt_settles_error_with_a_limited_diagnostic() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble(
            outcome=RuntimeError("boom"), diagnostic="é" * 4000, sink_failure=True
        )
        world.service.register_provider(remote)
        parent = await world.parent()
        started = await world.service.start("remote", ask(parent))
        remote.release.set()
        result = await started.result
        assert (result.output, result.stop_reason) == (COLLECTED, KnownStop.ERROR)
        assert result.diagnostic is not None
        assert result.diagnostic.endswith(TRUNCATION_SUFFIX)
        assert len(result.diagnostic.encode("utf-8")) <= DIAGNOSTIC_LIMIT
        assert [str(e) for e in remote.sunk] == ["boom"]
        await started.dispose()

    run(main)


def test_oop_7_limit_diagnostic_keeps_short_text_and_never_splits_a_character() -> None:
    exact = "a" * DIAGNOSTIC_LIMIT
    assert limit_diagnostic(exact) == exact
    cut = limit_diagnostic("a" + "€" * 2000)
    cut.encode("utf-8")  # valid UTF-8
    assert cut.endswith(TRUNCATION_SUFFIX)
    assert len(cut.encode("utf-8")) <= DIAGNOSTIC_LIMIT


def test_oop_8_dispose_is_memoized_cancels_at_once_and_tears_down() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble()
        world.service.register_provider(remote)
        parent = await world.parent()
        started = await world.service.start("remote", ask(parent))
        first = started.dispose()
        assert started.dispose() is first
        await first
        assert remote.trace == ["launch", "teardown"]
        assert (await started.result).stop_reason is KnownStop.ABORTED
        assert world.names() == [SUBAGENT_START, SUBAGENT_END]

    run(main)


def test_oop_9_named_instances_coexist_and_duplicates_fail() -> None:
    world = World()
    world.service.register_provider(RemoteDouble("claude"))
    world.service.register_provider(RemoteDouble("codex"))
    with pytest.raises(SubagentError) as caught:
        world.service.register_provider(RemoteDouble("claude"))
    assert caught.value.code is ErrorCode.DUPLICATE_PROVIDER


def test_oop_10_raw_product_errors_never_reach_the_result() -> None:
    async def main() -> None:
        world = World()
        world.service.register_provider(Minimal("minimal"))
        parent = await world.parent()
        started = await world.service.start("minimal", ask(parent))
        result = await started.result
        assert (result.output, result.stop_reason, result.diagnostic) == ((), KnownStop.ERROR, None)
        assert "secrets" not in repr(result)
        await started.dispose()

    run(main)


def test_one_7_a_failed_or_aborted_launch_tears_down_and_rejects() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble(launch_failure=RuntimeError("spawn failed"))
        world.service.register_provider(remote)
        parent = await world.parent()
        with pytest.raises(RuntimeError, match="spawn failed"):
            await world.service.start("remote", ask(parent))
        assert remote.trace == ["launch", "teardown"]
        aborted = AbortController()
        aborted.abort()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("remote", ask(parent, signal=aborted.signal))
        assert caught.value.message == ABORTED_BEFORE_PUBLICATION
        assert world.names() == []

    run(main)


def test_policy_11_depth_9_remote_children_get_no_policy_and_no_depth_cap() -> None:
    async def main() -> None:
        world = World()
        remote = RemoteDouble()
        world.service.register_provider(remote)
        parent = await world.parent()
        with pytest.raises(SubagentError) as caught:
            await world.service.start("remote", ask(parent, max_depth=5))
        assert caught.value.field == "depthLimit"
        started = await world.service.start("remote", ask(parent))
        assert [e.type for e in parent.session.events] == []  # nothing written for the child
        await started.dispose()

    run(main)
