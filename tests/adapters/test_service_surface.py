"""The service's whole public surface (CONT-29) and its behaviour without optional services."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStartSpec,
    ParentAgent,
)
from dsh_subagent.adapters.projections import SessionProjectionRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.projections import IDENTITY_KEY, TIMING_KEY
from dsh_subagent.core.values import SessionId, TextBlock

PUBLIC = (
    "register_provider",
    "get_provider",
    "list",
    "start",
    "start_continuable",
    "followup",
    "interrupt",
    "report_from",
    "register_continuable_setup",
    "drain_continuable_descendants",
    "drain_continuable_children",
    "list_children",
    "list_descendants",
    # DESIGN decisions 2 and 3 make these public too.
    "activation_state",
    "user_authority",
    "drain_continuable",
    "on",
)


def test_cont_29_the_service_exposes_the_whole_caller_surface() -> None:
    service = SubagentService()
    for name in PUBLIC:
        assert callable(getattr(service, name)), name


def test_err_4_tear_15_without_an_agent_registry_continuation_is_unavailable() -> None:
    service = SubagentService()
    parent = object()

    async def main() -> None:
        spec = ContinuableStartSpec("spawn", "x", parent, (TextBlock("p"),))  # type: ignore[arg-type]
        for call in (
            service.start_continuable(spec),
            service.followup(SessionId("c"), (TextBlock("p"),), ParentAgent(parent)),  # type: ignore[arg-type]
        ):
            with pytest.raises(SubagentError) as info:
                await call
            assert info.value.code is ErrorCode.CONTINUATION_UNAVAILABLE
        with pytest.raises(SubagentError) as info:
            service.report_from(parent, (TextBlock("r"),), delivery=ReportDelivery.QUIET)  # type: ignore[arg-type]
        assert info.value.code is ErrorCode.CONTINUATION_UNAVAILABLE
        # Interrupt and the drains are no-ops, with no checks (CONT-23, TEAR-15).
        service.interrupt(SessionId("c"), AncestorAuthority(parent))  # type: ignore[arg-type]
        await service.drain_continuable()
        await service.drain_continuable_descendants([])
        await service.drain_continuable_children(parent, [SessionId("c")])  # type: ignore[arg-type]
        assert service.activation_state(SessionId("c")) is None

    asyncio.run(main())


def test_proj_1_projection_units_exist_while_a_registry_does() -> None:
    registry = SessionProjectionRegistry()
    SubagentService(projections=registry)
    assert {TIMING_KEY, IDENTITY_KEY} <= set(registry.keys)


def test_list_1_listing_without_a_projection_registry_fails_loud() -> None:
    async def main() -> None:
        with pytest.raises(SubagentError) as info:
            await SubagentService().list_children(SessionId("p"))
        assert info.value.code is ErrorCode.SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE

    asyncio.run(main())
