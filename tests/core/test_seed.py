"""CAP-8 fork seeds and ONE-15 diagnostic bounds, as pure decisions."""

from __future__ import annotations

from dsh_subagent.core.seed import (
    DIAGNOSTIC_LIMIT,
    TRUNCATION_SUFFIX,
    completed_turn_prefix,
    limit_diagnostic,
)
from dsh_subagent.core.values import TURN_END, TURN_START, SessionEvent


def _event(seq: int, kind: str) -> SessionEvent:
    return SessionEvent(kind, seq, 0.0, {"turn": 1})


def test_cap_8_seed_ends_at_the_last_completed_turn() -> None:
    log = [_event(0, TURN_START), _event(1, TURN_END), _event(2, TURN_START)]
    assert completed_turn_prefix(log) == tuple(log[:2])
    assert completed_turn_prefix(log[:1]) is None
    assert completed_turn_prefix([]) is None


def test_one_15_diagnostic_is_bounded_on_a_character_boundary() -> None:
    fits = "a" * DIAGNOSTIC_LIMIT
    assert limit_diagnostic(fits) == fits
    cut = limit_diagnostic("€" * DIAGNOSTIC_LIMIT)
    assert cut.endswith(TRUNCATION_SUFFIX)
    assert len(cut.encode("utf-8")) <= DIAGNOSTIC_LIMIT
    assert set(cut.removesuffix(TRUNCATION_SUFFIX)) == {"€"}
