"""The service's documented input limits and the boundary checks that apply them.

Theory of operation
-------------------
1. ``Limits`` is configured on the service (``SubagentService(limits=...)``) and applied at
   every public boundary before anything is created, persisted, listed, emitted or sent
   (DESIGN decision 10). The defaults:

   ============== ========= ===========================================================
   field          default   bounds
   ============== ========= ===========================================================
   nesting_depth  64        nested JSON containers in a data block or an output schema
   label_bytes    1 KiB     a child's label (UTF-8)
   id_bytes       256       a child id (UTF-8)
   message_bytes  4 MiB     one prompt, follow-up or report (all blocks together)
   schema_bytes   256 KiB   one output schema
   ============== ========= ===========================================================

   Sizes are measured as ``check_json`` does: UTF-8 bytes of every string and key plus
   one per value. Every limit is a positive int.
2. Every check is iterative and linear in its input (``check_json``), and an oversize value
   is refused as soon as the walk passes the bound. Integers must be JSON-safe.
3. Labels and ids are single-line display text: control characters (newlines, ANSI
   escapes, NUL, C1 controls, line/paragraph separators) are refused. A child id must not
   carry surrounding whitespace either (``" c "`` is not a second name of ``"c"``).
4. Content (a prompt, a follow-up, a report) is a sequence of ``TextBlock`` / ``DataBlock``,
   returned as a tuple; a prompt or follow-up must be non-empty and not blank (only
   whitespace text and no data); a report's text is the caller's (it gets a frame). Errors
   name the caller's path (``spec.prompt[0].text``, ``content[1]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs

from dsh_subagent.core.errors import invalid
from dsh_subagent.core.jsonvalue import check_json, require_int, require_str, utf8_size
from dsh_subagent.core.values import Content, ContentBlock, DataBlock, TextBlock

_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _positive(_instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    require_int(value, f"limits.{attribute.name}", minimum=1)


@attrs.frozen
class Limits:
    """Input limits of the service's public boundary (rule 1)."""

    nesting_depth: int = attrs.field(default=64, validator=_positive)
    label_bytes: int = attrs.field(default=1024, validator=_positive)
    id_bytes: int = attrs.field(default=256, validator=_positive)
    message_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    schema_bytes: int = attrs.field(default=256 * 1024, validator=_positive)


DEFAULT_LIMITS: Final = Limits()


def _line(value: object, field: str, max_bytes: int) -> str:
    """A non-empty single-line string of at most ``max_bytes`` UTF-8 bytes (rule 3)."""
    text = require_str(value, field, non_empty=True)
    if len(text) > max_bytes or (utf8_size(text) or 0) > max_bytes:
        raise invalid(field, f"is longer than {max_bytes} bytes")
    if _CONTROL.search(text) is not None:
        raise invalid(field, "must not contain control characters (newlines, escapes, NUL)")
    return text


def check_label(value: object, field: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A child's label: non-empty, single-line, within ``label_bytes`` (rule 3).

    raises: SubagentError
    """
    return _line(value, field, limits.label_bytes)


def check_child_id(value: object, field: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A child id: a label's rules within ``id_bytes``, without surrounding whitespace.

    raises: SubagentError
    """
    text = _line(value, field, limits.id_bytes)
    if text != text.strip():
        raise invalid(field, "must not have surrounding whitespace")
    return text


def _bounded_json(value: object, field: str, limits: Limits, max_size: int) -> int:
    return check_json(
        value, field, max_depth=limits.nesting_depth, max_size=max_size, safe_ints=True
    )


def check_content(
    value: object, field: str, limits: Limits = DEFAULT_LIMITS, *, non_blank: bool = True
) -> Content:
    """A tuple of content blocks within ``message_bytes``; not blank unless allowed (rule 4).

    raises: SubagentError
    """
    if isinstance(value, str) or not isinstance(value, Sequence) or (non_blank and not value):
        raise invalid(field, "must be a non-empty sequence of content blocks")
    budget = limits.message_bytes
    blank = True
    blocks: list[ContentBlock] = []
    for index, block in enumerate(value):
        where = f"{field}[{index}]"
        if isinstance(block, TextBlock):
            if not isinstance(block.text, str):
                raise invalid(
                    f"{where}.text", f"expected a string, got {type(block.text).__name__}"
                )
            size = utf8_size(block.text)
            if size is None:
                raise invalid(f"{where}.text", "string contains a lone surrogate")
            budget -= size
        elif isinstance(block, DataBlock):
            budget -= _bounded_json(block.value, f"{where}.value", limits, budget)
        else:
            raise invalid(where, "must be a TextBlock or a DataBlock")
        if budget < 0:
            raise invalid(field, f"is larger than {limits.message_bytes} bytes")
        blank = blank and isinstance(block, TextBlock) and not block.text.strip()
        blocks.append(block)
    if blank and non_blank:
        raise invalid(field, "must not be blank")
    return tuple(blocks)


def check_schema_value(value: object, field: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """An output schema's JSON: lossless, JSON-safe, within the depth and ``schema_bytes``.

    raises: SubagentError
    """
    if _bounded_json(value, field, limits, limits.schema_bytes) > limits.schema_bytes:
        raise invalid(field, f"is larger than {limits.schema_bytes} bytes")


__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "check_child_id",
    "check_content",
    "check_label",
    "check_schema_value",
]
