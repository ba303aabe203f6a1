"""The seam's tree budgets: one ledger per service, metering every budgeted agent's requests.

Theory of operation
-------------------
1. ``BudgetBook`` holds the core ``Ledger`` (``core.budget``, which decides everything) and
   performs its effects: it opens nodes, installs itself as the ``StepMeter`` of each
   budgeted agent, and writes the ``budget/set`` records (``core.budget_log``) into that
   agent's log; ``settle`` hands each request's charge back to the agent, which records it
   in the same span with its answer (``assistant/message`` ``charged``) or as a
   ``budget/charged`` record. It never keeps a budget only in memory.
2. The host sets a root's budget (``set_budget``, which also raises an open one); the fold
   of the root's log is charged when it opens, so a restarted host resumes the count.
3. A start with a ``budget`` (or under a budgeted parent) carves its node before anything
   is created (``carve``): a child of an unbudgeted parent gets its own root, and a child
   that asks for no caps of a budgeted parent opens no node: it joins its parent's
   (``core.budget.join``), metering through it, and has no caps to record. (A node the
   book never closes, a root the host set, with no deadline, needs no count of joined
   children and no deadline check: a child sharing it meters through it without a join.) The
   ``ChildBudget`` attaches the child agent in its unpublished window (``attach``), or is
   closed (once) when the start fails or, by the provider, in the span that settles the
   one-shot child's result, returning the unused part.
   A continuable child's node stays open while the service lives (its remaining budget is
   listed), and a cold resume reopens it from the child's log (``restore``).
4. ``admit`` reserves one request, its input estimate (1) and 1 up to the request's
   ``max_tokens`` (``DEFAULT_OUTPUT_RESERVATION`` when the agent sets none) output tokens,
   synchronously in the agent's step admission: a refusal is ``BUDGET_EXHAUSTED`` naming
   ``budget.<dimension>``. ``settle`` charges the reported usage (one request only when the
   model reports none; the whole grant when the request failed) and records the charge.
5. ``refuse_exhausted`` refuses a follow-up to a child a minimal request would be refused
   for; ``raise_budget`` lifts its caps (``core.budget.raise_caps``) and records them on its
   live log, or at its next activation.
6. Wall time is a deadline from the moment the node opens (in this process): a cold resume
   starts the recorded wall time afresh.
7. Only a provider whose children are the seam's own agents can meter them
   (``providers.base.can_meter_budgets``); ``refuse_unmetered`` refuses a budgeted start
   through any other one (out of process, ACP) before anything is carved or created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import attrs

from dsh_subagent.adapters.clock import epoch_ms
from dsh_subagent.adapters.protocols import (
    Agent,
    StepGrant,
    StepMeter,
    Usage,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core import budget as core
from dsh_subagent.core.budget import Amounts, Budget, Exhausted, Ledger, validate_budget
from dsh_subagent.core.budget_log import (
    BUDGET_SET,
    budget_data,
    charged_data,
    fold_budget,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.values import JsonObject, SessionId

_log = logging.getLogger(__name__)

DEFAULT_OUTPUT_RESERVATION: Final = 4096
"""Output tokens a request reserves at most when its agent sets no ``max_tokens``."""


_SHARED: Final = Budget()
"""The caps of a child that asked for none: it shares its parent's accounts."""
_NAMES: Final = tuple(dimension.value for dimension in core.DIMENSIONS)
"""The ``Budget`` field names, in order."""
_ONE_REQUEST: Final = Amounts(1)
"""The charge of a request whose model reported no usage."""
_make: Final = tuple.__new__
"""Builds a named tuple without its class's Python ``__new__`` (``core.budget`` rule 11)."""
_DEFAULT_WANT: Final = Amounts(1, 1, DEFAULT_OUTPUT_RESERVATION)
"""What a request of an agent that sets no ``max_tokens`` wants (rule 4)."""


def check_budget(value: object, field: str) -> Budget | None:
    """``value`` as an optional ``Budget``, or ``INVALID_ARGUMENT`` naming ``field``."""
    return None if value is None else validate_budget(value, field)


def _merged(old: Budget, new: Budget) -> Budget:
    """``new``'s caps over ``old``'s, dimension by dimension."""
    return Budget(
        *(
            getattr(old, name) if getattr(new, name) is None else getattr(new, name)
            for name in _NAMES
        )
    )


class BudgetBook:
    """The ledger of one service and the ``StepMeter`` of its budgeted agents (rule 1)."""

    def __init__(self, clock: Callable[[], float] = epoch_ms) -> None:
        self._clock = clock
        self.ledger = Ledger()
        self._node_of: dict[SessionId, str] = {}  # the node each agent meters through
        self._bound: dict[str, SessionId] = {}  # the agent owning each node
        self._live: dict[SessionId, Agent] = {}  # each owner of a node while it is live
        self._caps: dict[str, Budget] = {}  # the caps each node records (wall time included)
        self._recorded: dict[str, Budget] = {}  # the caps last written to its log
        # The nodes with a deadline: the core reads ``now_ms`` only against one, so the
        # clock is read only for these (a node gets a deadline when it opens, or never).
        self._timed: set[str] = set()
        self._free_output: set[str] = set()  # the nodes paying no output cap (fixed at open)
        self._kept: set[str] = set()  # the roots the host set: never closed (rule 3)

    def _now(self) -> int:
        """The clock in whole ms (``carve`` and ``admit``, a delegation's path, read it inline)."""
        return int(self._clock())

    # ------------------------------------------------------------------ host (rule 2, 5)

    def set_budget(self, agent: Agent, budget: Budget) -> None:
        """Set (or raise) the host-owned budget of ``agent``, metering it from now."""
        budget = validate_budget(budget, "budget")
        node = self._node_of.get(agent.id)
        if node is None:
            node = agent.id
            self.ledger = core.open_root(self.ledger, node, budget, self._now())
            self._opened(node)
            self._kept.add(node)
            self._caps[node] = budget
            record = fold_budget(agent.session.events)
            self.ledger = core.charge(self.ledger, node, record.consumed)
            if record.budget is not None:
                self._recorded[node] = record.budget
            self.attach(node, agent, own=True)
            return
        self.raise_budget(agent.id, budget)

    def raise_budget(self, agent_id: SessionId, budget: Budget) -> None:
        """Raise the caps of ``agent_id``'s node (rule 5); recorded now or when it is next live."""
        budget = validate_budget(budget, "budget")
        node = self._node_of.get(agent_id)
        if node is None:
            raise SubagentError(
                ErrorCode.NOT_FOUND, f"{agent_id} has no open budget", field="child_id"
            )
        if self._bound.get(node) != agent_id:  # joined its parent's node (rule 3)
            given = [name for name in _NAMES if getattr(budget, name) is not None]
            if given:
                raise invalid(
                    f"budget.{given[0]}",
                    f"{agent_id!r} shares its parent's budget; raise its parent's",
                )
            return
        self.ledger = core.raise_caps(self.ledger, node, budget, self._now())
        self._caps[node] = _merged(self._caps[node], budget)
        agent = self._live.get(agent_id)
        if agent is not None:
            self._record(node, agent)

    def remaining(self, agent_id: SessionId) -> Budget | None:
        """What ``agent_id`` may still spend per dimension, or None when it has no budget."""
        node = self._node_of.get(agent_id)
        return None if node is None else core.remaining(self.ledger, node)

    def refuse_exhausted(self, agent_id: SessionId) -> None:
        """``BUDGET_EXHAUSTED`` when a minimal request of ``agent_id`` would be refused."""
        node = self._node_of.get(agent_id)
        if node is None:
            return
        short = core.short_of(self.ledger, node, self._now())
        if short is not None:
            raise SubagentError(
                ErrorCode.BUDGET_EXHAUSTED,
                f"the budget of {agent_id} is exhausted ({short.value}); the host can raise it",
                field=f"budget.{short.value}",
            )

    # ------------------------------------------------------------------ children (rule 3)

    def refuse_unmetered(self, provider: str, parent: SessionId, asked: Budget | None) -> None:
        """``UNSUPPORTED_CAPABILITY`` when a start through ``provider``, which cannot meter
        its children (rule 7), would be budgeted: it asks for a budget, or its parent has one
        (its requests would escape the tree's caps unseen)."""
        if asked is not None:
            raise SubagentError(
                ErrorCode.UNSUPPORTED_CAPABILITY,
                f"provider {provider!r} cannot meter a child's model requests against a budget",
                field="request.budget",
            )
        if parent in self._node_of:
            raise SubagentError(
                ErrorCode.UNSUPPORTED_CAPABILITY,
                f"provider {provider!r} cannot meter a child's model requests against the "
                f"budget of its parent {parent}",
                field="request.parent",
            )

    def carve(
        self, parent: SessionId | None, node: str, asked: Budget | None
    ) -> ChildBudget | None:
        """Open ``node`` before its child exists; None when neither it nor its parent is
        budgeted."""
        above = None if parent is None else self._node_of.get(parent)
        if above is None:
            if asked is None:
                return None
            self.ledger = core.open_root(self.ledger, node, asked, int(self._clock()))
        elif asked is None or asked == _SHARED:  # its node would be its parent's (rule 3)
            if above in self._kept and above not in self._timed:  # nothing to count or check
                return ChildBudget(self, above, shared=True, joined=False)
            now = int(self._clock()) if above in self._timed else 0
            self.ledger = core.join(self.ledger, above, now)
            return ChildBudget(self, above, shared=True)
        else:
            self.ledger = core.open_child(self.ledger, above, node, asked, int(self._clock()))
        self._opened(node)
        self._caps[node] = _caps_of(self.ledger, node, asked or _SHARED)
        return ChildBudget(self, node)

    def _opened(self, node: str) -> None:
        opened = self.ledger.nodes[node]
        if opened.deadline_ms is not None:
            self._timed.add(node)
        if opened.payers[2] is None:
            self._free_output.add(node)

    def restore(self, agent: Agent, parent: SessionId | None) -> None:
        """Meter a resumed child: its open node, or one reopened from its log (rule 3)."""
        node = self._node_of.get(agent.id)
        if node is None:
            record = fold_budget(agent.session.events)
            above = None if parent is None else self._node_of.get(parent)
            if record.budget is None and above is None:
                return
            carved = self.carve(parent, agent.id, record.budget or _SHARED)
            assert carved is not None, "a recorded budget or a budgeted parent carves"
            self.ledger = core.charge(self.ledger, carved.node, record.consumed)
            if not carved.shared:
                self._recorded[agent.id] = record.budget or _SHARED
            carved.attach(agent)
            return
        self.attach(node, agent, own=self._bound.get(node) == agent.id)

    def attach(
        self, node: str, agent: Agent, *, own: bool, agent_id: SessionId | None = None
    ) -> None:
        """Meter ``agent`` (whose id is ``agent_id``, when the caller has it) through ``node``
        and record the caps of a node it ``own``s (in the unpublished window).

        The owner of a node is kept while it is live (until its dispose), so a raised cap
        is recorded on its log. A child sharing its parent's node needs nothing at its
        dispose: a disposed agent makes no request, and the meter it keeps is the book."""
        install: Callable[[StepMeter], Unsubscribe] | None = getattr(agent, "install_meter", None)
        # an attribute check: ``isinstance`` against the runtime-checkable ``MeteredAgent``
        # costs more than the rest of a delegation's metering
        if not callable(install):
            raise _unmetered(agent)
        uninstall = install(self)
        owner = agent.id if agent_id is None else agent_id
        self._node_of[owner] = node
        if not own:
            return
        self._live[owner] = agent

        def detach() -> None:
            uninstall()
            if self._live.get(owner) is agent:
                del self._live[owner]

        agent.ctx.defer(detach)
        self._bound[node] = owner
        self._record(node, agent)

    def leave(self, node: str, agent: SessionId | None, *, joined: bool = True) -> None:
        """End a sharing child's metering through its parent's ``node`` (rule 3), and its
        ``join`` if it made one."""
        if agent is not None and self._node_of.get(agent) == node:
            del self._node_of[agent]
        if joined:
            self.ledger = core.leave(self.ledger, node)

    def close(self, node: str) -> None:
        """Close a settled child's node, returning its unused part (best effort)."""
        bound = self._bound.pop(node, None)
        if bound is not None and self._node_of.get(bound) == node:
            del self._node_of[bound]
        self._caps.pop(node, None)
        self._recorded.pop(node, None)
        try:
            self.ledger = core.close(self.ledger, node)
            self._timed.discard(node)
            self._free_output.discard(node)
        except SubagentError as error:  # open descendants keep its carve until they close
            _log.debug("budget node %s stays open: %s", node, error)

    def _record(self, node: str, agent: Agent) -> None:
        caps = self._caps[node]
        if self._recorded.get(node, _SHARED) != caps:  # a sharing child needs no record
            agent.session.append(BUDGET_SET, budget_data(caps))
            self._recorded[node] = caps

    # ------------------------------------------------------------------ StepMeter (rule 4)

    def admit(self, agent: SessionId, max_tokens: int | None) -> StepGrant:
        node = self._node_of[agent]
        want = _DEFAULT_WANT if not max_tokens else Amounts(1, 1, max_tokens)
        now = int(self._clock()) if node in self._timed else 0
        granted = core.reserve(self.ledger, node, want, core.MINIMAL_REQUEST, now)
        if isinstance(granted, Exhausted):
            name = granted.dimension.value
            raise SubagentError(
                ErrorCode.BUDGET_EXHAUSTED,
                f"the budget of {agent} is exhausted: no {name} left",
                field=f"budget.{name}",
            )
        self.ledger, reservation = granted
        free = node in self._free_output  # no output cap: the request keeps its own
        cap = max_tokens if free else reservation.granted.output_tokens
        return _make(StepGrant, (reservation, cap))

    def settle(
        self, agent: SessionId, grant: StepGrant, usage: Usage | None, *, ok: bool
    ) -> JsonObject | None:
        used: tuple[int, int, int]
        if not ok:
            used = grant.ticket.granted  # the whole grant
        elif usage is None:
            used = _ONE_REQUEST
        else:  # a plain tuple: a third of an ``Amounts``' instructions (core rule 11)
            used = (1, usage.input_tokens, usage.output_tokens)
        self.ledger = core.settle(self.ledger, grant.ticket, used)
        return charged_data(used)  # the agent records it in this span (rule 1)


def _unmetered(agent: Agent) -> SubagentError:
    return SubagentError(
        ErrorCode.UNSUPPORTED_CAPABILITY,
        f"agent {agent.id} cannot meter its model requests",
        field="budget",
    )


def _caps_of(ledger: Ledger, node: str, asked: Budget) -> Budget:
    """The caps a carved node records: what it got, plus the asked wall time."""
    return attrs.evolve(core.caps(ledger, node), wall_ms=asked.wall_ms)


class ChildBudget:
    """A carved node waiting for its child agent, or the parent's node a child shares
    (``shared``; ``joined`` unless the node needs no join, rule 3)."""

    __slots__ = ("_agent", "_closed", "book", "joined", "node", "shared")

    def __init__(
        self, book: BudgetBook, node: str, *, shared: bool = False, joined: bool = True
    ) -> None:
        self.book = book
        self.node = node
        self.shared = shared
        self.joined = joined
        self._agent: SessionId | None = None
        self._closed = False

    def attach(self, agent: Agent, agent_id: SessionId | None = None) -> None:
        """Meter ``agent`` (whose id is ``agent_id``, when the caller has it) through the node."""
        self._agent = agent_id = agent.id if agent_id is None else agent_id
        self.book.attach(self.node, agent, own=not self.shared, agent_id=agent_id)

    def close(self) -> None:
        """Close (or leave) the node once; a repeat is a no-op (a failed start may settle
        its run too)."""
        if self._closed:
            return
        self._closed = True
        if self.shared:
            self.book.leave(self.node, self._agent, joined=self.joined)
        else:
            self.book.close(self.node)


__all__ = ["DEFAULT_OUTPUT_RESERVATION", "BudgetBook", "ChildBudget", "check_budget"]
