"""Residency of a continuable child's Activation: derived from facts, never stored.

Theory of operation
-------------------
1. Residency is a pure function of an Activation's facts (RES-1): RUNNING when the agent's
   driver is running, an admission is open, or a manager-accepted waking message is not yet
   claimed or discarded; otherwise WAITING while it owns undisposed children; otherwise
   SETTLED. No second state machine exists.
2. Agent status is the harness's: IDLE covers maintenance (HARNESS-2). That is why the
   accepted set exists (RES-2, RES-3): a message latched behind maintenance keeps the
   Activation RUNNING although its status reads IDLE.
3. Waking-admission accounting (RES-2) is two set operations: ``admit`` adds the id before a
   waking send, ``settle_message`` removes it on claim or discard and ignores ids the manager
   never admitted (RES-11).
4. The public view (DESIGN decision 3) is ``activation_state``: ``running``, ``waiting``, or
   ``None`` when there is no live Activation or it has settled (it is then being released).
5. This module knows nothing of parents, authority or teardown.
"""

from __future__ import annotations

import enum

import attrs

from dsh_subagent.core.values import MessageId


class Residency(enum.Enum):
    """The derived residency of one Activation (RES-1)."""

    RUNNING = "running"
    WAITING = "waiting"
    SETTLED = "settled"


class ActivationState(enum.Enum):
    """The public residency view (DESIGN decision 3); a settled Activation reads as None."""

    RUNNING = "running"
    WAITING = "waiting"


class AgentStatus(enum.Enum):
    """The harness agent status; maintenance is folded into IDLE (HARNESS-2)."""

    IDLE = "idle"
    RUNNING = "running"


@attrs.frozen
class ResidencyFacts:
    """The facts residency is derived from (RES-1, RES-2, RES-4)."""

    status: AgentStatus = AgentStatus.IDLE
    accepted_count: int = 0
    owned_count: int = 0
    admission_open: bool = False


def residency(facts: ResidencyFacts) -> Residency:
    """Derive residency from an Activation's facts (RES-1, RES-4, RES-12).

    post: facts.owned_count <= 0 or __return__ is not Residency.SETTLED
    post: facts.accepted_count <= 0 or __return__ is Residency.RUNNING
    post: (facts.status is not AgentStatus.RUNNING) or __return__ is Residency.RUNNING
    """
    if facts.status is AgentStatus.RUNNING or facts.accepted_count > 0 or facts.admission_open:
        return Residency.RUNNING
    if facts.owned_count > 0:
        return Residency.WAITING
    return Residency.SETTLED


def activation_state(facts: ResidencyFacts | None) -> ActivationState | None:
    """The public view of an Activation's residency; None when absent or settled.

    post: (facts is not None) or __return__ is None
    """
    if facts is None:
        return None
    derived = residency(facts)
    if derived is Residency.SETTLED:
        return None
    return ActivationState(derived.value)


def admit(accepted: frozenset[MessageId], message_id: MessageId) -> frozenset[MessageId]:
    """Account a waking send before it happens (RES-2)."""
    return accepted | {message_id}


def settle_message(accepted: frozenset[MessageId], message_id: MessageId) -> frozenset[MessageId]:
    """Forget an id the child's inbox claimed or discarded; unknown ids are ignored (RES-2)."""
    return accepted - {message_id}
