"""The tree-budget machine: concurrent fan-out against ``core.budget``, with its own oracle.

It needs Hypothesis (a development / ``verify`` extra dependency).

Hypothesis plays a tree of agents that fan out: children open under any open node with or
without caps of their own, every open node reserves model requests and output tokens in any
interleaving (the reservations of siblings overlap, as concurrent children's do), settles
them in any order with usage within the grant, or aborts them (usage unknown: the whole
grant is charged), and closes child-first; children that ask for nothing join a node and
leave it (a joined node cannot close). The oracle keeps every grant and every settled
usage with the ancestry of the node that made it, independently of the ledger's accounts.
After every step:

- INV-BUDGET-1: for every open node with a cap of its own, the amounts reserved and consumed
  anywhere in its subtree (closed descendants included) never exceed that cap, and the root's
  never exceed the host's budget;
- INV-BUDGET-2: a child's cap never exceeds what it asked for;
- INV-BUDGET-3: a refused reservation changed nothing, and names a dimension that really is
  short for that node (its payer's remaining is below ``at_least``, or its deadline passed).
"""

from __future__ import annotations

import itertools

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from dsh_subagent.core import budget
from dsh_subagent.core.budget import COUNTED, Amounts, Budget, Exhausted, Ledger, Reservation
from dsh_subagent.core.errors import ErrorCode, SubagentError

_caps = st.one_of(st.none(), st.integers(min_value=0, max_value=12))


@attrs.frozen
class _Charge:
    path: tuple[str, ...]  # the charging node and its ancestors, nearest first
    amounts: Amounts


class BudgetMachine(RuleBasedStateMachine):
    """Fan-out, overlapping reservations, settlement in any order, aborts, child-first close."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger()
        self.host = Budget()
        self.asked: dict[str, Budget] = {}
        self.parent_of: dict[str, str | None] = {}
        self.grants: dict[int, _Charge] = {}
        self.held: dict[int, Reservation] = {}  # what ``settle`` is handed back
        self.settled: list[_Charge] = []
        self.names = (f"n{i}" for i in itertools.count())
        self.now = 0
        self.joined: list[str] = []

    @initialize(requests=_caps, output=_caps)
    def open_root(self, requests: int | None, output: int | None) -> None:
        self.host = Budget(model_requests=requests, output_tokens=output)
        self.ledger = budget.open_root(self.ledger, "root", self.host, self.now)
        self.asked["root"] = self.host
        self.parent_of["root"] = None

    def _open(self) -> list[str]:
        return sorted(self.ledger.nodes)

    def _path(self, node: str) -> tuple[str, ...]:
        path: list[str] = []
        current: str | None = node
        while current is not None:
            path.append(current)
            current = self.parent_of[current]
        return tuple(path)

    @rule(data=st.data(), requests=_caps, output=_caps)
    def open_child(self, data: st.DataObject, requests: int | None, output: int | None) -> None:
        parent = data.draw(st.sampled_from(self._open()), label="parent")
        name = next(self.names)
        asked = Budget(model_requests=requests, output_tokens=output)
        try:
            self.ledger = budget.open_child(self.ledger, parent, name, asked, self.now)
        except SubagentError as error:
            refused = error.code
            assert refused is ErrorCode.BUDGET_EXHAUSTED
            return
        self.asked[name] = asked
        self.parent_of[name] = parent

    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self._open()), label="node")
        self.ledger = budget.join(self.ledger, node, self.now)
        self.joined.append(node)

    @precondition(lambda self: bool(self.joined))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.joined) - 1), label="joined")
        self.ledger = budget.leave(self.ledger, self.joined.pop(index))

    @rule(data=st.data(), output=st.integers(min_value=1, max_value=6))
    def reserve(self, data: st.DataObject, output: int) -> None:
        node = data.draw(st.sampled_from(self._open()), label="node")
        want = Amounts(model_requests=1, output_tokens=output)
        least = Amounts(model_requests=1, output_tokens=1)
        before = self.ledger
        result = budget.reserve(self.ledger, node, want, least, self.now)
        if isinstance(result, Exhausted):
            assert self.ledger is before  # INV-BUDGET-3: nothing changed
            index = COUNTED.index(result.dimension)
            payer = before.nodes[node].payers[index]
            assert payer is not None
            account = before.nodes[payer].accounts[index]
            assert account is not None
            assert account.remaining < least[index]
            return
        self.ledger, reservation = result
        self.grants[reservation.id] = _Charge(self._path(node), reservation.granted)
        self.held[reservation.id] = reservation

    @precondition(lambda self: bool(self.grants))
    @rule(data=st.data(), aborted=st.booleans())
    def settle(self, data: st.DataObject, aborted: bool) -> None:
        rid = data.draw(st.sampled_from(sorted(self.grants)), label="reservation")
        charge, reservation = self.grants.pop(rid), self.held.pop(rid)
        granted = charge.amounts
        if aborted:
            used = granted
            self.ledger = budget.settle(self.ledger, reservation, None)
        else:
            used = Amounts(
                model_requests=data.draw(st.integers(0, granted.model_requests)),
                output_tokens=data.draw(st.integers(0, granted.output_tokens)),
            )
            self.ledger = budget.settle(self.ledger, reservation, used)
        self.settled.append(_Charge(charge.path, used))

    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        closable = [
            name
            for name, node in self.ledger.nodes.items()
            if name != "root" and not node.outstanding and not node.open_children
        ]
        if not closable:
            return
        name = data.draw(st.sampled_from(sorted(closable)), label="node")
        self.ledger = budget.close(self.ledger, name)

    def _subtree_total(self, node: str) -> tuple[int, int, int]:
        totals = [0, 0, 0]
        for charge in itertools.chain(self.grants.values(), self.settled):
            if node in charge.path:
                for index, amount in enumerate(charge.amounts):
                    totals[index] += amount
        return (totals[0], totals[1], totals[2])

    @invariant()
    def inv_budget_1_no_subtree_overshoots_its_cap(self) -> None:
        for name, node in self.ledger.nodes.items():
            totals = self._subtree_total(name)
            for index, account in enumerate(node.accounts):
                if account is not None:
                    assert totals[index] <= account.limit, (name, COUNTED[index], totals)
        root_totals = self._subtree_total("root")
        for index, cap in enumerate(self.host.counted()):
            if cap is not None:
                assert root_totals[index] <= cap, (COUNTED[index], root_totals, cap)

    @invariant()
    def inv_budget_2_a_cap_never_exceeds_what_was_asked(self) -> None:
        for name, node in self.ledger.nodes.items():
            for account, cap in zip(node.accounts, self.asked[name].counted(), strict=True):
                if account is not None:
                    assert cap is not None
                    assert account.limit <= cap
