"""The breadth-first search engine every exhaustive model shares (``spec.modelcheck``).

Theory of operation
-------------------
1. A ``Model`` describes one pure machine to the search: its initial nodes, the finite
   alphabet enabled in a node (from a small scope), one step (the core's ``apply`` plus the
   harness's bookkeeping), a node's canonical key, the checks on every edge and on every new
   node, which nodes are quiescent and which events are progress. A node is the core's state
   plus whatever the harness must remember for the checks.
2. ``search`` runs breadth-first from the initial nodes, dedups nodes by key and keeps one
   parent pointer per node, so the first violation found has a shortest event trace. Every
   check is counted per ID (``Result.checks``), so a report can show it ran.
3. A step that raises goes to ``Model.refused``: a refusal the chart agrees with is no
   violation (and reaches no new node); anything else is one.
4. After the search, INV-MC-3: from every reachable node a quiescent one is reachable by
   progress events alone (no stuck states), a backward reachability over the recorded edges.
5. The chart edges each step took are collected; ``Result.edges_missed`` names those never
   taken (unreachable, or a scope too small).
"""

from __future__ import annotations

import abc
import collections
import enum
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Final, Generic, TypeVar

import attrs

from dsh_subagent.core.errors import SubagentError
from dsh_subagent.spec.charts import Edge

N = TypeVar("N")
E = TypeVar("E")
R = TypeVar("R")
Findings = Mapping[str, list[str]]
"""Problems found by check ID; an ID mapped to an empty list was checked and held."""

STUCK = "INV-MC-3"


@attrs.frozen
class Violation:
    """A property that failed, and the shortest event trace from an initial node to it."""

    check: str
    detail: str
    events: tuple[object, ...]
    start: object = None
    """The initial node the trace starts from (models with one initial node leave it)."""


@attrs.frozen
class Result:
    """What one search explored and found."""

    machine: str
    scope: str
    states: int
    transitions: int
    depth: int
    seconds: float
    violations: tuple[Violation, ...]
    edges_taken: frozenset[Edge]
    chart_edges: frozenset[Edge]
    checks: Mapping[str, int]
    nodes: tuple[object, ...] = ()
    """Every node reached, in BFS order (kept only when ``search(..., keep_nodes=True)``)."""

    @property
    def edges_missed(self) -> frozenset[Edge]:
        """Chart edges the search never took (unreachable, or the scope is too small)."""
        return self.chart_edges - self.edges_taken


class Model(abc.ABC, Generic[N, E, R]):
    """One machine as the search sees it (rule 1): nodes ``N``, events ``E``, step records ``R``."""

    name: str
    chart_edges: frozenset[Edge]

    @abc.abstractmethod
    def describe(self) -> str:
        """The scope in a few words, for reports."""

    @abc.abstractmethod
    def initial(self) -> Sequence[N]:
        """The nodes the search starts from."""

    @abc.abstractmethod
    def enabled(self, node: N) -> Iterable[E]:
        """Every event of the scope's alphabet worth applying in ``node``."""

    @abc.abstractmethod
    def step(self, node: N, event: E) -> tuple[N, R]:
        """The node after ``event`` and a record of the step for ``check_edge``; may raise."""

    @abc.abstractmethod
    def key(self, node: N) -> Hashable:
        """The node's canonical key: equal keys are one state."""

    @abc.abstractmethod
    def check_edge(self, before: N, event: E, after: N, record: R, taken: set[Edge]) -> Findings:
        """Every check of one edge; adds the chart edges it took to ``taken``."""

    @abc.abstractmethod
    def check_node(self, node: N) -> Findings:
        """Every state invariant of a newly reached node."""

    @abc.abstractmethod
    def quiescent(self, node: N) -> bool:
        """Whether ``node`` is a resting state INV-MC-3 must be able to reach."""

    @abc.abstractmethod
    def progress(self, event: E) -> bool:
        """Whether ``event`` is one INV-MC-3 may use: the harness's own answers."""

    def refused(self, node: N, event: E, error: Exception) -> Findings:
        """A step raised: by default a violation."""
        return {"RAISES": [f"{type(error).__name__}: {error}"]}

    def unchanged(self, before: N, after: N) -> bool:
        """A cheap sufficient test that a step changed nothing (skips the key)."""
        return False


_NONE: Final = (0,)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    """The attrs field names of ``kind`` (a record; else attrs raises ``NotAnAttrsClassError``)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in attrs.fields(kind))
    return names


def image(value: object, rn: Callable[[str], str] = str) -> object:
    """A totally ordered, hashable image of ``value``, every string renamed by ``rn``.

    Derived from the value's own structure (``attrs.fields`` for records), so a field added to
    ``Activation`` or ``ManagerState`` is in the key without anyone listing it; a type tag
    first keeps images of different kinds comparable.
    """
    kind = type(value)
    if kind is str:
        return (2, rn(value))  # type: ignore[arg-type]
    if value is None:
        return _NONE
    if kind is bool or kind is int or kind is float:
        return (1, value)
    if kind is frozenset:
        return (5, tuple(sorted([image(v, rn) for v in value])))  # type: ignore[attr-defined,type-var]
    if kind is tuple:
        return (6, tuple([image(v, rn) for v in value]))  # type: ignore[attr-defined]
    if isinstance(value, enum.Enum):
        return (3, value.name)
    if isinstance(value, Mapping):
        items = [(image(k, rn), image(v, rn)) for k, v in value.items()]
        return (7, tuple(sorted(items)))  # type: ignore[type-var,unused-ignore]
    names = _field_names(kind)
    return (4, kind.__name__, tuple([image(getattr(value, n), rn) for n in names]))


def freeze(value: object) -> Hashable:
    """A hashable stand-in for ``value``: itself when hashable, else its frozen parts.

    The cheap key of a model without symmetry (no renaming, so no order is needed).
    """
    if isinstance(value, Mapping):
        return frozenset((k, freeze(v)) for k, v in value.items())
    try:
        hash(value)
    except TypeError:
        pass
    else:
        return value  # type: ignore[return-value,unused-ignore]
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    names = _field_names(type(value))
    return (type(value).__name__, tuple(freeze(getattr(value, n)) for n in names))


def search(
    model: Model[N, E, R],
    *,
    max_violations: int = 1,
    max_states: int | None = None,
    keep_nodes: bool = False,
) -> Result:
    """Breadth-first search of every node the model reaches; every check on every edge."""
    started = time.monotonic()
    nodes: list[N] = []
    keys: dict[Hashable, int] = {}
    parent: list[tuple[int, E] | None] = []
    level: list[int] = []
    prog_preds: list[set[int]] = []
    taken: set[Edge] = set()
    checks: collections.Counter[str] = collections.Counter()
    violations: list[Violation] = []
    transitions = 0

    def trace(index: int, last: E | None) -> Violation:
        events: list[object] = [] if last is None else [last]
        while (link := parent[index]) is not None:
            index, event = link
            events.append(event)
        return Violation("", "", tuple(reversed(events)), nodes[index])

    def report(found: Findings, index: int, last: E | None = None) -> None:
        for check, problems in found.items():
            checks[check] += 1
            for problem in problems:
                violations.append(attrs.evolve(trace(index, last), check=check, detail=problem))

    def add(node: N, link: tuple[int, E] | None, depth: int) -> int:
        index = keys[model.key(node)] = len(nodes)
        nodes.append(node)
        parent.append(link)
        level.append(depth)
        prog_preds.append(set())
        report(model.check_node(node), index)
        return index

    queue = collections.deque(
        add(node, None, 0) for node in model.initial() if model.key(node) not in keys
    )
    while queue and len(violations) < max_violations and len(nodes) != max_states:
        index = queue.popleft()
        node = nodes[index]
        for event in model.enabled(node):
            transitions += 1
            try:
                after, record = model.step(node, event)
            except (SubagentError, AssertionError) as error:
                report(model.refused(node, event, error), index, event)
            else:
                report(model.check_edge(node, event, after, record, taken), index, event)
                target = index if model.unchanged(node, after) else keys.get(model.key(after))
                if target is None:
                    target = add(after, (index, event), level[index] + 1)
                    queue.append(target)
                if model.progress(event):
                    prog_preds[target].add(index)
            if len(violations) >= max_violations:
                break
    if not violations:
        stuck = _stuck([model.quiescent(n) for n in nodes], prog_preds)
        checks[STUCK] = len(nodes)
        if stuck is not None:
            violations.append(
                attrs.evolve(
                    trace(stuck, None),
                    check=STUCK,
                    detail="no quiescent state is reachable by progress events",
                )
            )
    return Result(
        model.name,
        model.describe(),
        len(nodes),
        transitions,
        max(level, default=0),
        time.monotonic() - started,
        tuple(violations[:max_violations]),
        frozenset(taken),
        model.chart_edges,
        dict(checks),
        tuple(nodes) if keep_nodes else (),
    )


def _stuck(good: list[bool], preds: list[set[int]]) -> int | None:
    """The first node (in BFS order, so shortest trace) that cannot reach quiescence."""
    frontier = [i for i, ok in enumerate(good) if ok]
    while frontier:
        index = frontier.pop()
        for pred in preds[index]:
            if not good[pred]:
                good[pred] = True
                frontier.append(pred)
    return next((i for i, ok in enumerate(good) if not ok), None)
