"""The control tools: ``send_message``, ``interrupt_agent`` and ``list_agents``.

Theory of operation
-------------------
1. Each tool needs its calling agent (CTRL-2) and holds no authority of its own: the service
   decides, and the tool rewords the service's refusals as fixed one-line texts for the model
   (CTRL-7, CTRL-9).
2. ``send_message`` follows up the child as the caller's ``ParentAgent`` with the coordinator
   source naming the caller (CTRL-4); the caller's signal owns the call until the inbox
   accepts it. It answers ``message queued as the next turn for subagent <id>`` (CTRL-6).
3. ``interrupt_agent`` interrupts as the caller's ``AncestorAuthority``; an absent or settled
   target is an accepted no-op, answered like any accepted request (CTRL-9..11).
4. ``list_agents`` lists the caller's continuable children, or all continuable descendants in
   stable pre-order; one-shot rows are dropped, diagnostics kept. Status comes from the live
   agent registry: absent -> ``ready``, running -> ``running``, else ``idle`` (CTRL-12..15).
   A child with an open budget ends its line with what it has left (BUDGET-16).
"""

from __future__ import annotations

from typing import Final

import attrs

from dsh_subagent.adapters.continuation_types import AncestorAuthority, ParentAgent
from dsh_subagent.adapters.protocols import AgentStatus, Tool, ToolHost, ToolOutcome
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortSignal, Unsubscribe
from dsh_subagent.adapters.tools.calling import require_caller
from dsh_subagent.adapters.tools.schemas import Wording, guarded, parameters, translate
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.listing import ChildRow, DescendantRow, ListingDiagnostic, ListingRow
from dsh_subagent.core.values import CoordinatorSource, JsonObject, Mode, SessionId, TextBlock

DRAINING_TEXT: Final = "continuable subagents are draining; the operation was not admitted"
NO_SUBAGENTS: Final = "(no subagents)"

SEND_SCHEMA: Final = parameters(
    {
        "subagent_id": {
            "type": "string",
            "description": "The id returned when the background subagent was started.",
        },
        "message": {"type": "string", "description": "The message to deliver."},
    },
    ["subagent_id", "message"],
)
SEND_DESCRIPTION: Final = (
    "Send a message to one of your background subagents by id, continuing the same "
    "conversation. The message becomes the subagent's next turn: if it is still working, the "
    "message waits until the current turn finishes and cannot redirect it. Nothing is "
    "answered here except the delivery confirmation; the subagent's reply arrives later. A "
    "failure means the message was NOT delivered."
)
INTERRUPT_SCHEMA: Final = parameters(
    {
        "agent_id": {
            "type": "string",
            "description": "The id of the running agent to interrupt: a subagent you started "
            "or one of its descendants.",
        }
    },
    ["agent_id"],
)
INTERRUPT_DESCRIPTION: Final = (
    "Request cancellation of a background agent's current turn. The target may be a direct "
    "subagent or a deeper descendant. Only the current turn stops: queued messages stay "
    "parked until a later send_message, agents it started keep running, and the agent stays "
    "available. Returns once the stop request is accepted (the target may keep running "
    "briefly); interrupting a finished agent is accepted and does nothing."
)
LIST_SCHEMA: Final = parameters(
    {
        "scope": {
            "type": "string",
            "enum": ["children", "descendants"],
            "description": "children (default): your direct subagents; descendants: the "
            "whole tree below you.",
        }
    }
)
LIST_DESCRIPTION: Final = (
    "List your continuable background subagents by durable id and label, to recall what you "
    "started; do not poll with it, you are told when one finishes. Status: running (working "
    "on a turn), idle (resident between turns, maybe waiting on its own subagents) or ready "
    "(stored only; resumable, not terminal, no result waiting). A direct subagent stays a "
    "send_message candidate in every status; the listing is a snapshot, not a delivery "
    "promise. Unreadable subagents appear as diagnostics. With scope descendants the whole "
    "tree is listed in stable pre-order with each entry's direct parent and depth; only "
    "depth 1 entries may receive send_message, deeper ones only interrupt_agent."
)


def _send_wording(child_id: str) -> Wording:
    closing = f'subagent "{child_id}" activation is being disposed; the message was not accepted'
    foreign = f'subagent "{child_id}" belongs to another parent session'
    return {
        (ErrorCode.UNAUTHORIZED, "child belongs to another parent session"): foreign,
        (ErrorCode.UNAUTHORIZED, "not the child's durable direct parent"): foreign,
        (ErrorCode.UNAUTHORIZED, None): (
            f'subagent "{child_id}" delivery requires the exact live parent agent'
        ),
        (ErrorCode.ACTIVATION_CLOSING, None): closing,
        (ErrorCode.NOT_RESUMABLE, f"child {child_id} is unavailable"): (
            f'subagent "{child_id}" is unavailable'
        ),
        (ErrorCode.NOT_RESUMABLE, None): (
            f'subagent "{child_id}" has no supported continuation state and cannot be resumed; '
            "do not retry send_message with this id"
        ),
        (ErrorCode.DRAINING, None): DRAINING_TEXT,
    }


def _interrupt_wording(caller_id: str, target_id: str) -> Wording:
    return {
        (ErrorCode.UNAUTHORIZED, "exact live caller required"): (
            f'interrupting "{target_id}" requires the exact live ancestor agent'
        ),
        (ErrorCode.UNAUTHORIZED, "an agent cannot interrupt itself"): (
            f'agent "{caller_id}" cannot interrupt itself'
        ),
        (ErrorCode.UNAUTHORIZED, None): (
            f'subagent "{target_id}" is not a live descendant of agent "{caller_id}"'
        ),
    }


_LIST_WORDING: Final[Wording] = {(ErrorCode.CANCELLED, None): "subagent listing was cancelled"}


def _position(parent: SessionId | None, depth: int | None) -> str:
    return "" if parent is None else f" parent={parent} depth={depth}"


def render_entry(
    row: ListingRow, status: str, parent: SessionId | None = None, depth: int | None = None
) -> str:
    """One ``list_agents`` line (CTRL-15)."""
    where = _position(parent, depth)
    if isinstance(row, ListingDiagnostic):
        return f"{row.child_id} [diagnostic: {row.kind.value}]{where}"
    left = "" if row.budget is None else _budget_text(row.budget)
    return f"{row.id} [{status}]{where} — {row.label or ''}{left}"


def _budget_text(left: Budget) -> str:
    """`` (budget left: model_requests=2 output_tokens=90)``, capped dimensions only."""
    parts = [f"{name}={value}" for name, value in attrs.asdict(left).items() if value is not None]
    return f" (budget left: {' '.join(parts)})" if parts else ""


class ControlTools:
    """The three control tools over one service (rules 1-4)."""

    def __init__(self, service: SubagentService) -> None:
        self.service = service

    async def send_message(self, arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            caller = require_caller("send_message")
            child_id = SessionId(str(args["subagent_id"]))
            try:
                await self.service.followup(
                    child_id,
                    (TextBlock(str(args["message"])),),
                    ParentAgent(caller),
                    source=CoordinatorSource(caller.id),
                    signal=signal,
                )
            except Exception as error:
                raise translate(error, _send_wording(child_id)) from error
            return f"message queued as the next turn for subagent {child_id}"

        return await guarded(SEND_SCHEMA, arguments, signal, body)

    async def interrupt_agent(self, arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            caller = require_caller("interrupt_agent")
            target = SessionId(str(args["agent_id"]))
            try:
                self.service.interrupt(target, AncestorAuthority(caller))
            except Exception as error:
                raise translate(error, _interrupt_wording(caller.id, target)) from error
            return f"interrupt requested for agent {target}"

        return await guarded(INTERRUPT_SCHEMA, arguments, signal, body)

    def _status(self, child_id: SessionId) -> str:
        agents = self.service.agents
        agent = None if agents is None else agents.get(child_id)
        if agent is None:
            return "ready"
        return "running" if agent.status is AgentStatus.RUNNING else "idle"

    def _keep(self, row: ListingRow) -> bool:
        return isinstance(row, ListingDiagnostic) or row.mode is Mode.CONTINUABLE

    async def list_agents(self, arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            caller = require_caller("list_agents")
            try:
                if args.get("scope") == "descendants":
                    rows = await self.service.list_descendants(caller.id, signal=signal)
                    lines = [self._line(d.row, d) for d in rows if self._keep(d.row)]
                else:
                    children = await self.service.list_children(caller.id, signal=signal)
                    lines = [self._line(row) for row in children if self._keep(row)]
            except Exception as error:
                raise translate(error, _LIST_WORDING) from error
            return "\n".join(lines) or NO_SUBAGENTS

        return await guarded(LIST_SCHEMA, arguments, signal, body)

    def _line(self, row: ListingRow, position: DescendantRow | None = None) -> str:
        status = self._status(row.id) if isinstance(row, ChildRow) else ""
        if position is None:
            return render_entry(row, status)
        return render_entry(row, status, position.parent_id, position.depth)

    def tools(self) -> tuple[Tool, ...]:
        return (
            Tool("send_message", self.send_message, SEND_SCHEMA, SEND_DESCRIPTION),
            Tool("interrupt_agent", self.interrupt_agent, INTERRUPT_SCHEMA, INTERRUPT_DESCRIPTION),
            Tool("list_agents", self.list_agents, LIST_SCHEMA, LIST_DESCRIPTION),
        )

    def register(self, tools: ToolHost) -> Unsubscribe:
        """Register the three tools globally (CTRL-1); the disposer removes them."""
        removers = [tools.register(tool) for tool in self.tools()]

        def remove() -> None:
            for remover in reversed(removers):
                remover()

        return remove


__all__ = ["DRAINING_TEXT", "ControlTools", "render_entry"]
