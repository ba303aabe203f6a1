"""Shared plumbing of the model-facing tools: schemas, argument checks, rendering errors.

Theory of operation
-------------------
1. Parameters compile to ``{type: object, properties, required}`` with no
   ``additionalProperties: false``: undeclared keys pass (C-5). ``check_arguments`` validates
   with ``jsonschema`` and fails before the body with ``invalid arguments: <v1>; <v2>``.
2. A tool body raises; ``guarded`` turns any exception into an errored result the model reads
   as ``Error: <message>`` (C-3): a ``SubagentError`` contributes its message without the
   code, anything else its ``str``. A signal already aborted before the body never runs it
   (``tool call aborted before dispatch``); a success whose signal aborted meanwhile becomes
   ``tool call aborted`` (C-4).
3. ``ToolFailure`` is the tools' own error for texts that must reach the model verbatim.
4. ``translate`` rewords a service error for the model from a table keyed by ``(code,
   reason)`` with ``(code, None)`` as the fallback; an error not in the table passes through.
5. ``render_exception`` is the JavaScript-like ``<Name>: <message>`` form used in stored
   details (C-3), e.g. ``SubagentError: subagent depth 4 exceeds maxDepth 3``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

import jsonschema

from dsh_subagent.adapters.protocols import ABORTED_BEFORE_DISPATCH, ToolOutcome
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import JsonObject, JsonValue, TextBlock

ABORTED_AFTER_SUCCESS: Final = "tool call aborted"


class ToolFailure(Exception):
    """A tool error whose message the model sees verbatim after ``Error: ``."""


def parameters(properties: Mapping[str, JsonObject], required: Sequence[str] = ()) -> JsonObject:
    """The JSON schema object of a tool's parameters (rule 1)."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


def check_arguments(schema: JsonObject, arguments: JsonValue) -> None:
    """Raise ``INVALID_ARGUMENT`` listing every violation, in a stable order (C-5)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
    if errors:
        raise SubagentError(
            ErrorCode.INVALID_ARGUMENT,
            "invalid arguments: " + "; ".join(_violation(e) for e in errors),
            field="arguments",
        )


def _violation(error: jsonschema.ValidationError) -> str:
    path = "/".join(str(part) for part in error.path)
    return f"{path}: {error.message}" if path else error.message


Wording = Mapping[tuple[ErrorCode, str | None], str]
"""``(code, reason or None) -> model text``: how a tool words a service error (rule 4)."""


def translate(error: Exception, wording: Wording) -> Exception:
    """The error the model should see for ``error`` (rule 4)."""
    if not isinstance(error, SubagentError):
        return error
    text = wording.get((error.code, error.message)) or wording.get((error.code, None))
    return error if text is None else ToolFailure(text)


def message_of(error: BaseException) -> str:
    """What the model sees after ``Error: `` (C-3)."""
    return error.message if isinstance(error, SubagentError) else str(error)


def render_exception(error: BaseException) -> str:
    """``<Name>: <message>`` as a stored detail (rule 4)."""
    return f"{type(error).__name__}: {message_of(error)}"


def text_result(text: str) -> ToolOutcome:
    return ToolOutcome((TextBlock(text),))


def error_result(message: str) -> ToolOutcome:
    return ToolOutcome((TextBlock(f"Error: {message}"),), is_error=True)


async def guarded(
    schema: JsonObject,
    arguments: JsonObject,
    signal: AbortSignal,
    body: Callable[[JsonObject], Awaitable[str]],
) -> ToolOutcome:
    """Validate, run ``body`` and render its text, or its failure as ``Error: ...`` (rule 2)."""
    if signal.aborted:
        return error_result(ABORTED_BEFORE_DISPATCH)
    try:
        check_arguments(schema, arguments)
        text = await body(arguments)
    except Exception as error:
        return error_result(message_of(error))
    if _aborted(signal):  # re-read: the body awaited, the signal may have aborted meanwhile
        return error_result(ABORTED_AFTER_SUCCESS)
    return text_result(text)


def _aborted(signal: AbortSignal) -> bool:
    return signal.aborted


__all__ = [
    "ABORTED_AFTER_SUCCESS",
    "ABORTED_BEFORE_DISPATCH",
    "ToolFailure",
    "check_arguments",
    "error_result",
    "guarded",
    "message_of",
    "parameters",
    "render_exception",
    "text_result",
    "translate",
]
