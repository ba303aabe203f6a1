"""The child-scoped ``report`` tool of continuable children.

Theory of operation
-------------------
1. ``ReportTool.install()`` registers one continuable-setup contribution with the service
   (REPORT-1). A contribution sees only the child's unpublished scope, so it records the scope
   as pending; when the agent registry announces the agent owning that scope, the tool and
   the ``tool:report`` section (order 117) are registered in that agent's own layers. Being
   child-local, the tool survives the child's tool filter. Roots, one-shot children and
   siblings never get it. The contribution's disposer (a revoked registration or the child's
   release) removes both from the child at once.
2. The tool is bound to its child: the child itself is the credential (REPORT-4). A call
   relays ``output`` through ``service.report_from_durably`` (it returns once the report
   is stored, DUR-1) with the configured delivery, ``next-step`` (default) or ``quiet``
   (REPORT-2, REPORT-6); the service frames it
   ``Background subagent <id> reported:`` (REPORT-5) and orders it before the settlement
   notice on the same lane (REPORT-8). The answer names the accepted message id (REPORT-7).
3. A refusal is answered as one fixed line per error code, naming the child and saying
   whether the report was delivered (``direct parent is not live; report was not
   delivered``).
"""

from __future__ import annotations

from typing import Final

from dsh_subagent.adapters.protocols import Agent, AgentRegistry, Tool, ToolOutcome
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortSignal, Scope, Unsubscribe
from dsh_subagent.adapters.tools.control import DRAINING_TEXT
from dsh_subagent.adapters.tools.schemas import Wording, guarded, parameters, translate
from dsh_subagent.core.errors import ErrorCode, invalid
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import JsonObject, TextBlock

REPORT_SECTION: Final = "tool:report"
REPORT_SECTION_ORDER: Final = 117
REPORT_GUIDANCE: Final = (
    "Deliver your result with the report tool before you finish: call it once with a "
    "self-contained answer. The agent that started you shares your workspace but does not "
    "automatically receive your transcript, tool output, or reasoning, so a closing remark "
    'such as "done" leaves it nothing it can use. Report earlier as well whenever a partial '
    "finding changes what that agent should do next; reporting never ends your turn."
)
REPORT_SCHEMA: Final = parameters(
    {
        "output": {
            "type": "string",
            "description": "Actionable content for the agent that started you: summarize "
            "conclusions and reference shared paths rather than pasting them.",
        }
    },
    ["output"],
)
REPORT_DESCRIPTION: Final = (
    "Report selected content to the agent that started you. Call it once before you finish "
    "with a self-contained final result, and earlier for any finding that changes what that "
    "agent should do next. It shares your workspace but not your transcript, tool output or "
    "reasoning, so finishing is not itself a result. Reporting does not end your turn. Only "
    "your direct parent receives it. A failed call may still have arrived: do not blindly "
    "repeat it."
)


def _report_wording(child_id: str) -> Wording:
    return {
        (ErrorCode.UNAUTHORIZED, None): (
            f'agent "{child_id}" is not a live continuable subagent and cannot report'
        ),
        (ErrorCode.ACTIVATION_CLOSING, None): (
            f'subagent "{child_id}" activation is being disposed; the report was not delivered'
        ),
        (ErrorCode.PARENT_UNAVAILABLE, None): "direct parent is not live; report was not delivered",
        (ErrorCode.DRAINING, None): DRAINING_TEXT,
    }


class ReportTool:
    """Installs ``report`` into every continuable child (rule 1)."""

    def __init__(
        self,
        service: SubagentService,
        agents: AgentRegistry,
        delivery: ReportDelivery = ReportDelivery.NEXT_STEP,
    ) -> None:
        if not isinstance(delivery, ReportDelivery):
            raise invalid("delivery", "must be a ReportDelivery (next-step or quiet)")
        self.service = service
        self.agents = agents
        self.delivery = delivery
        self._pending: dict[int, list[Unsubscribe]] = {}

    def install(self) -> Unsubscribe:
        """Contribute ``report`` to future Activations; the disposer revokes it everywhere."""
        unsubscribe = self.agents.created.subscribe(self._on_created)
        unregister = self.service.register_continuable_setup(self._contribute)

        def uninstall() -> None:
            unregister()
            unsubscribe()

        return uninstall

    def _contribute(self, scope: Scope) -> Unsubscribe:
        removers: list[Unsubscribe] = []
        key = id(scope)
        self._pending[key] = removers

        def release() -> None:
            if self._pending.get(key) is removers:
                del self._pending[key]
            while removers:
                removers.pop()()

        return release

    def _on_created(self, agent: Agent) -> None:
        removers = self._pending.pop(id(agent.ctx), None)
        if removers is None:
            return
        removers.append(agent.tools.register(self.tool_for(agent)))
        removers.append(agent.prompt.section(REPORT_SECTION, REPORT_SECTION_ORDER, REPORT_GUIDANCE))

    def tool_for(self, child: Agent) -> Tool:
        """The ``report`` tool bound to ``child`` (rule 2)."""

        async def report(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
            async def body(args: JsonObject) -> str:
                try:
                    message_id = await self.service.report_from_durably(
                        child,
                        (TextBlock(str(args["output"])),),
                        delivery=self.delivery,
                        signal=signal,
                    )
                except Exception as error:
                    raise translate(error, _report_wording(child.id)) from error
                return f"report accepted by the agent that started you as message {message_id}"

            return await guarded(REPORT_SCHEMA, arguments, signal, body)

        return Tool("report", report, REPORT_SCHEMA, REPORT_DESCRIPTION)


__all__ = ["REPORT_GUIDANCE", "ReportTool"]
