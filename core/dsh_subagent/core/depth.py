"""Delegation depth: the recursion budget a parent passes to its children.

Theory of operation
-------------------
1. A depth is an ``int`` in ``0 .. MAX_DEPTH`` (never a ``bool``). ``MAX_DEPTH`` is the
   largest integer every JSON peer represents exactly (2**53 - 1), the port of the upstream
   "safe integer" domain (DEPTH-2, DEPTH-4). An absent depth counts as 0 (DEPTH-1).
2. An agent's depth is ``max(header depth, runtime option depth)``: the persisted header is
   the monotone floor, runtime options may deepen the count but never lower it (DEPTH-2), so
   a resumed child, which gets no runtime depth (DEPTH-7), never counts as top-level.
3. A child's depth is its parent's + 1. ``max_depth`` caps the child's depth absolutely and
   inclusively: a child exactly at the cap is allowed, ``max_depth == 0`` forbids any child of
   a top-level agent (DEPTH-3, DEPTH-5).
4. Upstream raises untyped errors here (a type error, a range error and the plain
   ``SubagentDepthError``; ERR-18). This port raises ``SubagentError`` instead: a bad value is
   ``INVALID_ARGUMENT`` naming the field, an exceeded cap or an unrepresentable child depth is
   ``DEPTH_LIMIT_EXCEEDED`` whose message names the attempted and the maximum depth.
5. Fresh creation stamps the child depth on both the header and the runtime options
   (DEPTH-6); cold resume clears the runtime option and re-checks no cap (DEPTH-7).
"""

from __future__ import annotations

from typing import Final

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import require_int
from dsh_subagent.core.values import AgentOptions, SessionHeader

MAX_DEPTH: Final = 2**53 - 1
"""The largest representable delegation depth (JavaScript's ``Number.MAX_SAFE_INTEGER``)."""


def validate_depth(value: object, field: str) -> int:
    """Return ``value`` as a depth, or raise ``INVALID_ARGUMENT`` naming ``field``.

    post: 0 <= __return__ <= MAX_DEPTH
    raises: SubagentError
    """
    depth = require_int(value, field, minimum=0)
    if depth > MAX_DEPTH:
        raise SubagentError(
            ErrorCode.INVALID_ARGUMENT,
            f"{field}: must be at most {MAX_DEPTH}, got {depth}",
            field=field,
        )
    return depth


def validate_max_depth(value: object, field: str = "request.max_depth") -> int | None:
    """Validate an optional depth cap (DEPTH-4): absent, or a depth.

    post: __return__ is None or 0 <= __return__ <= MAX_DEPTH
    raises: SubagentError
    """
    return None if value is None else validate_depth(value, field)


def effective_depth(header_depth: int | None, runtime_depth: int | None) -> int:
    """The larger of the persisted floor and the runtime option; absence counts as 0.

    pre: header_depth is None or header_depth >= 0
    pre: runtime_depth is None or runtime_depth >= 0
    post: __return__ >= (header_depth or 0)
    post: __return__ >= (runtime_depth or 0)
    post: __return__ in (header_depth or 0, runtime_depth or 0)
    """
    return max(header_depth or 0, runtime_depth or 0)


def delegation_depth_of(header: SessionHeader, options: AgentOptions) -> int:
    """An agent's delegation depth from its session header and runtime options (DEPTH-2).

    raises: SubagentError
    """
    floor = None
    if header.delegation_depth is not None:
        floor = validate_depth(header.delegation_depth, "header.delegation_depth")
    runtime = None
    if options.subagent_depth is not None:
        runtime = validate_depth(options.subagent_depth, "agent_options.subagent_depth")
    return effective_depth(floor, runtime)


def child_depth(parent_depth: int, max_depth: int | None) -> int:
    """The depth of a new child of a parent at ``parent_depth``, checked against the cap.

    pre: parent_depth >= 0
    pre: max_depth is None or max_depth >= 0
    post: __return__ == parent_depth + 1
    post: __return__ <= MAX_DEPTH
    post: max_depth is None or __return__ <= max_depth
    raises: SubagentError
    """
    attempted = parent_depth + 1
    # The ported range error (ERR-18): a depth no JSON peer could store exactly.
    if attempted > MAX_DEPTH:
        raise _exceeded(attempted, MAX_DEPTH)
    # The ported SubagentDepthError (ERR-18), typed here: the cap is absolute and inclusive.
    if max_depth is not None and attempted > max_depth:
        raise _exceeded(attempted, max_depth)
    return attempted


def _exceeded(attempted: int, maximum: int) -> SubagentError:
    return SubagentError(
        ErrorCode.DEPTH_LIMIT_EXCEEDED,
        f"delegation depth {attempted} would exceed the maximum depth {maximum}",
        field="max_depth",
    )


def fresh_child_options(options: AgentOptions | None, depth: int) -> AgentOptions:
    """Runtime options of a freshly created child: the child depth stamped (DEPTH-6).

    The same ``depth`` goes to the child's ``SessionHeader.delegation_depth``.
    """
    return attrs.evolve(options or AgentOptions(), subagent_depth=depth)


def resumed_child_options(options: AgentOptions | None) -> AgentOptions:
    """Runtime options of a cold-resumed child: no runtime depth, the header is the floor."""
    return attrs.evolve(options or AgentOptions(), subagent_depth=None)


__all__ = [
    "MAX_DEPTH",
    "child_depth",
    "delegation_depth_of",
    "effective_depth",
    "fresh_child_options",
    "resumed_child_options",
    "validate_depth",
    "validate_max_depth",
]
