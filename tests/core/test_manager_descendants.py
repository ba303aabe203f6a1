"""``manager.ops.descendants``: what a scoped drain covers, disposing Activations included."""

from __future__ import annotations

from dsh_subagent.core.authority import AgentRef
from dsh_subagent.core.manager.events import Phase
from dsh_subagent.core.manager.ops import descendants
from dsh_subagent.core.manager.state import Activation
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import SessionId


def ref(name: str) -> AgentRef:
    return AgentRef(SessionId(name), 1)


def record(name: str, phase: Phase, *lineage: str) -> Activation:
    agent = None if phase is Phase.RESERVED else ref(name)
    names = frozenset(ref(each) for each in lineage)
    return Activation(SessionId(name), phase, SessionId("root"), agent=agent, lineage=names)


def test_tear_8_scoped_drain_covers_live_descendants_including_disposing_ones() -> None:
    records: PMap[SessionId, Activation] = PMap()
    for each in (
        record("host", Phase.RESIDENT, "host", "root"),
        record("running", Phase.RESIDENT, "running", "host"),
        record("closing", Phase.FLUSHING, "closing", "host"),
        record("unpublished", Phase.RESERVED),
        record("elsewhere", Phase.RESIDENT, "elsewhere", "other"),
    ):
        records = records.set(each.child_id, each)
    covered = descendants(records, frozenset({ref("host")}))
    assert covered == frozenset({SessionId("running"), SessionId("closing")})
    assert descendants(records, frozenset()) == frozenset()
