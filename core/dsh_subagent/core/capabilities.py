"""Start-request admission: capability check, then validation of every pure field.

Theory of operation
-------------------
1. A one-shot start checks capabilities first, in the fixed order outputSchema, depthLimit
   (``max_depth``), toolFilter, persona; only the first requested field whose flag is false
   is reported, as ``UNSUPPORTED_CAPABILITY`` (CAP-1, CAP-2, ERR-3a).
2. A field is *requested* when present (not ``None``), however empty it looks: ``""``,
   ``ToolFilter(allow=())`` and ``max_depth=0`` all need their capability (CAP-3).
3. Semantic validation runs only after the capability check (CAP-4), in the order of ONE-2:
   ``max_depth``'s domain, the output schema's shape, then the remaining fields. Each failure
   is ``INVALID_ARGUMENT`` naming the field (``request.tool_filter.allow[2]``).
4. Output schema: only the shape is checked here (a lossless-JSON mapping rooted at
   ``type: "object"``, within the ``Limits``); the JSON Schema subset is an adapter concern.
5. A persona may be the empty string: it still shadows the deployment persona (POLICY-7).
   Labels, tool names, and agent provider/model names must be non-empty; labels, prompts
   and schemas are held to the service's ``Limits`` (``core.limits``).
6. A tool filter declares ``allow`` and/or ``deny`` (the persisted form requires one, DESC-6),
   each a tuple of distinct non-empty names.
7. The continuable capability is the presence of a preparation method, passed in as a flag;
   its absence is ``UNSUPPORTED_CAPABILITY`` (CAP-5). Continuable starts never consult the
   four flags (CAP-6): they call the same field validators (``validate_intent``) only.
8. Both kinds of start carry one ``SubagentIntent`` (prompt, depth cap, tool filter, persona,
   agent options); the one-shot adds its optional label and output schema, the continuable
   start its provider, required label and reserved id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from dsh_subagent.core.depth import validate_depth, validate_max_depth
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_int, require_str
from dsh_subagent.core.limits import (
    DEFAULT_LIMITS,
    Limits,
    check_content,
    check_label,
    check_schema_value,
)
from dsh_subagent.core.values import (
    AgentOptions,
    Content,
    JsonObject,
    SubagentCapabilities,
    SubagentIntent,
    SubagentStartRequest,
    ToolFilter,
)

CAPABILITY_ORDER: Final = ("outputSchema", "depthLimit", "toolFilter", "persona")
"""The capability names in the order ``check_capabilities`` reports them (CAP-2)."""


def first_missing_capability(
    request: SubagentStartRequest, caps: SubagentCapabilities
) -> str | None:
    """The first requested capability ``caps`` lacks, in ``CAPABILITY_ORDER``, else ``None``.

    post: __return__ is None or __return__ in CAPABILITY_ORDER
    """
    intent = request.intent
    requested = (
        (request.output_schema is not None, caps.output_schema),
        (intent.max_depth is not None, caps.depth_limit),
        (intent.tool_filter is not None, caps.tool_filter),
        (intent.persona is not None, caps.persona),
    )
    for name, (wanted, supported) in zip(CAPABILITY_ORDER, requested, strict=True):
        if wanted and not supported:
            return name
    return None


def check_capabilities(request: SubagentStartRequest, caps: SubagentCapabilities) -> None:
    """Raise ``UNSUPPORTED_CAPABILITY`` naming the first requested, unsupported capability.

    raises: SubagentError
    """
    missing = first_missing_capability(request, caps)
    if missing is not None:
        raise SubagentError(
            ErrorCode.UNSUPPORTED_CAPABILITY,
            f"the provider does not support the {missing} capability",
            field=missing,
        )


def check_continuable_capability(provider: str, *, can_prepare: bool) -> None:
    """Raise ``UNSUPPORTED_CAPABILITY`` unless the provider can prepare continuable children.

    raises: SubagentError
    """
    if not can_prepare:
        raise SubagentError(
            ErrorCode.UNSUPPORTED_CAPABILITY,
            f"provider {provider!r} cannot prepare continuable children",
            field="provider",
        )


def validate_output_schema(
    schema: object, field: str = "request.output_schema", limits: Limits = DEFAULT_LIMITS
) -> None:
    """Check the shape of an output schema: a lossless-JSON object with ``type: "object"``.

    raises: SubagentError
    """
    if not isinstance(schema, Mapping):
        raise invalid(field, "must be a JSON object")
    check_schema_value(schema, field, limits)
    if schema.get("type") != "object":
        raise invalid(f"{field}.type", 'the schema must be object-rooted (type: "object")')


def validate_tool_names(names: object, field: str) -> tuple[str, ...]:
    """Return ``names`` as a tuple of distinct non-empty names (detached from the caller).

    raises: SubagentError
    """
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise invalid(field, "must be a sequence of tool names")
    checked: dict[str, None] = {}
    for index, name in enumerate(names):
        text = require_str(name, f"{field}[{index}]", non_empty=True)
        if text in checked:
            raise invalid(f"{field}[{index}]", f"duplicate tool name {text!r}")
        checked[text] = None
    return tuple(checked)


def validate_tool_filter(tool_filter: object, field: str = "request.tool_filter") -> ToolFilter:
    """Return a detached, validated copy of ``tool_filter`` (rule 6).

    raises: SubagentError
    """
    if not isinstance(tool_filter, ToolFilter):
        raise invalid(field, "must be a ToolFilter")
    if tool_filter.allow is None and tool_filter.deny is None:
        raise invalid(field, "must declare allow and/or deny")
    allow = deny = None
    if tool_filter.allow is not None:
        allow = validate_tool_names(tool_filter.allow, f"{field}.allow")
    if tool_filter.deny is not None:
        deny = validate_tool_names(tool_filter.deny, f"{field}.deny")
    return ToolFilter(allow=allow, deny=deny)


def validate_agent_options(options: object, field: str = "request.agent_options") -> None:
    """Check the agent options the seam reads: names non-empty, counts in their domain.

    raises: SubagentError
    """
    if not isinstance(options, AgentOptions):
        raise invalid(field, "must be AgentOptions")
    if options.provider is not None:
        require_str(options.provider, f"{field}.provider", non_empty=True)
    if options.model is not None:
        require_str(options.model, f"{field}.model", non_empty=True)
    if options.max_tokens is not None:
        require_int(options.max_tokens, f"{field}.max_tokens", minimum=1)
    if options.subagent_depth is not None:
        validate_depth(options.subagent_depth, f"{field}.subagent_depth")


def validate_prompt(
    prompt: object, field: str = "request.prompt", limits: Limits = DEFAULT_LIMITS
) -> Content:
    """Check a prompt: content blocks, lossless JSON, not blank, within the limits.

    raises: SubagentError
    """
    return check_content(prompt, field, limits)


def validate_intent(
    intent: SubagentIntent, prefix: str, limits: Limits, *, label: object = None
) -> None:
    """Check the intent both kinds of start share, each field named under ``prefix``;
    a one-shot's optional ``label`` is checked right after the prompt (ONE-2).

    ``max_depth``'s domain is not checked here: it comes first (ONE-2).

    raises: SubagentError
    """
    validate_prompt(intent.prompt, f"{prefix}.prompt", limits)
    if label is not None:
        check_label(label, f"{prefix}.label", limits)
    if intent.tool_filter is not None:
        validate_tool_filter(intent.tool_filter, f"{prefix}.tool_filter")
    if intent.persona is not None:
        require_str(intent.persona, f"{prefix}.persona")
    if intent.agent_options is not None:
        validate_agent_options(intent.agent_options, f"{prefix}.agent_options")


def validate_start_request(request: SubagentStartRequest, limits: Limits = DEFAULT_LIMITS) -> None:
    """Validate every field that can be validated purely, in the order of ONE-2 (rule 3).

    raises: SubagentError
    """
    validate_max_depth(request.intent.max_depth)
    if request.output_schema is not None:
        validate_output_schema(request.output_schema, limits=limits)
    require_str(request.parent.session_id, "request.parent.session_id", non_empty=True)
    validate_depth(request.parent.delegation_depth, "request.parent.delegation_depth")
    validate_agent_options(request.parent.options, "request.parent.options")
    validate_intent(request.intent, "request", limits, label=request.label)


def admit_start_request(
    request: SubagentStartRequest,
    caps: SubagentCapabilities,
    limits: Limits = DEFAULT_LIMITS,
    check_schema: Callable[[JsonObject], object] | None = None,
) -> None:
    """The one-shot start's admission in the order of ONE-2: capabilities (CAP-4), the
    ``max_depth`` domain, the output schema (``check_schema`` is the adapter's JSON Schema
    check, run once the pure shape check passed), then every other field.

    raises: SubagentError
    """
    check_capabilities(request, caps)
    validate_max_depth(request.intent.max_depth)
    if request.output_schema is not None and check_schema is not None:
        validate_output_schema(request.output_schema, limits=limits)
        check_schema(request.output_schema)
    validate_start_request(request, limits)


__all__ = [
    "CAPABILITY_ORDER",
    "admit_start_request",
    "check_capabilities",
    "check_continuable_capability",
    "first_missing_capability",
    "validate_agent_options",
    "validate_intent",
    "validate_output_schema",
    "validate_prompt",
    "validate_start_request",
    "validate_tool_filter",
    "validate_tool_names",
]
