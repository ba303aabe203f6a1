"""Tree budgets: model-request, token and wall-time caps that hold under concurrent fan-out.

Theory of operation
-------------------
1. A ``Budget`` caps any of four dimensions: model requests, input tokens, output tokens
   (counted from the usage the model reports) and wall time (a duration). ``None`` leaves a
   dimension uncapped. The host sets the root's budget; a child may ask for its own.
2. The ``Ledger`` holds one ``Node`` per open agent. For each counted dimension a node
   either has an *own* account (limit, consumed, reserved, carved: an ``AccountRow``, read
   as an ``Account`` through ``Node.accounts``) or shares
   its nearest capped ancestor's account: its ``payer`` for that dimension, fixed when the
   node opens, so every operation costs O(1) in the depth of the tree and the number of
   siblings (never a walk over ancestors).
3. **Carving.** A child that asks for a cap in a dimension its payer caps too gets
   ``min(asked, payer's remaining)``, and that amount moves into the payer's ``carved``. A
   payer with nothing left refuses the child (``BUDGET_EXHAUSTED``). A cap under an
   uncapped payer is simply the child's own. Wall time carves as a deadline: the child's
   deadline is ``min(now + asked, the parent's deadline)``.
4. **Reservation before work.** Each model request reserves, per dimension, between
   ``at_least`` and ``want`` of the payer's remaining (the adapter passes 1 and 1 model
   requests, the prompt's token estimate for input, and 1 up to the request's
   ``max_tokens`` for output, then caps the request at the grant). Either every dimension
   is granted or nothing changes and the refusal names the first dimension short (a
   passed deadline counts as wall time). The adapter calls this inside the no-await span
   that admits the model request, so concurrent siblings see each other's reservations
   and can never together overshoot.
5. **Settlement.** ``settle`` takes back the ``Reservation`` value ``reserve`` returned,
   releases it and charges the usage the model reported. A node keeps its unsettled
   reservations (``outstanding``: none, a lone one as it is, or more in a ``PMap`` by id,
   O(log) in their number; ``Node.reservations`` reads them as a map), so a
   reservation settles exactly once: settled again, forged, or never made there, it is
   ``ILLEGAL_TRANSITION``. Usage beyond a grant is charged too (never hidden); the
   invariant below then holds for every dimension whose grants bound the usage (model
   requests always; output tokens when ``max_tokens`` is capped at the grant). An aborted
   request whose usage is unknown settles with its whole grant.
6. **Closing** a node (a settled one-shot child, a released Activation) requires its
   reservations settled and its children closed (child-first teardown). Its own accounts'
   consumption is charged to its payers and their carve is returned, so the unused part
   flows back to the parent.
7. **Invariant** (INV-BUDGET-1, checked by ``spec.budget_machine``): for every account,
   ``consumed + reserved + carved <= limit`` whenever usage stays within grants, hence the
   reserved and consumed amounts of a whole subtree never exceed its root's limit.
8. Pure: the adapter passes ``now_ms``; reservation ids come from a counter in the ledger
   (distinct, so two equal grants of one node are two reservations).
9. **Restoring and raising.** ``charge`` books usage folded from a log on a reopened node
   (a cold resume) without a reservation. ``raise_caps`` lets the host raise the caps a
   node owns (the extra is carved from its payer like a child's cap, all or nothing) and
   push its deadline later. ``short_of`` names the dimension a minimal request would be
   refused on: the seam refuses follow-ups to such a child.
10. **Sharing.** A child that asks for no cap and no wall time of its own would get a node
   identical to its parent's (same payers, same deadline), so it needs none: ``join`` lets
   it meter through its parent's node (its reservations are the parent's, one node write
   each) and counts it as an open child, so the parent cannot close under it; ``leave``
   ends that. A joined child's usage is its parent's for every rule above.
11. **Cost.** Every ledger value (``Amounts``, ``Node``, ``Reservation``, ``Ledger``) is a
   named tuple (immutable, built in one step; an ``Amounts`` indexes by a dimension's
   position in ``COUNTED``), and a node's accounts are plain tuples (a plain tuple costs
   about a quarter of a named tuple's ``tuple.__new__``): a delegation metered through a
   shared node builds a handful of them, and their construction is most of what budgeting
   adds to it. ``reserve``, ``settle``, ``join`` and ``leave`` build their named tuples
   with ``tuple.__new__`` (``_make``: about two thirds of the instructions of a call to the
   class) and call no ``min``/``max`` builtin (each parses its arguments);
   ``bench/budget_ops.py`` counts them.
"""

from __future__ import annotations

import enum
from typing import Final, NamedTuple, TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.pmap import PMap


class Dimension(enum.Enum):
    """A budgeted dimension. The value is the wire and field spelling."""

    MODEL_REQUESTS = "model_requests"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    WALL_TIME = "wall_ms"


COUNTED: Final = (Dimension.MODEL_REQUESTS, Dimension.INPUT_TOKENS, Dimension.OUTPUT_TOKENS)
"""The dimensions kept as accounts, in the order ``Amounts`` and ``Node`` tuples use."""
DIMENSIONS: Final = (*COUNTED, Dimension.WALL_TIME)
"""Every dimension, in ``Budget`` field order (iterating the enum itself is slow)."""
COUNTED_NAMES: Final = tuple(dimension.value for dimension in COUNTED)
"""The wire names of ``COUNTED`` (reading an enum's ``value`` costs a descriptor call)."""
_make: Final = tuple.__new__
"""``_make(Node, (...))`` builds a named tuple without calling its class's Python
``__new__`` (rule 11): the hot transitions build theirs this way."""


class Amounts(NamedTuple):
    """An amount per counted dimension (usage, a reservation's want or grant), in
    ``COUNTED`` order: a named tuple, indexed by a dimension's position (rule 11)."""

    model_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@attrs.frozen
class Budget:
    """Caps per dimension; ``None`` leaves that dimension uncapped."""

    model_requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    wall_ms: int | None = None

    def counted(self) -> tuple[int | None, int | None, int | None]:
        return (self.model_requests, self.input_tokens, self.output_tokens)


def validate_budget(value: object, field: str) -> Budget:
    """Return ``value`` as a ``Budget`` whose caps are non-negative ints, or raise.

    ``INVALID_ARGUMENT`` names ``field`` and the offending dimension.
    """
    if not isinstance(value, Budget):
        raise invalid(field, "must be a Budget")
    caps = (value.model_requests, value.input_tokens, value.output_tokens, value.wall_ms)
    for index, cap in enumerate(caps):
        if cap is not None and (type(cap) is not int or cap < 0):
            raise invalid(
                f"{field}.{DIMENSIONS[index].value}",
                f"must be a non-negative integer or None, got {cap!r}",
            )
    return value


AccountRow: TypeAlias = "tuple[int, int, int, int]"
"""One capped dimension of one node as a node keeps it: ``(limit, consumed, reserved,
carved)``, a plain tuple (rule 11); ``Node.accounts`` reads them as ``Account``s."""


class Account(NamedTuple):
    """One capped dimension of one node: ``consumed + reserved + carved <= limit``.

    The view of an ``AccountRow`` for reading (``Node.accounts``): a node keeps plain
    tuples, as every reservation and settlement builds three of them and a named tuple
    costs several times a plain one (rule 11)."""

    limit: int
    consumed: int = 0
    reserved: int = 0
    carved: int = 0

    @property
    def remaining(self) -> int:
        return self.limit - self.consumed - self.reserved - self.carved


def grant_from(remaining: int, want: int, at_least: int) -> int | None:
    """The amount granted from ``remaining``: ``min(want, remaining)``, or None if short.

    pre: 0 <= at_least <= want
    post: __return__ is None or at_least <= __return__ <= want
    post: __return__ is None or __return__ <= max(remaining, 0) or want == 0
    """
    # conditionals, not ``min``/``max``: each builtin call parses its arguments (rule 11)
    granted = want if want <= remaining else (remaining if remaining > 0 else 0)
    return granted if granted >= at_least else None


def carve_from(remaining: int, asked: int) -> int | None:
    """The cap a child gets from its payer's ``remaining``, or None when nothing is left.

    A child asking for 0 gets 0 (a zero cap is legal: it refuses every request).

    pre: asked >= 0
    post: __return__ is None or 0 <= __return__ <= asked
    post: __return__ is None or __return__ <= max(remaining, 0) or asked == 0
    """
    if asked == 0:
        return 0
    granted = min(asked, max(remaining, 0))
    return granted if granted > 0 else None


def child_deadline(now_ms: int, asked_ms: int | None, parent_deadline: int | None) -> int | None:
    """The child's absolute deadline: its own wall time from now, never past the parent's.

    pre: asked_ms is None or asked_ms >= 0
    post: parent_deadline is None or (__return__ is not None and __return__ <= parent_deadline)
    post: asked_ms is None or (__return__ is not None and __return__ <= now_ms + asked_ms)
    """
    own = None if asked_ms is None else now_ms + asked_ms
    if own is None:
        return parent_deadline
    return own if parent_deadline is None else min(own, parent_deadline)


class Reservation(NamedTuple):
    """A granted reservation, settled exactly once: the caller hands this value back to
    ``settle``, which finds it among its node's ``outstanding``."""

    id: int
    node: str
    granted: Amounts


Held: TypeAlias = "PMap[int, Reservation] | Reservation"
"""A node's unsettled reservations as it keeps them: a lone one as it is (the common case:
no map to build or probe per request), else a map by id (rule 5)."""
_NONE_OUTSTANDING: Final[PMap[int, Reservation]] = PMap()


def _as_map(held: Held) -> PMap[int, Reservation]:
    return PMap({held.id: held}) if isinstance(held, Reservation) else held


def _kept(held: PMap[int, Reservation]) -> Held:
    """``held`` as a node keeps it: none as the shared empty map, a lone one as it is."""
    if len(held) > 1:
        return held
    return next(iter(held.values())) if held else _NONE_OUTSTANDING


class Node(NamedTuple):
    """One open agent: its own accounts (``AccountRow``s), its payers, deadline and what is
    still open: its open (and joined) children and its unsettled reservations (a named
    tuple)."""

    parent: str | None
    own: tuple[AccountRow | None, AccountRow | None, AccountRow | None]
    payers: tuple[str | None, str | None, str | None]
    deadline_ms: int | None
    open_children: int = 0
    outstanding: Held = _NONE_OUTSTANDING

    @property
    def reservations(self) -> PMap[int, Reservation]:
        """Its unsettled reservations by id (for reading)."""
        return _as_map(self.outstanding)

    @property
    def accounts(self) -> tuple[Account | None, Account | None, Account | None]:
        """Its own accounts, as ``Account``s (for reading)."""
        first, second, third = (None if row is None else Account(*row) for row in self.own)
        return (first, second, third)


@attrs.frozen
class Exhausted:
    """A refused reservation: which dimension is short (or past its deadline)."""

    dimension: Dimension


class Ledger(NamedTuple):
    """Every open node, each with its unsettled reservations (a named tuple; its empty map
    is shared, as a ``PMap`` never changes)."""

    nodes: PMap[str, Node] = PMap()
    next_reservation: int = 0

    @property
    def reservations(self) -> dict[int, Reservation]:
        """Every unsettled reservation by id, gathered from the nodes (for reading)."""
        return {
            held.id: held for node in self.nodes.values() for held in node.reservations.values()
        }


def _exhausted(dimension: Dimension, node: str) -> SubagentError:
    return SubagentError(
        ErrorCode.BUDGET_EXHAUSTED,
        f"the budget of {node!r} is exhausted: no {dimension.value} left",
        field=f"budget.{dimension.value}",
    )


def _node(ledger: Ledger, node: str) -> Node:
    found = ledger.nodes.get(node)
    if found is None:
        raise _not_open(node)
    return found


def _not_open(node: str) -> SubagentError:
    return SubagentError(ErrorCode.NOT_FOUND, f"no open budget node {node!r}", field="node")


_Edit: TypeAlias = "tuple[Node, list[AccountRow | None], list[int]]"
"""A node being changed: the node, its new own accounts, its open-children delta (one item)."""


def _edit(nodes: PMap[str, Node], edits: dict[str, _Edit], name: str) -> _Edit:
    """The pending change of ``name`` (started from its current node on first use)."""
    edit = edits.get(name)
    if edit is None:
        found = nodes[name]
        edit = edits[name] = (found, list(found.own), [0])
    return edit


def _own(nodes: PMap[str, Node], edits: dict[str, _Edit], payer: str, index: int) -> Account:
    """``payer``'s account of dimension ``index``, as changed so far."""
    account = _edit(nodes, edits, payer)[1][index]
    assert account is not None, "a payer owns its account"
    return Account(*account)


def _written(nodes: PMap[str, Node], edits: dict[str, _Edit]) -> PMap[str, Node]:
    """``nodes`` with every pending change written: one node built and set per node touched
    (never an ``attrs.evolve`` per account)."""
    for name, (old, own, (children,)) in edits.items():
        nodes = nodes.set(
            name,
            Node(
                old.parent,
                (own[0], own[1], own[2]),
                old.payers,
                old.deadline_ms,
                old.open_children + children,
                old.outstanding,
            ),
        )
    return nodes


def open_root(ledger: Ledger, node: str, budget: Budget, now_ms: int) -> Ledger:
    """Open a root node with the host's ``budget`` (raises ``DUPLICATE_CHILD`` if open)."""
    return _open(ledger, node, None, validate_budget(budget, "budget"), now_ms)


def open_child(ledger: Ledger, parent: str, node: str, asked: Budget, now_ms: int) -> Ledger:
    """Open ``node`` under ``parent``, carving its caps from the parent's payers (3)."""
    return _open(ledger, node, parent, validate_budget(asked, "budget"), now_ms)


def _open(ledger: Ledger, node: str, parent: str | None, asked: Budget, now_ms: int) -> Ledger:
    if node in ledger.nodes:
        raise SubagentError(
            ErrorCode.DUPLICATE_CHILD, f"budget node {node!r} is already open", field="node"
        )
    edits: dict[str, _Edit] = {}
    up: Node | None = None
    if parent is not None:
        up = _node(ledger, parent)
        if up.deadline_ms is not None and now_ms >= up.deadline_ms:
            raise _exhausted(Dimension.WALL_TIME, parent)
        edits[parent] = (up, list(up.own), [1])  # one more open child
    nodes = ledger.nodes
    own: list[AccountRow | None] = [None, None, None]
    payers: list[str | None] = [None, None, None] if up is None else list(up.payers)
    for index, cap in enumerate(asked.counted()):
        if cap is None:
            continue  # shares its parent's payer (or stays uncapped)
        inherited = payers[index]
        payers[index] = node
        if inherited is None:
            own[index] = (cap, 0, 0, 0)
            continue
        account = _own(nodes, edits, inherited, index)
        carved = carve_from(account.remaining, cap)
        if carved is None:
            raise _exhausted(COUNTED[index], inherited)
        own[index] = (carved, 0, 0, 0)
        _edit(nodes, edits, inherited)[1][index] = (
            account.limit,
            account.consumed,
            account.reserved,
            account.carved + carved,
        )
    deadline = child_deadline(now_ms, asked.wall_ms, None if up is None else up.deadline_ms)
    opened = Node(
        parent=parent,
        own=(own[0], own[1], own[2]),
        payers=(payers[0], payers[1], payers[2]),
        deadline_ms=deadline,
    )
    return Ledger(_written(nodes, edits).set(node, opened), ledger.next_reservation)


def reserve(
    ledger: Ledger, node: str, want: Amounts, at_least: Amounts, now_ms: int
) -> tuple[Ledger, Reservation] | Exhausted:
    """Reserve one model request's share for ``node``, all dimensions or none (4).

    ``now_ms`` is read only against ``node``'s deadline: for a node without one
    (``deadline_ms`` None) any value will do."""
    opened = ledger.nodes.get(node)  # not ``_node``: one call fewer on every request
    if opened is None:
        raise _not_open(node)
    if opened.deadline_ms is not None and now_ms >= opened.deadline_ms:
        return Exhausted(Dimension.WALL_TIME)
    granted = [0, 0, 0]
    nodes = ledger.nodes
    mine = list(opened.own)  # the accounts ``node`` pays from itself
    edits: dict[str, _Edit] = {}  # its payers above, if any
    for index, payer in enumerate(opened.payers):
        wanted, least = want[index], at_least[index]
        if not 0 <= least <= wanted:
            raise invalid(
                f"want.{COUNTED_NAMES[index]}",
                f"need 0 <= at_least <= want, got {least} and {wanted}",
            )
        if payer is None:  # uncapped here: nothing to book
            granted[index] = wanted
            continue
        own = mine if payer == node else (edits.get(payer) or _edit(nodes, edits, payer))[1]
        account = own[index]
        assert account is not None, "a payer owns its account"
        limit, consumed, reserved, carved = account
        left = limit - consumed - reserved - carved
        # ``grant_from(left, wanted, least)`` inline (a call per dimension costs more than
        # the rest of its step; ``test_budget_6_reserve_grants_what_grant_from_grants``)
        amount = wanted if wanted <= left else (left if left > 0 else 0)
        if amount < least:
            return Exhausted(COUNTED[index])
        granted[index] = amount
        own[index] = (limit, consumed, reserved + amount, carved)
    whole = granted == [want[0], want[1], want[2]]  # then ``want`` is the grant: no new one
    reservation = _make(
        Reservation, (ledger.next_reservation, node, want if whole else _make(Amounts, granted))
    )
    if edits:
        nodes = _written(nodes, edits)
    held: Held = opened.outstanding
    if held is _NONE_OUTSTANDING:
        held = reservation  # the node's lone one (rule 5)
    else:
        held = _kept(_as_map(held).set(reservation.id, reservation))
    # the node written with its accounts and reservations (no helper: a call per request)
    parent, _, payers, deadline, children, _ = opened
    written = _make(Node, (parent, (mine[0], mine[1], mine[2]), payers, deadline, children, held))
    return _make(Ledger, (nodes.set(node, written), ledger.next_reservation + 1)), reservation


def settle(ledger: Ledger, reservation: Reservation, used: tuple[int, int, int] | None) -> Ledger:
    """Release ``reservation`` (the value ``reserve`` returned) and charge ``used`` (None:
    the whole grant, 5); a reservation not outstanding (settled already, or never made
    here) is ``ILLEGAL_TRANSITION``. ``used`` is in ``COUNTED`` order: an ``Amounts`` or a
    plain tuple (cheaper to build, rule 11)."""
    name = reservation.node
    opened = ledger.nodes.get(name)
    held: Held | None = None if opened is None else opened.outstanding
    left: Held = _NONE_OUTSTANDING
    if isinstance(held, Reservation):  # the node's lone one (rule 5): no map to probe
        if held != reservation:
            held = None
    elif held is not None:
        if held.get(reservation.id) != reservation:
            held = None
        else:
            left = _kept(held.remove(reservation.id))
    if opened is None or held is None:
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION,
            f"reservation {reservation.id} is not outstanding",
            field="reservation",
        )
    grants = reservation.granted
    spent = grants if used is None else used
    nodes = ledger.nodes
    mine = list(opened.own)
    edits: dict[str, _Edit] = {}
    for index, payer in enumerate(opened.payers):
        if spent[index] < 0:
            raise invalid(
                f"used.{COUNTED[index].value}", f"must be non-negative, got {spent[index]}"
            )
        if payer is None:
            continue
        own = mine if payer == name else (edits.get(payer) or _edit(nodes, edits, payer))[1]
        account = own[index]
        assert account is not None, "a payer owns its account"
        limit, consumed, reserved, carved = account
        own[index] = (limit, consumed + spent[index], reserved - grants[index], carved)
    if edits:
        nodes = _written(nodes, edits)
    parent, _, payers, deadline, children, _ = opened  # written as ``reserve`` writes it
    written = _make(Node, (parent, (mine[0], mine[1], mine[2]), payers, deadline, children, left))
    return _make(Ledger, (nodes.set(name, written), ledger.next_reservation))


def close(ledger: Ledger, node: str) -> Ledger:
    """Close ``node``: charge its own consumption to its payers, return the rest (6)."""
    opened = _node(ledger, node)
    if opened.outstanding or opened.open_children:
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION,
            f"budget node {node!r} still has {len(opened.reservations)} reservations and "
            f"{opened.open_children} open children",
            field="node",
        )
    nodes = ledger.nodes.remove(node)
    if opened.parent is None:
        return Ledger(nodes, ledger.next_reservation)
    edits: dict[str, _Edit] = {}
    parent = _edit(nodes, edits, opened.parent)
    parent[2][0] -= 1
    for index, account in enumerate(opened.accounts):
        payer = parent[0].payers[index]
        if account is None or payer is None:
            continue
        above = _own(nodes, edits, payer, index)
        edits[payer][1][index] = (
            above.limit,
            above.consumed + account.consumed,
            above.reserved,
            above.carved - account.limit,
        )
    return Ledger(_written(nodes, edits), ledger.next_reservation)


def join(ledger: Ledger, node: str, now_ms: int) -> Ledger:
    """Let a child with no caps of its own meter through ``node`` (rule 10); refused like
    ``open_child`` once ``node``'s deadline has passed (``now_ms`` is read only against
    it: for a node without one any value will do)."""
    opened = ledger.nodes.get(node)
    if opened is None:
        raise _not_open(node)
    if opened.deadline_ms is not None and now_ms >= opened.deadline_ms:
        raise _exhausted(Dimension.WALL_TIME, node)
    return _with_children(ledger, node, opened, 1)


def leave(ledger: Ledger, node: str) -> Ledger:
    """End a ``join`` of ``node`` (rule 10)."""
    opened = ledger.nodes.get(node)
    if opened is None:
        raise _not_open(node)
    if not opened.open_children:
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION, f"budget node {node!r} has no open child", field="node"
        )
    return _with_children(ledger, node, opened, -1)


def _with_children(ledger: Ledger, name: str, node: Node, delta: int) -> Ledger:
    parent, own, payers, deadline, children, outstanding = node
    changed = _make(Node, (parent, own, payers, deadline, children + delta, outstanding))
    return _make(Ledger, (ledger.nodes.set(name, changed), ledger.next_reservation))


def charge(ledger: Ledger, node: str, used: Amounts) -> Ledger:
    """Charge ``used`` to ``node``'s payers without a reservation (usage folded from a log)."""
    opened = _node(ledger, node)
    nodes = ledger.nodes
    edits: dict[str, _Edit] = {}
    for index, spent in enumerate(used):
        if spent < 0:
            raise invalid(f"used.{COUNTED[index].value}", f"must be non-negative, got {spent}")
        payer = opened.payers[index]
        if payer is None or spent == 0:
            continue
        account = _own(nodes, edits, payer, index)
        edits[payer][1][index] = (
            account.limit,
            account.consumed + spent,
            account.reserved,
            account.carved,
        )
    return Ledger(_written(nodes, edits), ledger.next_reservation)


MINIMAL_REQUEST: Final = Amounts(1, 1, 1)
"""The least a model request reserves in every counted dimension (``short_of``)."""


def short_of(ledger: Ledger, node: str, now_ms: int) -> Dimension | None:
    """The dimension a minimal model request of ``node`` would be refused on, or None."""
    refused = reserve(ledger, node, MINIMAL_REQUEST, MINIMAL_REQUEST, now_ms)
    return refused.dimension if isinstance(refused, Exhausted) else None


def raise_caps(ledger: Ledger, node: str, budget: Budget, now_ms: int) -> Ledger:
    """Raise the caps ``node`` owns to ``budget`` (rule 9); a cap never shrinks.

    A dimension ``node`` does not own cannot be raised here (``INVALID_ARGUMENT``: raise it
    where it is capped); the extra is carved from the parent's payer or ``BUDGET_EXHAUSTED``
    changes nothing. ``wall_ms`` moves the deadline to ``now + wall_ms`` when that is later
    (never past the parent's).
    """
    opened = _node(ledger, node)
    budget = validate_budget(budget, "budget")
    parent = None if opened.parent is None else ledger.nodes[opened.parent]
    nodes = ledger.nodes
    edits: dict[str, _Edit] = {}
    for index, cap in enumerate(budget.counted()):
        if cap is None:
            continue
        field = f"budget.{COUNTED[index].value}"
        if opened.payers[index] != node:
            raise invalid(field, f"{node!r} has no cap of its own here; raise its payer's")
        mine = _own(nodes, edits, node, index)
        extra = cap - mine.limit
        if extra <= 0:
            continue
        payer = None if parent is None else parent.payers[index]
        if payer is not None:
            above = _own(nodes, edits, payer, index)
            if carve_from(above.remaining, extra) != extra:
                raise _exhausted(COUNTED[index], payer)
            edits[payer][1][index] = (
                above.limit,
                above.consumed,
                above.reserved,
                above.carved + extra,
            )
        edits[node][1][index] = (cap, mine.consumed, mine.reserved, mine.carved)  # rows, not views
    deadline = opened.deadline_ms
    if budget.wall_ms is not None and deadline is not None:
        later = child_deadline(
            now_ms, budget.wall_ms, None if parent is None else parent.deadline_ms
        )
        deadline = max(deadline, later or deadline)
    nodes = _written(nodes, edits)
    me = nodes[node]
    return ledger._replace(nodes=nodes.set(node, me._replace(deadline_ms=deadline)))


def caps(ledger: Ledger, node: str) -> Budget:
    """The caps ``node`` owns now (None where it shares a payer's); wall time not kept."""
    opened = _node(ledger, node)
    limits = [None if account is None else account[0] for account in opened.own]
    return Budget(limits[0], limits[1], limits[2], None)


def remaining(ledger: Ledger, node: str) -> Budget:
    """What ``node`` may still reserve per dimension (None: uncapped), for listings."""
    opened = _node(ledger, node)
    counted = [
        None if payer is None else max(_own(ledger.nodes, {}, payer, index).remaining, 0)
        for index, payer in enumerate(opened.payers)
    ]
    return Budget(counted[0], counted[1], counted[2], None)


__all__ = [
    "COUNTED",
    "COUNTED_NAMES",
    "DIMENSIONS",
    "Account",
    "AccountRow",
    "Amounts",
    "Budget",
    "Dimension",
    "Exhausted",
    "Held",
    "Ledger",
    "Node",
    "Reservation",
    "MINIMAL_REQUEST",
    "caps",
    "carve_from",
    "charge",
    "child_deadline",
    "close",
    "grant_from",
    "join",
    "leave",
    "open_child",
    "open_root",
    "raise_caps",
    "remaining",
    "reserve",
    "settle",
    "short_of",
    "validate_budget",
]
