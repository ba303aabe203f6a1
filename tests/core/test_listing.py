"""Listing children and descendants: the pure decisions (LIST-*)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import listing
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import (
    Activity,
    CacheRow,
    ChildRow,
    DescendantRow,
    DiagnosticKind,
    Inspected,
    InspectionFailed,
    ListingDiagnostic,
    SnapshotFailed,
)
from dsh_subagent.core.projections import Identity
from dsh_subagent.core.values import Mode, Origin, SessionHeader, SessionId

SUB = Origin.SUBAGENT
CONT = Identity(Mode.CONTINUABLE, "task", 3)
ONE = Identity(Mode.ONE_SHOT, None, 0)


def header(
    sid: str,
    parent: str | None = "P",
    *,
    at: float = 0.0,
    origin: Origin | None = SUB,
    seed: int | None = None,
    cwd: str | None = None,
) -> SessionHeader:
    return SessionHeader(
        SessionId(sid),
        created_at=at,
        parent_session=None if parent is None else SessionId(parent),
        origin=origin,
        seed_length=seed,
        cwd=cwd,
    )


def ids(found: tuple[listing.PositionedCandidate, ...]) -> list[str]:
    return [p.record.header.id for p in found]


def cycles(found: tuple[listing.PositionedCandidate, ...]) -> list[tuple[str, str, int]]:
    return [(p.record.header.id, p.parent_id, p.depth) for p in found if p.cycle is not None]


def test_list_1_missing_projections_fail_first() -> None:
    with pytest.raises(SubagentError) as caught:
        listing.require_listing_services(projections_available=False, store_available=False)
    assert caught.value.code is ErrorCode.SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE


def test_list_1_missing_session_store_fails() -> None:
    with pytest.raises(SubagentError) as caught:
        listing.require_listing_services(projections_available=True, store_available=False)
    assert caught.value.code is ErrorCode.SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE
    listing.require_listing_services(projections_available=True, store_available=True)


def test_list_3_live_header_replaces_persisted_wholesale() -> None:
    persisted = header("a", at=1.0, cwd="/old")
    live = header("a", at=2.0, cwd="/new")
    corpus = listing.merge_corpus([persisted, header("b")], [live])
    assert corpus.records[SessionId("a")] == listing.CorpusRecord(live, live=True)
    assert corpus.records[SessionId("b")].live is False


def test_list_3_without_persistence_listing_is_live_only() -> None:
    corpus = listing.merge_corpus([], [header("a")])
    assert ids(listing.child_candidates(corpus, SessionId("P"))) == ["a"]


def test_list_5_candidates_are_subagent_children_ordered_by_time_then_id() -> None:
    corpus = listing.merge_corpus(
        [header("b", at=1.0), header("a", at=1.0), header("c", at=0.5)],
        [header("fork", origin=None), header("other", parent="Q"), header("top", parent=None)],
    )
    assert ids(listing.child_candidates(corpus, SessionId("P"))) == ["c", "a", "b"]


def test_list_6_unknown_parent_has_no_candidates() -> None:
    corpus = listing.merge_corpus([header("a")], [])
    assert listing.child_candidates(corpus, SessionId("nobody")) == ()


def test_list_7_live_candidate_ladder() -> None:
    h = header("a")
    assert listing.resolve_live(h, True, CONT) == ChildRow(
        SessionId("a"), Activity.RUNNING, True, Mode.CONTINUABLE, "task"
    )
    assert listing.resolve_live(h, False, None) is None
    failed = listing.resolve_live(h, False, SnapshotFailed("unit raised"))
    assert failed == ListingDiagnostic(DiagnosticKind.CORRUPT, SessionId("a"), "unit raised")


def test_list_8_cache_serves_only_own_suffix_identity() -> None:
    h = header("a", seed=5)
    own = Identity(Mode.ONE_SHOT, "x", 6)
    ancestor = Identity(Mode.CONTINUABLE, "parent task", 2)
    row = listing.resolve_cached(h, False, CacheRow(as_of_seq=9, identity=own))
    assert row == ChildRow(SessionId("a"), Activity.INACTIVE, False, Mode.ONE_SHOT, "x")
    assert listing.resolve_cached(h, False, CacheRow(as_of_seq=9, identity=ancestor)) is None
    assert listing.resolve_cached(h, False, CacheRow(as_of_seq=9, identity=None)) is None
    assert listing.resolve_cached(h, False, None) is None


def test_list_8_seq_gate_uses_zero_without_seed() -> None:
    assert listing.cache_serves(header("a"), CacheRow(0, ONE)) == ONE


def test_list_9_failed_inspection_is_unavailable() -> None:
    row = listing.resolve_inspection(header("a"), False, InspectionFailed("disk"))
    assert row == ListingDiagnostic(DiagnosticKind.UNAVAILABLE, SessionId("a"), "disk")


def test_list_9_republished_id_is_corrupt() -> None:
    enumerated = header("a", at=1.0)
    row = listing.resolve_inspection(enumerated, False, Inspected(header("a", at=2.0), CONT))
    assert isinstance(row, ListingDiagnostic)
    assert row.kind is DiagnosticKind.CORRUPT


@pytest.mark.parametrize(
    "changed",
    [
        SessionHeader(SessionId("a"), version=2),
        SessionHeader(SessionId("b")),
        SessionHeader(SessionId("a"), created_at=1.0),
        SessionHeader(SessionId("a"), cwd="/x"),
        SessionHeader(SessionId("a"), parent_session=SessionId("Q")),
        SessionHeader(SessionId("a"), seed_length=1),
        SessionHeader(SessionId("a"), delegation_depth=1),
    ],
)
def test_list_9_lifecycle_witness_compares_seven_fields(changed: SessionHeader) -> None:
    base = SessionHeader(SessionId("a"))
    assert not listing.same_lifecycle(base, changed)
    assert listing.same_lifecycle(base, SessionHeader(SessionId("a"), agent_preset="p"))


def test_list_9_fold_failure_or_no_identity_is_corrupt_else_inactive_row() -> None:
    h = header("a")
    failed = listing.resolve_inspection(h, False, Inspected(h, None, fold_error="bad unit"))
    assert failed == ListingDiagnostic(DiagnosticKind.CORRUPT, SessionId("a"), "bad unit")
    missing = listing.resolve_inspection(h, False, Inspected(h, None))
    assert isinstance(missing, ListingDiagnostic)
    assert missing.kind is DiagnosticKind.CORRUPT
    served = listing.resolve_inspection(h, True, Inspected(h, CONT))
    assert served == ChildRow(SessionId("a"), Activity.INACTIVE, True, Mode.CONTINUABLE, "task")


def test_list_11_has_children_counts_only_subagent_origin() -> None:
    corpus = listing.merge_corpus(
        [header("a"), header("g1", parent="a"), header("f", parent="b", origin=None)], []
    )
    assert listing.has_children(corpus, SessionId("a"))
    assert not listing.has_children(corpus, SessionId("b"))
    assert listing.has_children(corpus, SessionId("P"))


def test_list_12_rows_keep_mode_and_label() -> None:
    row = listing.resolve_live(header("a"), False, ONE)
    assert row == ChildRow(SessionId("a"), Activity.RUNNING, False, Mode.ONE_SHOT, None)
    assert [k.value for k in DiagnosticKind] == ["corrupt", "unsupported", "unavailable"]


def test_list_10_cold_read_concurrency_is_four() -> None:
    assert listing.COLD_READ_CONCURRENCY == 4


def test_list_15_descendants_in_preorder_through_ordinary_nodes() -> None:
    corpus = listing.merge_corpus(
        [
            header("a", parent="R", at=1.0),
            header("b", parent="R", at=2.0),
            header("ordinary", parent="a", at=0.0, origin=None),
            header("deep", parent="ordinary"),
            header("a2", parent="a", at=5.0),
        ],
        [header("elsewhere", parent="X"), header("R", parent=None)],
    )
    found = listing.descendant_candidates(corpus, SessionId("R"))
    assert [(p.record.header.id, p.parent_id, p.depth) for p in found] == [
        ("a", "R", 1),
        ("deep", "ordinary", 3),
        ("a2", "a", 2),
        ("b", "R", 1),
    ]


def test_list_15_cycles_and_the_root_are_visited_once() -> None:
    corpus = listing.merge_corpus(
        [header("x", parent="R"), header("y", parent="x"), header("R", parent="y")], []
    )
    found = listing.descendant_candidates(corpus, SessionId("R"))
    assert ids(found) == ["x", "y", "R"]
    assert cycles(found) == [("R", "y", 3)]
    diagnostic = found[-1].cycle
    assert diagnostic is not None
    assert (diagnostic.kind, diagnostic.child_id) == (DiagnosticKind.CORRUPT, "R")
    assert "3 levels up, through y" in diagnostic.reason


def test_list_15_a_self_parented_root_is_a_corrupt_row_and_its_subtree_is_listed() -> None:
    """Issue 18: a header naming itself as parent is reported, not skipped, and every
    child below it is still listed (the root is not descended into twice)."""
    corpus = listing.merge_corpus(
        [
            header("s", parent="s", at=0.0, origin=None),
            header("a", parent="s", at=1.0),
            header("b", parent="a", at=2.0),
        ],
        [],
    )
    found = listing.descendant_candidates(corpus, SessionId("s"))
    assert [(p.record.header.id, p.parent_id, p.depth) for p in found] == [
        ("s", "s", 1),
        ("a", "s", 1),
        ("b", "a", 2),
    ]
    assert cycles(found) == [("s", "s", 1)]
    assert found[0].cycle == listing.ListingDiagnostic(
        DiagnosticKind.CORRUPT,
        SessionId("s"),
        "the session names itself as its parent (a parent cycle)",
    )
    children = listing.child_candidates(corpus, SessionId("s"))
    assert ids(children) == ["s", "a"]
    assert cycles(children) == [("s", "s", 1)]


def test_list_15_two_headers_naming_each_other_are_reported_from_either_root() -> None:
    """Issue 18: ``a`` and ``b`` name each other; listing from either reports the cycle at the
    root's second appearance and still lists the other's own children."""
    corpus = listing.merge_corpus(
        [header("a", parent="b"), header("b", parent="a"), header("c", parent="b", at=1.0)], []
    )
    from_a = listing.descendant_candidates(corpus, SessionId("a"))
    assert [(p.record.header.id, p.parent_id, p.depth) for p in from_a] == [
        ("b", "a", 1),
        ("a", "b", 2),
        ("c", "b", 2),
    ]
    assert cycles(from_a) == [("a", "b", 2)]
    from_b = listing.descendant_candidates(corpus, SessionId("b"))
    assert ids(from_b) == ["a", "b", "c"]
    assert cycles(from_b) == [("b", "a", 2)]
    assert cycles(listing.child_candidates(corpus, SessionId("a"))) == []


def test_list_15_deep_chain_needs_no_recursion() -> None:
    chain = [header(f"n{i}", parent="R" if i == 0 else f"n{i - 1}") for i in range(5000)]
    found = listing.descendant_candidates(listing.merge_corpus(chain, []), SessionId("R"))
    assert len(found) == 5000
    assert found[-1].depth == 5000


def test_list_15_rows_are_annotated_and_omitted_rows_dropped() -> None:
    corpus = listing.merge_corpus([header("a", parent="R"), header("b", parent="a")], [])
    positioned = listing.descendant_candidates(corpus, SessionId("R"))
    row = listing.resolve_live(header("b", parent="a"), False, ONE)
    assert row is not None
    assert listing.descendant_rows(positioned, [None, row]) == (
        DescendantRow(row, SessionId("a"), 2),
    )
    assert listing.listed_rows([None, row, None]) == (row,)


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 7), st.booleans(), st.booleans()),
        max_size=12,
    )
)
def test_list_15_descendants_are_unique_subagent_nodes_below_root(
    spec: list[tuple[int, int, bool, bool]],
) -> None:
    """Any corpus, any root, cycles included: each candidate once, subagent origin, parent
    listed first; the root reached again is its one cycle diagnostic."""
    headers = [
        header(f"n{i}", parent=f"n{p}" if p < 7 else "R", origin=SUB if sub else None)
        for i, p, sub, _ in spec
    ]
    live = [h for h, (_, _, _, is_live) in zip(headers, spec, strict=True) if is_live]
    corpus = listing.merge_corpus(headers, live)
    for root in ["R", *(f"n{i}" for i in range(7))]:
        found = listing.descendant_candidates(corpus, SessionId(root))
        seen = [p.record.header.id for p in found if p.cycle is None]
        assert len(seen) == len(set(seen))
        assert root not in seen
        assert all(p.record.header.origin is SUB for p in found if p.cycle is None)
        assert all(p.record.header.parent_session == p.parent_id for p in found)
        looped = [p for p in found if p.cycle is not None]
        assert all(p.record.header.id == root for p in looped)
        assert len(looped) <= 1
