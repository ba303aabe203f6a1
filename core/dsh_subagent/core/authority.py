"""Authority decisions: who may follow up, interrupt, report to, drain, or ask the human.

Theory of operation
-------------------
1. "Exact live" identity is modelled by tokens the adapter mints: an ``AgentRef`` names one
   agent object (session id + identity token); ``Presented`` pairs it with the token the
   registry currently holds under that id. It is exact live iff the two tokens are equal, so
   a same-id replacement (new token) or a departed agent (no token) never qualifies.
2. Follow-up (AUTH-1, AUTH-2): the exact live direct parent whose id equals the child's
   header ``parent_session``; the adapter asks once against the inspected header before
   reconstruction and again against the live header at admission. With a genuine user grant
   (DESIGN decision 2) a host may follow up, cold resume included, without any parent.
3. Interrupt (AUTH-5, AUTH-6, AUTH-8, AUTH-13): a genuine user grant presenting the durable
   direct-parent address, or an exact live ancestor recorded in the target's materialization
   lineage. The caller is vetted before target lookup; an absent target is an allowed no-op.
4. Report (AUTH-9): the sender must be the exact agent of a resident Activation that is not
   closing. Drain of selected children (AUTH-10) is all-or-nothing; scoped drain ignores
   every root that is not exact live (AUTH-11).
5. A human question (ASK-1..3) is admitted only from an exact live agent that is a root:
   one no live agent owns. Ownership is the runtime fact (ASK-2): a resumed session with
   child lineage but no owner is a root, a live owned child is not, whatever its depth. A
   host calls it after its aborted and empty-batch guards and before validating the
   questions or opening any wait, so an owned child never blocks on a human (ASK-3).
6. Decisions are data: ``Allowed`` or ``Denied(code, reason)``; nothing here raises.
7. A grant is verified by the adapter (an object only the service can mint); the core only
   sees ``grant_genuine``. Message sources never reach this module (AUTH-3).
8. A materialization lineage is a ``Lineage``: a child's is its parent's plus itself, so a
   copied set would cost O(depth) time and memory per start along a chain. ``Lineage`` is an
   immutable ``Set`` over a ``PMap``: ``with_member`` shares every untouched node, O(log32 n);
   membership is O(log32 n), and ``isdisjoint(other)`` walks ``other``, so callers write
   ``lineage.isdisjoint(roots)`` (the few roots, never the depth). It equals any set with the
   same members, so a ``frozenset`` is accepted wherever a lineage is (``AbstractSet``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import CancelKind, SessionId


@attrs.frozen
class AgentRef:
    """One agent object: its session id and the identity token the adapter minted for it."""

    session_id: SessionId
    token: int


class Lineage(AbstractSet[AgentRef]):
    """An immutable set of agents; adding one costs O(log32 n) and copies nothing else (rule 8)."""

    __slots__ = ("_members",)

    def __init__(self, members: Iterable[AgentRef] = ()) -> None:
        found: PMap[AgentRef, bool] = PMap()
        for member in members:
            found = found.set(member, True)
        self._members = found

    def with_member(self, agent: AgentRef) -> Lineage:
        """This lineage plus ``agent``: the structure is shared, not copied."""
        grown = Lineage()
        grown._members = self._members.set(agent, True)
        return grown

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __iter__(self) -> Iterator[AgentRef]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"Lineage({sorted(self._members, key=lambda ref: ref.token)!r})"


EMPTY_LINEAGE: Final = Lineage()


@attrs.frozen
class Presented:
    """An agent as presented by a caller, with the registry's current token for its id."""

    agent: AgentRef
    registry_token: int | None

    @property
    def is_exact_live(self) -> bool:
        """The registry currently holds exactly this agent object under its id."""
        return self.registry_token is not None and self.registry_token == self.agent.token


@attrs.frozen
class Allowed:
    """The operation is authorized."""


@attrs.frozen
class Denied:
    """The operation is refused; ``code`` is the error a caller would raise."""

    code: ErrorCode
    reason: str


Decision: TypeAlias = Allowed | Denied
ALLOWED: Final = Allowed()


@attrs.frozen
class ParentAuthority:
    """A parent agent's tool context making the call."""

    caller: Presented


@attrs.frozen
class UserAuthority:
    """A trusted host acting for the user; ``grant_genuine`` says the service minted the grant."""

    grant_genuine: bool


@attrs.frozen
class UserInterrupt:
    """A user interrupt presenting the durable direct-parent address (AUTH-5)."""

    parent_session_id: SessionId
    grant_genuine: bool


@attrs.frozen
class AncestorInterrupt:
    """An interrupt by a live agent claiming to be an ancestor of the target (AUTH-6)."""

    caller: Presented


FollowupAuthority: TypeAlias = ParentAuthority | UserAuthority
InterruptAuthority: TypeAlias = UserInterrupt | AncestorInterrupt


@attrs.frozen
class TargetFacts:
    """What authority needs of a resident target: durable parent and materialization lineage."""

    parent_session: SessionId | None
    lineage: AbstractSet[AgentRef]


_FORGED_GRANT: Final = Denied(ErrorCode.UNAUTHORIZED, "user authority requires a service grant")
_STALE_PARENT: Final = Denied(ErrorCode.UNAUTHORIZED, "exact live parent required")
_QUESTION_NOT_LIVE: Final = Denied(ErrorCode.UNAUTHORIZED, "questions come only from a live agent")
_DELEGATED_QUESTION: Final = Denied(
    ErrorCode.DELEGATED_CALLER,
    "a delegated agent cannot ask the user; put the open question in your final result",
)


def authorize_followup(authority: FollowupAuthority, header_parent: SessionId | None) -> Decision:
    """May ``authority`` deliver to a child whose header names ``header_parent`` (AUTH-1/2)?

    post: not isinstance(__return__, Denied) or __return__.code is ErrorCode.UNAUTHORIZED
    """
    if isinstance(authority, UserAuthority):
        return ALLOWED if authority.grant_genuine else _FORGED_GRANT
    return authorize_parent_followup(authority.caller, header_parent)


def precheck_followup(authority: FollowupAuthority) -> Decision:
    """Fail fast, before reconstructing a cold child: the caller must be exact live and a
    user grant genuine; the header comparison follows once the header is read (AUTH-2).

    post: not isinstance(__return__, Denied) or __return__.code is ErrorCode.UNAUTHORIZED
    """
    if isinstance(authority, UserAuthority):
        return ALLOWED if authority.grant_genuine else _FORGED_GRANT
    return ALLOWED if authority.caller.is_exact_live else _STALE_PARENT


def authorize_parent_followup(caller: Presented, header_parent: SessionId | None) -> Decision:
    """Only the exact live direct parent named by the header may deliver (AUTH-1).

    post: __return__ != ALLOWED or caller.is_exact_live
    post: __return__ != ALLOWED or header_parent == caller.agent.session_id
    """
    if not caller.is_exact_live:
        return _STALE_PARENT
    if header_parent != caller.agent.session_id:
        return Denied(ErrorCode.UNAUTHORIZED, "child belongs to another parent session")
    return ALLOWED


def authorize_interrupt(
    target_id: SessionId, authority: InterruptAuthority, target: TargetFacts | None
) -> Decision:
    """May ``authority`` interrupt ``target_id`` (None: no resident target)? (AUTH-5/6/13).

    post: not isinstance(__return__, Denied) or __return__.code is ErrorCode.UNAUTHORIZED
    post: getattr(authority, "grant_genuine", True) or __return__ != ALLOWED
    """
    if isinstance(authority, AncestorInterrupt):
        return authorize_ancestor_interrupt(target_id, authority.caller, target)
    if not authority.grant_genuine:
        return _FORGED_GRANT
    if target is not None and target.parent_session != authority.parent_session_id:
        return Denied(ErrorCode.UNAUTHORIZED, "not the child's durable direct parent")
    return ALLOWED


def authorize_ancestor_interrupt(
    target_id: SessionId, caller: Presented, target: TargetFacts | None
) -> Decision:
    """An exact live ancestor, vetted before the target is looked up (AUTH-6).

    post: caller.agent.session_id != target_id or isinstance(__return__, Denied)
    post: caller.is_exact_live or isinstance(__return__, Denied)
    post: target is None or caller.agent in target.lineage or isinstance(__return__, Denied)
    """
    if not caller.is_exact_live:
        return Denied(ErrorCode.UNAUTHORIZED, "exact live caller required")
    if caller.agent.session_id == target_id:
        return Denied(ErrorCode.UNAUTHORIZED, "an agent cannot interrupt itself")
    if target is not None and caller.agent not in target.lineage:
        return Denied(ErrorCode.UNAUTHORIZED, "caller is not a live ancestor of the target")
    return ALLOWED


def interrupt_cause(authority: InterruptAuthority) -> CancelKind:
    """The cancel cause an authorized interrupt uses (CONT-23)."""
    return CancelKind.USER if isinstance(authority, UserInterrupt) else CancelKind.PARENT


def authorize_report(sender: AgentRef, resident_agent: AgentRef | None, closing: bool) -> Decision:
    """May ``sender`` report, given the agent of the resident Activation under its id (AUTH-9)?

    post: isinstance(__return__, Denied) or resident_agent == sender
    post: not closing or isinstance(__return__, Denied)
    """
    if resident_agent != sender:
        return Denied(ErrorCode.UNAUTHORIZED, "reports come only from a resident child")
    if closing:
        return Denied(ErrorCode.ACTIVATION_CLOSING, "the reporting child is being released")
    return ALLOWED


def authorize_drain_children(parent: Presented, targets: Sequence[TargetFacts | None]) -> Decision:
    """May ``parent`` drain these selected children (None: not resident)? All or none (AUTH-10).

    post: parent.is_exact_live or isinstance(__return__, Denied)
    """
    if not parent.is_exact_live:
        return _STALE_PARENT
    for target in targets:
        if target is None:
            continue
        if target.parent_session != parent.agent.session_id or parent.agent not in target.lineage:
            return Denied(ErrorCode.UNAUTHORIZED, "a selected child is not this parent's")
    return ALLOWED


def live_roots(candidates: Iterable[Presented]) -> tuple[AgentRef, ...]:
    """The exact live roots of a scoped drain, de-duplicated in order (AUTH-11, TEAR-8)."""
    roots = dict.fromkeys(each.agent for each in candidates if each.is_exact_live)
    return tuple(roots)


def live_lineage(
    parent: AgentRef,
    header_parent_of: Mapping[SessionId, SessionId | None],
    registry: Mapping[SessionId, AgentRef],
) -> Lineage:
    """The parent's live lineage: follow header parents through the registry (AUTH-7).

    Starts at ``parent`` and stops at the first id with no registry entry, or one seen
    before. Each step costs O(log32 n); the walk is iterative.
    """
    lineage = EMPTY_LINEAGE.with_member(parent)
    seen = {parent.session_id}
    next_id = header_parent_of.get(parent.session_id)
    while next_id is not None and next_id not in seen and next_id in registry:
        seen.add(next_id)
        lineage = lineage.with_member(registry[next_id])
        next_id = header_parent_of.get(next_id)
    return lineage


def authorize_question(caller: Presented | None, roots: Collection[AgentRef]) -> Decision:
    """May ``caller`` ask the human (ASK-1)? ``None``: there was no registry to authenticate it.

    ``roots`` are the exact live agents no live agent owns (ASK-2).

    post: isinstance(__return__, Denied) or (caller is not None and caller.agent in roots)
    post: isinstance(__return__, Denied) or caller is None or caller.is_exact_live
    """
    if caller is None or not caller.is_exact_live:
        return _QUESTION_NOT_LIVE
    if caller.agent not in roots:
        return _DELEGATED_QUESTION
    return ALLOWED
