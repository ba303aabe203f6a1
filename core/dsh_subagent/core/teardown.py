"""Child-first teardown planning, failure aggregation and durability reports.

Theory of operation
-------------------
1. The ownership forest maps each live Activation's child id to the ids it owns. A plan for
   some roots lists every reachable node once: ``cancel_order`` top-down (a parent before
   its children, TEAR-2 step 4, TEAR-3) and ``release_order`` bottom-up (every child before
   its parent, TEAR-3). Roots or owned ids absent from the forest are skipped (TEAR-11).
2. Planning is iterative with an explicit stack: linear in the plan's size, with no
   recursion limit, for wide trees and for 100,000-deep chains alike.
3. Forest roots are the Activations no other Activation owns (TEAR-13 step 3).
4. Failures of one Activation's teardown (TEAR-5) are classified per boundary; exactly one
   is returned as-is and several are wrapped as "failed at N boundaries". Root disposal
   (TEAR-12) wraps any failures with their count and the drain's subject.
5. DESIGN decision 1 (deviating from TEAR-4): a final flush that returns False or raises
   yields a ``DurabilityReport`` (code ``DURABILITY_FAILED``). It is a report, never a
   teardown failure: it retains nothing and never changes the stop reason.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import SessionId


@attrs.frozen
class TeardownPlan:
    """Cancel top-down, release bottom-up."""

    cancel_order: tuple[SessionId, ...]
    release_order: tuple[SessionId, ...]


def plan_teardown(
    forest: Mapping[SessionId, Collection[SessionId]], roots: Iterable[SessionId]
) -> TeardownPlan:
    """Plan the child-first teardown of ``roots`` and everything they own (TEAR-2, TEAR-3)."""
    cancel: list[SessionId] = []
    release: list[SessionId] = []
    seen: set[SessionId] = set()
    for root in roots:
        owned = None if root in seen else forest.get(root)
        if owned is None:
            continue
        seen.add(root)
        cancel.append(root)
        # Each frame is a node and the iterator over its remaining children.
        stack = [(root, iter(owned))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                release.append(node)
            elif child not in seen and (owned := forest.get(child)) is not None:
                seen.add(child)
                cancel.append(child)
                stack.append((child, iter(owned)))
    return TeardownPlan(tuple(cancel), tuple(release))


def forest_roots(forest: Mapping[SessionId, Collection[SessionId]]) -> tuple[SessionId, ...]:
    """The Activations no other Activation owns, in forest order (TEAR-13)."""
    owned = {child for children in forest.values() for child in children}
    return tuple(node for node in forest if node not in owned)


class Boundary(enum.Enum):
    """The independent failure boundaries of one Activation's teardown (TEAR-5)."""

    CHILDREN = "child teardown failed"
    ACTIVATION = "activation teardown failed"
    HANDLE = "handle disposal failed"


def boundary_failure(boundary: Boundary, detail: str) -> SubagentError:
    """One classified teardown failure (TEAR-5)."""
    return SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, f"{boundary.value}: {detail}")


def combine_failures(failures: Sequence[SubagentError]) -> SubagentError | None:
    """None, the single failure as-is, or one error wrapping several (TEAR-5)."""
    if not failures:
        return None
    if len(failures) == 1:
        return failures[0]
    return SubagentError(
        ErrorCode.ACTIVATION_TEARDOWN_FAILED,
        f"failed at {len(failures)} boundaries",
        cause=ExceptionGroup("teardown boundaries", list(failures)),
    )


def aggregate_branches(subject: str, failures: Sequence[SubagentError]) -> SubagentError | None:
    """One error naming the count and the subject when any branch failed (TEAR-12)."""
    if not failures:
        return None
    chains = "; ".join(str(failure) for failure in failures)
    return SubagentError(
        ErrorCode.ACTIVATION_TEARDOWN_FAILED,
        f"{subject} teardown failed in {len(failures)} branch(es): {chains}",
        cause=ExceptionGroup(f"{subject} teardown", list(failures)),
    )


def teardown_failure(error: BaseException) -> SubagentError:
    """``error`` as one teardown branch's failure: a ``SubagentError`` stays itself."""
    if isinstance(error, SubagentError):
        return error
    return SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, repr(error), cause=error)


class FlushOutcome(enum.Enum):
    """The final flush's result: confirmed, refused (returned False) or raised."""

    OK = "ok"
    UNCONFIRMED = "unconfirmed"
    FAILED = "failed"


@attrs.frozen
class DurabilityReport:
    """A ``DURABILITY_FAILED`` report on one epoch (DESIGN decision 1)."""

    child_id: SessionId
    outcome: FlushOutcome
    code: ErrorCode = ErrorCode.DURABILITY_FAILED

    @property
    def message(self) -> str:
        return (
            f"final flush of {self.child_id} was {self.outcome.value}; "
            "persisted state may be missing or stale on resume"
        )


def durability_report(child_id: SessionId, outcome: FlushOutcome) -> DurabilityReport | None:
    """Only a confirmed flush is durable; anything else is reported (DESIGN decision 1).

    post: (__return__ is None) == (outcome is FlushOutcome.OK)
    """
    return None if outcome is FlushOutcome.OK else DurabilityReport(child_id, outcome)
