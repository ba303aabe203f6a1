"""Public values of the continuation manager: start specs, authorities, identity tokens.

Theory of operation
-------------------
1. ``ContinuableStartSpec`` is CONT-1's input: a provider name, the durable label, the live
   parent agent, the core ``SubagentIntent`` a one-shot start carries too (prompt, depth cap,
   tool filter, persona, agent options) and the optional reserved id. ``check_start_spec``
   validates every field before any side effect with the core validators a one-shot start
   uses (``validate_intent``, ``core.limits``) and names the offending field
   (``INVALID_ARGUMENT``, ``spec.prompt``: the caller's flat view of the intent's fields).
2. Authorities are adapter objects holding live agents; ``Identities`` turns them into the
   core's token values: an ``AgentRef`` per agent object (a token minted once per object,
   held weakly) and a ``Presented`` pairing it with the token the registry holds now under
   the same id, so "exact live" is a token comparison in the core (AUTH-1, AUTH-6).
3. ``UserGrant``, the host's user authority, cannot be forged: only ``Identities.mint_grant``
   makes one (a private key guards the constructor) and only the minted objects are genuine;
   a copy, a subclass instance or a discriminant never is.
   Whatever is offered as authority and is neither a grant nor an agent object is an
   authority failure, ``UNAUTHORIZED``: an object of another type in
   the authority position is refused by ``refuse_authority``; a wrapper around something
   that is not an agent object (``ParentAgent(None)``) is presented as ``NOBODY``, which is
   never exact live, so the core refuses it like a departed agent.
4. ``LineageView`` reads the registry lazily as the two mappings ``core.authority.
   live_lineage`` walks (header parents and registry tokens), so the walk copies nothing.
5. A start needs its parent's live lineage (AUTH-7): along a chain that walk is O(depth)
   per start. ``Identities.lineage`` remembers each agent's walk (a persistent
   ``Lineage``, weakly per agent object) with the id it stopped at, and reuses it while it
   is still the walk the registry would give: none of its members has left the registry
   since and the stop id is still unregistered. A walk extends the remembered walk of the
   agent's header parent and is listed among that walk's dependents; ``departed(agent)``
   (called on ``agent/disposed``) invalidates that agent's walk and, through the
   dependents, every walk that contains it, and nothing else; a walk found stale by its
   stop id, or replaced, is invalidated the same way, for good. Each walk is invalidated
   at most once, so a departure costs O(1) amortized however many walks are remembered. A
   start then walks only to the nearest remembered ancestor (its parent, in a chain) and
   adds to that lineage in O(log n). A walk that meets an id twice (a cycle of header
   parents) is taken whole by ``live_lineage`` and not remembered; neither is the walk of
   an agent object the registry does not hold (its departure would not be reported).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator, Mapping
from typing import Final

import attrs

from dsh_subagent.adapters.budgets import check_budget
from dsh_subagent.adapters.frozen_json import frozen_intent
from dsh_subagent.adapters.protocols import Agent, AgentRegistry
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core.authority import (
    EMPTY_LINEAGE,
    AgentRef,
    FollowupAuthority,
    Lineage,
    ParentAuthority,
    Presented,
    UserAuthority,
    live_lineage,
)
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.capabilities import validate_intent
from dsh_subagent.core.depth import validate_max_depth
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.limits import DEFAULT_LIMITS, Limits, check_child_id, check_label
from dsh_subagent.core.values import MessageId, SessionId, SubagentIntent, as_intent

_GRANT_KEY: Final = object()

NOBODY: Final = Presented(AgentRef(SessionId(""), 0), None)
"""How something that is not an agent object is presented: never exact live (tokens
start at 1, and the registry holds no token for it), rule 3."""


def refuse_authority(expected: str, field: str = "authority") -> SubagentError:
    """The refusal of an object of the wrong type in an authority position (rule 3)."""
    return SubagentError(ErrorCode.UNAUTHORIZED, f"must be {expected}", field=field)


FOLLOWUP_AUTHORITIES: Final = "ParentAgent or a UserGrant"
"""What a follow-up's authority position takes (``refuse_authority``'s ``expected``)."""


@attrs.frozen
class ContinuableStartSpec:
    """``start_continuable`` input (CONT-1); the prompt is submitted with source ``user``.

    ``intent`` is a ``SubagentIntent``, or a bare prompt (content blocks or a plain string)
    for an intent that asks nothing else.
    """

    provider: str
    label: str
    parent: Agent = attrs.field(eq=False)
    intent: SubagentIntent = attrs.field(converter=as_intent)
    child_id: SessionId | None = None
    signal: AbortSignal | None = attrs.field(default=None, eq=False)
    budget: Budget | None = None
    """The child's caps, carved out of the parent's remaining budget (BUDGET-12)."""


@attrs.frozen
class ContinuableStart:
    """The identities a caller gets once the initial prompt is in the child's inbox (CONT-8)."""

    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class ParentAgent:
    """Follow-up authority of a parent agent's tool context (AUTH-1)."""

    agent: Agent = attrs.field(eq=False)


@attrs.frozen
class AncestorAuthority:
    """Interrupt authority of a live agent claiming to be the target's ancestor (AUTH-6)."""

    agent: Agent = attrs.field(eq=False)


class UserGrant:
    """The host's user authority; only the manager mints a genuine one, and no copy is genuine."""

    __slots__ = ("__weakref__",)

    def __init__(self, key: object) -> None:
        if key is not _GRANT_KEY:
            raise invalid("grant", "a user grant is minted only by user_authority()")

    def __repr__(self) -> str:
        return "UserGrant(<opaque>)"


@attrs.frozen
class UserInterruptAuthority:
    """A user interrupt: the grant plus the child's durable direct-parent address (AUTH-5)."""

    grant: UserGrant = attrs.field(eq=False)
    parent_session_id: SessionId


def check_start_spec(spec: object, limits: Limits = DEFAULT_LIMITS) -> ContinuableStartSpec:
    """Validate a start spec's fields (CONT-1, CONT-3 step 3) with the one-shot's validators.

    Returns the spec with its prompt as a deep-frozen tuple (rule 1).

    raises: SubagentError
    """
    if not isinstance(spec, ContinuableStartSpec):
        raise invalid("spec", "must be a ContinuableStartSpec")
    require_str(spec.provider, "spec.provider", non_empty=True)
    check_label(spec.label, "spec.label", limits)
    if not all(hasattr(spec.parent, name) for name in ("id", "session", "options", "ctx")):
        raise invalid("spec.parent", "must be the live parent Agent")
    if spec.child_id is not None:
        check_child_id(spec.child_id, "spec.child_id", limits)
    validate_max_depth(spec.intent.max_depth, "spec.max_depth")
    validate_intent(spec.intent, "spec", limits)
    if spec.signal is not None and not isinstance(spec.signal, AbortSignal):
        raise invalid("spec.signal", "must be an AbortSignal")
    check_budget(spec.budget, "spec.budget")
    return attrs.evolve(spec, intent=frozen_intent(spec.intent))


class Identities:
    """Identity tokens of agent objects and the genuine user grants (rules 2 and 3)."""

    def __init__(self, agents: AgentRegistry) -> None:
        self._agents = agents
        self._tokens: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
        self._next = itertools.count(1)
        self._grants: weakref.WeakSet[UserGrant] = weakref.WeakSet()
        self._walks: weakref.WeakKeyDictionary[object, _Walk] = weakref.WeakKeyDictionary()

    def ref(self, agent: Agent) -> AgentRef:
        """This agent object's ``AgentRef``, minting its token on first sight."""
        token = self._tokens.get(agent)
        if token is None:
            token = self._tokens[agent] = next(self._next)
        return AgentRef(agent.id, token)

    def known(self, agent: Agent) -> AgentRef | None:
        """The ``AgentRef`` of an agent that already has a token, else None."""
        token = self._tokens.get(agent)
        return None if token is None else AgentRef(agent.id, token)

    def presented(self, agent: Agent) -> Presented:
        """``agent`` with the token of whatever the registry holds under its id now;
        ``NOBODY`` when it is not an agent object (rule 3)."""
        if not isinstance(getattr(agent, "id", None), str):
            return NOBODY
        try:
            presented = self.ref(agent)
        except TypeError:  # not weakly referenceable: not an agent object
            return NOBODY
        current = self._agents.get(agent.id)
        if current is None or current is agent:  # the exact live one: its own token
            return Presented(presented, None if current is None else presented.token)
        return Presented(presented, self.ref(current).token)

    def mint_grant(self) -> UserGrant:
        grant = UserGrant(_GRANT_KEY)
        self._grants.add(grant)
        return grant

    def genuine(self, grant: object) -> bool:
        return isinstance(grant, UserGrant) and grant in self._grants

    def followup_authority(self, authority: object) -> FollowupAuthority:
        """The core's follow-up authority, with the registry's token as of now (AUTH-1/2/4)."""
        if isinstance(authority, ParentAgent):
            return ParentAuthority(self.presented(authority.agent))
        if isinstance(authority, UserGrant):
            return UserAuthority(self.genuine(authority))
        raise refuse_authority(FOLLOWUP_AUTHORITIES)

    def departed(self, agent: Agent) -> None:
        """``agent`` left the registry: its remembered walk and every walk built on it are
        stale from now on, no other (rule 5)."""
        walk = self._walks.pop(agent, None)
        if walk is not None:
            walk.invalidate()

    def lineage(self, parent: Agent) -> Lineage:
        """The parent's live lineage through the registry (AUTH-7), reusing the nearest
        remembered walk (rule 5): O(log n) per start along a chain, not O(depth)."""
        path: list[Agent] = []  # walked agents with no usable memory, parent first
        seen: set[SessionId] = set()
        agent, base, stop, below = parent, EMPTY_LINEAGE, None, None
        while (walk := self._walks.get(agent)) is None or not self._still_valid(walk):
            path.append(agent)
            seen.add(agent.id)
            holder = self._agents.get(agent.id)  # whose header the walk reads (rule 4)
            stop = agent.id if holder is None else holder.session.header.parent_session
            if stop is None or holder is None:
                break
            if stop in seen:
                return self._whole_walk(parent)  # a cycle of header parents: no memory
            found = self._agents.get(stop)
            if found is None:
                break
            agent = found
        else:
            base, stop, below = walk.lineage, walk.stop, walk
            for walked in path:  # the remembered walk must not meet this one's ids again
                current = self._agents.get(walked.id)
                if current is not None and self.ref(current) in base:
                    return self._whole_walk(parent)
        for walked in reversed(path):
            base = base.with_member(self.ref(walked))
            if self._agents.get(walked.id) is not walked:
                continue  # not the registry's agent (only ``parent`` can be): no memory
            replaced = self._walks.get(walked)
            if replaced is not None:
                replaced.invalidate()  # stale: it and the walks built on it
            below = _Walk(base, stop, below)
            self._walks[walked] = below
        return base

    def _still_valid(self, walk: _Walk) -> bool:
        """Whether ``walk`` still holds; a stale one is invalidated for good, with the walks
        built on it (a stop id that leaves again does not make them current)."""
        if walk.valid and (walk.stop is None or self._agents.get(walk.stop) is None):
            return True
        walk.invalidate()
        return False

    def _whole_walk(self, parent: Agent) -> Lineage:
        view = LineageView(self._agents, self)
        return live_lineage(self.ref(parent), view.header_parents, view)


class _Walk:
    """One remembered lineage walk: its result, the unregistered id it stopped at (None: a
    root), whether it still holds, and the walks built on it (rule 5)."""

    __slots__ = ("_base", "_dependents", "lineage", "stop", "valid")

    def __init__(self, lineage: Lineage, stop: SessionId | None, base: _Walk | None) -> None:
        self.lineage = lineage
        self.stop = stop
        self.valid = True
        self._base = base
        self._dependents: dict[_Walk, None] | None = None
        if base is not None:
            if base._dependents is None:
                base._dependents = {}
            base._dependents[self] = None

    def invalidate(self) -> None:
        """This walk and every walk built on it no longer hold (each one is visited once)."""
        stale = [self]
        while stale:
            walk = stale.pop()
            walk.valid = False
            base, walk._base = walk._base, None
            if base is not None and base._dependents is not None:
                base._dependents.pop(walk, None)
            dependents, walk._dependents = walk._dependents, None
            if dependents:
                stale.extend(dependents)


class LineageView(Mapping[SessionId, AgentRef]):
    """The registry as ``id -> AgentRef``, plus ``header_parents`` as ``id -> parent id``."""

    def __init__(self, agents: AgentRegistry, identities: Identities) -> None:
        self._agents = agents
        self._identities = identities
        self.header_parents = _HeaderParents(agents)

    def __getitem__(self, key: SessionId) -> AgentRef:
        agent = self._agents.get(key)
        if agent is None:
            raise KeyError(key)
        return self._identities.ref(agent)

    def __iter__(self) -> Iterator[SessionId]:
        raise TypeError("the registry view is not enumerable")

    def __len__(self) -> int:
        raise TypeError("the registry view is not enumerable")

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._agents.get(SessionId(key)) is not None


class _HeaderParents(Mapping[SessionId, SessionId | None]):
    def __init__(self, agents: AgentRegistry) -> None:
        self._agents = agents

    def __getitem__(self, key: SessionId) -> SessionId | None:
        agent = self._agents.get(key)
        if agent is None:
            raise KeyError(key)
        return agent.session.header.parent_session

    def __iter__(self) -> Iterator[SessionId]:
        raise TypeError("the registry view is not enumerable")

    def __len__(self) -> int:
        raise TypeError("the registry view is not enumerable")


__all__ = [
    "NOBODY",
    "AncestorAuthority",
    "ContinuableStart",
    "ContinuableStartSpec",
    "Identities",
    "ParentAgent",
    "UserGrant",
    "UserInterruptAuthority",
    "check_start_spec",
    "refuse_authority",
]
