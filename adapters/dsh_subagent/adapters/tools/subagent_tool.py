"""The ``subagent`` tool: one instance binds one provider to one model-facing tool name.

Theory of operation
-------------------
1. ``apply()`` reserves the tool name in its registry (a second instance with the same name
   fails here, not when a provider appears: TOOL-5), subscribes to provider-added / -removed,
   then mounts if the provider exists, else logs that it will (TOOL-3). Each mount re-reads
   the provider: a numeric cap needs ``depth_limit`` and continuable mode needs
   ``prepare_continuable`` (TOOL-4); a failing mount from provider-added rolls the provider's
   registration back. ``dispose()`` removes tool, prompt section, listeners and reservation.
2. Mounting registers the tool with the wording of ``subagent_config`` (TOOL-9..12) and, for
   a continuable instance with background enabled, the ``tool:<name>`` section (TOOL-14).
3. A call needs a calling agent (TOOL-16), routes by ``run_in_background`` (TOOL-17) and builds
   one request (TOOL-18). Foreground passes the call's signal, awaits the result and always
   awaits ``dispose()``; only ``completed`` succeeds, rendered as its text; any other end,
   a cancelled call included, is an errored result without partial output (TOOL-19..24).
   Background one-shot registers a task whose starter owns a fresh signal (BG-2..8).
   Continuable background returns the durable child id only (BG-20).
4. The service's depth and capability refusals are reworded as fixed texts for the model
   (``subagent depth <n> exceeds maxDepth <m>``, ``subagent provider "<p>" does not support
   the "<cap>" capability``), also in a failed task's detail (TOOL-26, TOOL-27).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Final

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.protocols import Agent, SystemPromptComposer, Tool, ToolHost, ToolOutcome
from dsh_subagent.adapters.providers.base import (
    StartRequest,
    SubagentProvider,
    can_prepare_continuable,
)
from dsh_subagent.adapters.service import LifecyclePayload, SubagentService
from dsh_subagent.adapters.signals import AbortController, AbortSignal, Unsubscribe
from dsh_subagent.adapters.tools.calling import require_caller
from dsh_subagent.adapters.tools.jobs import (
    JobHooks,
    JobOutcome,
    JobRegistry,
    JobStatus,
    settle_run,
)
from dsh_subagent.adapters.tools.schemas import ToolFailure, guarded, message_of, render_exception
from dsh_subagent.adapters.tools.subagent_config import (
    GUIDANCE_ORDER,
    BackgroundMode,
    BackgroundValue,
    ContinuableValue,
    ForegroundValue,
    SubagentToolConfig,
    SubagentValue,
    config_error,
    failure_message,
    guidance_text,
    render_value,
    tool_wording,
)
from dsh_subagent.core.capabilities import CAPABILITY_ORDER
from dsh_subagent.core.depth import MAX_DEPTH, delegation_depth_of
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.lifecycle import PROVIDER_ADDED, PROVIDER_REMOVED
from dsh_subagent.core.values import (
    JsonObject,
    KnownStop,
    SubagentIntent,
    SubagentResult,
    TextBlock,
)

_log = logging.getLogger(__name__)

_RESERVED: Final[weakref.WeakKeyDictionary[ToolHost, set[str]]] = weakref.WeakKeyDictionary()


class SubagentTool:
    """One ``subagent`` tool instance over one provider (rules 1-4)."""

    def __init__(
        self,
        service: SubagentService,
        tools: ToolHost,
        config: SubagentToolConfig,
        *,
        jobs: JobRegistry | None = None,
        prompt: SystemPromptComposer | None = None,
    ) -> None:
        if not isinstance(config, SubagentToolConfig):
            raise invalid("config", "must be a SubagentToolConfig")
        self.service = service
        self.tools = tools
        self.config = config
        self.jobs = jobs
        self.prompt = prompt
        self._listeners: list[Unsubscribe] = []
        self._mounted: list[Unsubscribe] = []
        self._applied = False
        self._reserved = False
        self.description = ""
        self.schema: JsonObject = {}

    @property
    def name(self) -> str:
        return self.config.tool_name

    @property
    def mounted(self) -> bool:
        return bool(self._mounted)

    def apply(self) -> None:
        """Reserve the name, follow the provider, mount if it exists (rule 2, TOOL-3/5)."""
        if self._applied:
            raise invalid("apply", "this subagent tool instance is already applied")
        reserved = _RESERVED.setdefault(self.tools, set())
        if self.name in reserved or self.tools.get(self.name) is not None:
            raise config_error(
                "tool_name", f'tool-subagent: the tool name "{self.name}" is already taken'
            )
        reserved.add(self.name)
        self._applied = self._reserved = True
        self._listeners = [
            self.service.on(PROVIDER_ADDED, self._on_added),
            self.service.on(PROVIDER_REMOVED, self._on_removed),
        ]
        provider = self.service.get_provider(self.config.provider)
        if provider is None:
            _log.info(
                'subagent provider "%s" not registered yet; the "%s" tool will register when '
                "it appears",
                self.config.provider,
                self.name,
            )
            return
        try:
            self._mount(provider)
        except BaseException:
            self.dispose()
            raise

    def dispose(self) -> None:
        """Remove the tool, its section, its listeners and its reservation (TOOL-3)."""
        for remove in (*self._listeners, *self._mounted):
            remove()
        self._listeners, self._mounted = [], []
        if self._reserved:
            self._reserved = False
            _RESERVED.get(self.tools, set()).discard(self.name)

    def _on_added(self, payload: LifecyclePayload) -> None:
        provider = self.service.get_provider(self.config.provider)
        if getattr(payload, "name", None) == self.config.provider and provider is not None:
            self._unmount()
            self._mount(provider)

    def _on_removed(self, payload: LifecyclePayload) -> None:
        if getattr(payload, "name", None) == self.config.provider:
            self._unmount()

    def _unmount(self) -> None:
        for remove in reversed(self._mounted):
            remove()
        self._mounted = []

    def _mount(self, provider: SubagentProvider) -> None:
        """Check the provider, then register tool and section from its wording (TOOL-4)."""
        name = self.config.provider
        if isinstance(self.config.max_depth, int) and not provider.capabilities.depth_limit:
            raise SubagentError(
                ErrorCode.UNSUPPORTED_CAPABILITY,
                f'tool-subagent: provider "{name}" cannot enforce maxDepth (no depthLimit '
                "capability) — set maxDepth: 'provider-managed' to leave the recursion budget "
                "to the provider",
                field="max_depth",
            )
        continuable = self.config.background_mode is BackgroundMode.CONTINUABLE
        if continuable and not can_prepare_continuable(provider):
            raise SubagentError(
                ErrorCode.UNSUPPORTED_CAPABILITY,
                f'tool-subagent: provider "{name}" does not support `backgroundMode: continuable`',
                field="background_mode",
            )
        self.description, self.schema = tool_wording(self.config, provider.inherits_parent_context)
        self._mounted.append(
            self.tools.register(Tool(self.name, self._handle, self.schema, self.description))
        )
        if continuable and self.config.enable_run_in_background and self.prompt is not None:
            section = self.prompt.section(
                f"tool:{self.name}", GUIDANCE_ORDER, guidance_text(self.name)
            )
            self._mounted.append(section)

    # ------------------------------------------------------------------ calls

    async def _handle(self, arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            return render_value(await self.call(require_caller(f"{self.name} tool"), args, signal))

        return await guarded(self.schema, arguments, signal, body)

    def _background(self, arguments: JsonObject) -> bool:
        """Route resolution (TOOL-17)."""
        flag = arguments.get("run_in_background")
        if not self.config.enable_run_in_background:
            if flag is True:
                raise ToolFailure(
                    "run_in_background is disabled for this tool instance "
                    "(enableRunInBackground: false)"
                )
            return False
        if isinstance(flag, bool):
            return flag
        return self.config.background_mode is BackgroundMode.CONTINUABLE

    def request(self, caller: Agent, arguments: JsonObject, signal: AbortSignal) -> StartRequest:
        """The one request every route builds (TOOL-18)."""
        config = self.config
        intent = SubagentIntent(
            (TextBlock(str(arguments["prompt"])),),
            max_depth=config.max_depth if isinstance(config.max_depth, int) else None,
            tool_filter=config.tool_filter,
            persona=config.persona,
            agent_options=config.agent_options,
        )
        label = str(arguments["description"])
        return StartRequest(intent, caller, signal, label=label, budget=config.budget)

    def _depth_error(self, caller: Agent, error: Exception) -> Exception:
        """Depth and capability refusals as fixed texts for the model (TOOL-26, TOOL-27)."""
        if not isinstance(error, SubagentError):
            return error
        if error.code is ErrorCode.UNSUPPORTED_CAPABILITY and error.field in CAPABILITY_ORDER:
            return SubagentError(
                error.code,
                f'subagent provider "{self.config.provider}" does not support the '
                f'"{error.field}" capability',
                field=error.field,
                cause=error,
            )
        if error.code is not ErrorCode.DEPTH_LIMIT_EXCEEDED:
            return error
        child = delegation_depth_of(caller.session.header, caller.options) + 1
        text = (
            f"subagent depth {child} exceeds maxDepth {self.config.max_depth}"
            if child <= MAX_DEPTH
            else "subagent child depth exceeds the safe-integer range"
        )
        return SubagentError(error.code, text, field=error.field, cause=error)

    async def call(
        self, caller: Agent, arguments: JsonObject, signal: AbortSignal
    ) -> SubagentValue:
        """Run one call for ``caller``; failures raise with the model-facing message."""
        with self.service.tracing.tool_call(self.name, caller.id):  # OBS-2
            try:
                return await self._route(caller, arguments, signal)
            except Exception as error:
                raise self._depth_error(caller, error) from error

    async def _route(
        self, caller: Agent, arguments: JsonObject, signal: AbortSignal
    ) -> SubagentValue:
        if not self._background(arguments):
            return await self._foreground(self.request(caller, arguments, signal))
        if self.config.background_mode is BackgroundMode.CONTINUABLE:
            request = self.request(caller, arguments, signal)
            started = await self.service.start_continuable(
                ContinuableStartSpec(
                    self.config.provider,
                    request.label or "",
                    caller,
                    request.intent,
                    signal=signal,
                    budget=request.budget,
                )
            )
            return ContinuableValue(started.child_id)
        return self._start_job(caller, arguments)

    async def _foreground(self, request: StartRequest) -> ForegroundValue:
        """Start, await the result, always dispose, then decide (TOOL-19, TOOL-20)."""
        run = await self.service.start(self.config.provider, request)
        result: SubagentResult | None = None
        result_error: BaseException | None = None
        try:
            result = await run.result
        except Exception as error:
            result_error = error
        dispose_error: BaseException | None = None
        try:
            await run.dispose()
        except Exception as error:
            dispose_error = error
        if result is not None and result.stop_reason is not KnownStop.COMPLETED:
            result_error = ToolFailure(failure_message(result))
        if result_error is not None and dispose_error is not None:
            raise ToolFailure(
                f"subagent run failed: {message_of(result_error)}; "
                f"dispose failed: {message_of(dispose_error)}"
            )
        failure = result_error or dispose_error
        if failure is not None:
            raise failure
        assert result is not None  # no failure means the result resolved
        return ForegroundValue(run.id, result.output)

    def _start_job(self, caller: Agent, arguments: JsonObject) -> BackgroundValue:
        """Register the task first; its starter owns a fresh signal (BG-1..8)."""
        jobs = self.jobs
        if jobs is None:
            raise ToolFailure(
                "background tasks unavailable: this subagent tool has no task registry "
                "(give it jobs=JobRegistry(...))"
            )
        label = str(arguments["description"])

        def starter() -> JobHooks:
            controller = AbortController()
            request = self.request(caller, arguments, controller.signal)
            with self.service.tracing.background():  # the run links to this call (OBS-2)
                startup = asyncio.ensure_future(self.service.start(self.config.provider, request))

            async def done() -> JobOutcome:
                try:
                    run = await startup
                except Exception as error:
                    if controller.signal.aborted and not isinstance(error, ExceptionGroup):
                        return JobOutcome(JobStatus.KILLED)
                    detail = render_exception(self._depth_error(caller, error))
                    return JobOutcome(JobStatus.FAILED, detail=detail)
                return await settle_run(run)

            return JobHooks(controller.abort, done())

        return BackgroundValue(jobs.start("subagent", label, caller, starter))


__all__ = ["SubagentTool"]
