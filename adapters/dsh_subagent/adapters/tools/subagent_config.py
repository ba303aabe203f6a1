"""Configuration, wording and result values of the ``subagent`` tool.

Theory of operation
-------------------
1. ``SubagentToolConfig`` is validated whole at construction, before anything is registered
   (TOOL-6, TOOL-7): ``max_depth`` defaults to 3, 0 forbids delegation, ``provider-managed``
   sends no cap; an empty ``tool_filter`` and a bad depth fail ``INVALID_ARGUMENT`` naming
   the setting. A ``budget`` is the ceiling every child of the instance asks for (the model
   has no parameter to raise it).
2. ``tool_wording`` derives the description and the parameter schema from the provider's
   ``inherits_parent_context`` and the background settings (TOOL-9..12); a few phrases in it
   are fixed, because models and hosts rely on them. ``guidance_text`` is the continuable
   instance's ``tool:<name>`` prompt section (TOOL-14).
3. A successful call is one of three values (TOOL-13): ``ForegroundValue`` renders as the
   child's concatenated text, ``BackgroundValue`` as ``started background subagent task <id>``,
   ``ContinuableValue`` as ``started subagent <id>``. ``failure_message`` words a non-completed
   result: headline and optional diagnostic (TOOL-21/22). A failure carries no assistant
   text, so partial output of a failed run never reaches the model as if it were a result.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, TypeAlias

import attrs

from dsh_subagent.adapters.budgets import check_budget
from dsh_subagent.adapters.tools.jobs import output_text
from dsh_subagent.adapters.tools.schemas import parameters
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.depth import MAX_DEPTH
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.values import (
    AgentOptions,
    JsonObject,
    JsonValue,
    KnownStop,
    SubagentResult,
    ToolFilter,
    stop_reason_text,
)

PROVIDER_MANAGED: Final = "provider-managed"
MaxDepth: TypeAlias = int | Literal["provider-managed"]
GUIDANCE_ORDER: Final = 116
"""The catalog's 116.5 (after bounded delegation, before ``tool:report`` at 117); sections
here have integer orders, and ties sort by name, so 116 keeps the same relative place."""


class BackgroundMode(enum.Enum):
    """What ``run_in_background`` starts, and its default (TOOL-6)."""

    ONE_SHOT = "one-shot"
    CONTINUABLE = "continuable"


def config_error(field: str, message: str) -> SubagentError:
    return SubagentError(ErrorCode.INVALID_ARGUMENT, message, field=field)


def _check_max_depth(value: object) -> MaxDepth:
    if value == PROVIDER_MANAGED:
        return PROVIDER_MANAGED
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DEPTH:
        raise config_error("max_depth", "subagent maxDepth must be a non-negative safe integer")
    return value


def _check_tool_filter(value: object) -> ToolFilter | None:
    if value is None:
        return None
    if not isinstance(value, ToolFilter):
        raise invalid("tool_filter", "must be a ToolFilter")
    if value.allow is None and value.deny is None:
        raise config_error(
            "tool_filter",
            "tool-subagent: `toolFilter` is configured but names neither `allow` nor `deny` — "
            "remove the key or fill the filter",
        )
    return value


@attrs.frozen
class SubagentToolConfig:
    """One tool instance's configuration (TOOL-6); construction validates it (rule 1)."""

    provider: str
    tool_name: str = "subagent"
    enable_run_in_background: bool = True
    background_mode: BackgroundMode = BackgroundMode.ONE_SHOT
    agent_options: AgentOptions | None = None
    persona: str | None = None
    tool_filter: ToolFilter | None = attrs.field(default=None, converter=_check_tool_filter)
    max_depth: MaxDepth = attrs.field(default=3, converter=_check_max_depth)
    budget: Budget | None = None
    """The budget every child this instance starts asks for: a ceiling set by the host, not
    a parameter the model sees (BUDGET-12)."""

    def __attrs_post_init__(self) -> None:
        for field in ("provider", "tool_name"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value:
                raise invalid(field, "must be a non-empty string")
        if not isinstance(self.enable_run_in_background, bool):
            raise invalid("enable_run_in_background", "must be a boolean")
        if not isinstance(self.background_mode, BackgroundMode):
            raise invalid("background_mode", "must be a BackgroundMode")
        options = self.agent_options
        if options is not None:
            if not isinstance(options, AgentOptions):
                raise invalid("agent_options", "must be AgentOptions")
            if options.max_tokens is not None and not (
                isinstance(options.max_tokens, int) and 1 <= options.max_tokens <= MAX_DEPTH
            ):
                raise invalid("agent_options.max_tokens", "must be a positive safe integer")
        if self.persona is not None and not isinstance(self.persona, str):
            raise invalid("persona", "must be a string")
        check_budget(self.budget, "budget")


# --------------------------------------------------------------------------- wording

FRESH_DESCRIPTION: Final = (
    "Delegate a self-contained task to a separate agent that works in its own context. Use it "
    "to offload focused, independent work (research, a scoped implementation, an analysis) "
    "without consuming this conversation's context. It returns its result, not its "
    "intermediate steps. Give it a complete, standalone prompt: it does not see this "
    "conversation."
)
FRESH_PROMPT: Final = (
    "The complete, self-contained task. The subagent does not share this conversation's "
    "context, so include everything it needs."
)
INHERITING_DESCRIPTION: Final = (
    "Delegate to a subagent that inherits this conversation: it starts with every completed "
    "turn so far, but not the turn in progress. Use it when the subtask builds on this "
    "conversation (a follow-up analysis, a review, a continuation) without consuming this "
    "conversation's context. You receive its result, not its intermediate steps."
)
INHERITING_PROMPT: Final = (
    "The task. The subagent already sees this conversation's completed turns: build on them "
    "and state only what is new."
)
LABEL_PARAMETER: Final = (
    "A short (3-5 word) description of the task; it becomes the subagent's label."
)
CONTINUABLE_SUFFIX: Final = (
    "It runs in the background by default: the call returns a durable subagent id at once and "
    "the child conversation stays available for later turns. When the run settles, the "
    "runtime sends you a notice with its outcome and any final assistant message. Use "
    "send_message to start a later turn in the same child conversation. Set "
    "run_in_background: false only when your next action depends on the result."
)
CONTINUABLE_PARAMETER: Final = (
    "Whether to run in the background and return a durable subagent id immediately. Defaults "
    "to true; set false to wait for the result when your next action depends on it."
)
ONE_SHOT_SUFFIX: Final = (
    "The call waits for the result by default; set run_in_background: true to start a "
    "background task and get its id instead. Collect it with task_output or stop it with "
    "task_kill."
)
ONE_SHOT_PARAMETER: Final = (
    "Whether to run as a background task and return its id. Defaults to false; collect it "
    "with task_output or stop it with task_kill."
)
FOREGROUND_SUFFIX: Final = "The call waits for the subagent and returns its result."


def guidance_text(tool_name: str) -> str:
    """The ``tool:<name>`` prompt section of a continuable instance (TOOL-14, A-3)."""
    return (
        f"Use {tool_name} in the background by default. Start independent delegations "
        "together in one assistant message and continue useful work while they run. Set "
        "`run_in_background: false` only when your next action depends on that subagent's "
        "result. When a background run settles, the runtime sends you a notice containing "
        "its outcome and any final assistant message."
    )


def tool_wording(
    config: SubagentToolConfig, inherits_parent_context: bool
) -> tuple[str, JsonObject]:
    """The description and parameter schema the model sees (TOOL-9..12)."""
    base, prompt = (
        (INHERITING_DESCRIPTION, INHERITING_PROMPT)
        if inherits_parent_context
        else (FRESH_DESCRIPTION, FRESH_PROMPT)
    )
    properties: dict[str, JsonObject] = {
        "description": {"type": "string", "description": LABEL_PARAMETER},
        "prompt": {"type": "string", "description": prompt},
    }
    if not config.enable_run_in_background:
        suffix = FOREGROUND_SUFFIX
    elif config.background_mode is BackgroundMode.CONTINUABLE:
        suffix = CONTINUABLE_SUFFIX
        properties["run_in_background"] = {"type": "boolean", "description": CONTINUABLE_PARAMETER}
    else:
        suffix = ONE_SHOT_SUFFIX
        properties["run_in_background"] = {"type": "boolean", "description": ONE_SHOT_PARAMETER}
    return f"{base} {suffix}", parameters(properties, ["description", "prompt"])


# --------------------------------------------------------------------------- values


@attrs.frozen
class ForegroundValue:
    """``{kind: foreground, run_id, output}`` (TOOL-13)."""

    run_id: str
    output: tuple[JsonValue, ...]


@attrs.frozen
class BackgroundValue:
    """``{kind: background, task_id}`` (seed 003)."""

    task_id: str


@attrs.frozen
class ContinuableValue:
    """``{kind: continuable, subagent_id}`` (TOOL-13)."""

    subagent_id: str


SubagentValue: TypeAlias = ForegroundValue | BackgroundValue | ContinuableValue


def render_value(value: SubagentValue) -> str:
    """The text the model sees for a successful call (TOOL-23, BG-3, BG-20)."""
    match value:
        case ForegroundValue(output=output):
            return output_text(output)
        case BackgroundValue(task_id=task_id):
            return f"started background subagent task {task_id}"
        case ContinuableValue(subagent_id=subagent_id):
            return f"started subagent {subagent_id}"


def value_json(value: SubagentValue) -> JsonObject:
    """The canonical JSON value of a call's result (TOOL-13)."""
    match value:
        case ForegroundValue(run_id=run_id, output=output):
            return {"kind": "foreground", "run_id": run_id, "output": list(output)}
        case BackgroundValue(task_id=task_id):
            return {"kind": "background", "task_id": task_id}
        case ContinuableValue(subagent_id=subagent_id):
            return {"kind": "continuable", "subagent_id": subagent_id}


_HEADLINES: Final = {
    KnownStop.ABORTED: "subagent run was cancelled",
    KnownStop.ERROR: "subagent run failed",
    KnownStop.MAX_TOKENS: "subagent run hit its token limit before finishing",
    KnownStop.REFUSAL: "subagent declined the task",
    KnownStop.BUDGET_EXHAUSTED: "subagent run ran out of budget before finishing",
}


def failure_message(result: SubagentResult) -> str:
    """A non-completed result as the errored tool text, without ``Error: `` (TOOL-21/22).

    The result's output is never quoted: seed 003 ("errored tool results without partial
    output", DESIGN decision 8) over the catalog's ``Partial output before the run ended``.
    """
    reason = result.stop_reason
    headline = (
        _HEADLINES.get(reason, "") if isinstance(reason, KnownStop) else ""
    ) or f"subagent run ended abnormally ({stop_reason_text(reason)})"
    diagnostic = f"\nDiagnostic: {result.diagnostic}" if result.diagnostic else ""
    return headline + diagnostic


__all__ = [
    "GUIDANCE_ORDER",
    "PROVIDER_MANAGED",
    "BackgroundMode",
    "BackgroundValue",
    "ContinuableValue",
    "ForegroundValue",
    "MaxDepth",
    "SubagentToolConfig",
    "SubagentValue",
    "config_error",
    "failure_message",
    "guidance_text",
    "render_value",
    "tool_wording",
    "value_json",
]
