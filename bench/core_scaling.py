"""Per-event cost of the continuation manager versus the number of live Activations.

Applies the same event stream (start a child, deliver, settle, flush, release) to managers
already holding 10, 1,000 and 100,000 live Activations and prints the cost per event and
the ratio to the smallest manager (target: <= 1.5x). Then plans the child-first teardown of
a 100,000-node tree and of a 100,000-deep chain, and opens a whole-manager drain over
100,000 Activations. Prints results only; nothing here is asserted.

Run: ``.venv/bin/python bench/core_scaling.py``
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from dsh_subagent.core.authority import AgentRef, ParentAuthority, Presented
from dsh_subagent.core.manager import apply
from dsh_subagent.core.manager.events import (
    AgentBecameIdle,
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    DescriptorSnapshotted,
    DisposalFinished,
    DrainRequested,
    Event,
    FlushReported,
    FollowupRequested,
    MessageAccepted,
    MessageClaimed,
    Phase,
    WholeManager,
)
from dsh_subagent.core.manager.state import Activation, ManagerState
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.teardown import FlushOutcome, plan_teardown
from dsh_subagent.core.values import EventId, KnownStop, MessageId, RunId, SessionId

SIZES = (10, 1_000, 100_000)
CYCLES = 2_000
REPEATS = 3
HOST = AgentRef(SessionId("host"), 1)


def filled_manager(size: int) -> ManagerState:
    """A manager holding ``size`` resident Activations, each running one accepted message."""
    records: PMap[SessionId, Activation] = PMap()
    for n in range(size):
        child_id = SessionId(f"live-{n}")
        agent = AgentRef(child_id, 1)
        record = Activation(
            child_id,
            Phase.RESIDENT,
            parent_session=SessionId(f"top-{n}"),
            agent=agent,
            lineage=frozenset({agent}),
            epoch=1,
            run_id=RunId(f"run-{n}"),
            accepted=frozenset({MessageId(f"m-{n}")}),
            announced=True,
        )
        records = records.set(child_id, record)
    return ManagerState(activations=records)


def cycle_events(cycle: int) -> Iterator[Event]:
    """One child's whole life: 11 events touching one Activation each."""
    child_id = SessionId(f"probe-{cycle}")
    agent = AgentRef(child_id, 1)
    message = MessageId(f"pm-{cycle}")
    ids = (EventId(f"{cycle}-{step}") for step in range(11))
    authority = ParentAuthority(Presented(HOST, 1))
    yield ChildIdReserved(next(ids), child_id, HOST)
    yield DescriptorSnapshotted(next(ids), child_id)
    yield ChildPrepared(next(ids), child_id)
    lineage = frozenset({agent, HOST})
    yield ChildMaterialized(next(ids), child_id, RunId(f"pr-{cycle}"), agent, lineage)
    yield FollowupRequested(next(ids), child_id, message, authority)
    yield MessageAccepted(next(ids), child_id, message)
    yield MessageClaimed(next(ids), child_id, message)
    yield AgentBecameIdle(next(ids), child_id)
    yield FlushReported(next(ids), child_id, FlushOutcome.OK)
    outcome = EpochOutcome(KnownStop.COMPLETED)
    yield DisposalFinished(next(ids), child_id, outcome, MessageId(f"n-{cycle}"))


def per_event_seconds(state: ManagerState) -> float:
    """Best-of-``REPEATS`` wall time per event of the cycle stream."""
    stream = [event for cycle in range(CYCLES) for event in cycle_events(cycle)]
    best = float("inf")
    for _ in range(REPEATS):
        current = state
        started = time.perf_counter()
        for event in stream:
            current, _effects = apply(current, event)
        best = min(best, time.perf_counter() - started)
        assert len(current.activations) == len(state.activations)
    return best / len(stream)


def timed(label: str, action: Callable[[], object]) -> None:
    started = time.perf_counter()
    action()
    print(f"{label:<52} {time.perf_counter() - started:8.3f} s")


def main() -> None:
    print("per-event cost of apply() versus live Activations")
    baseline = 0.0
    for size in SIZES:
        cost = per_event_seconds(filled_manager(size))
        baseline = baseline or cost
        print(f"  {size:>7} live: {cost * 1e6:7.2f} us/event   ratio {cost / baseline:5.2f}x")

    n = 100_000
    tree = {
        SessionId(str(i)): [SessionId(str(c)) for c in (2 * i + 1, 2 * i + 2) if c < n]
        for i in range(n)
    }
    chain = {SessionId(str(i)): [SessionId(str(i + 1))] if i + 1 < n else [] for i in range(n)}
    timed("plan_teardown: 100,000-node binary tree", lambda: plan_teardown(tree, [SessionId("0")]))
    timed("plan_teardown: 100,000-deep chain", lambda: plan_teardown(chain, [SessionId("0")]))
    full = filled_manager(n)
    drain = DrainRequested(EventId("drain"), WholeManager())
    timed("apply(DrainRequested whole) over 100,000 Activations", lambda: apply(full, drain))


if __name__ == "__main__":
    main()
