"""Listing rules the mutation check found unpinned (docs/mutation.md lists each mutant).

The refusals and diagnostics are pinned by their exact messages and child ids.
"""

from __future__ import annotations

import pytest

from dsh_subagent.core import listing
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import DiagnosticKind, Inspected, ListingDiagnostic
from dsh_subagent.core.values import Origin, SessionHeader, SessionId


def _header(sid: str, parent: str = "P", at: float = 0.0) -> SessionHeader:
    return SessionHeader(
        SessionId(sid), created_at=at, parent_session=SessionId(parent), origin=Origin.SUBAGENT
    )


def test_err_15_listing_without_projections_says_so() -> None:
    with pytest.raises(SubagentError) as info:
        listing.require_listing_services(projections_available=False, store_available=True)
    assert info.value.code is ErrorCode.SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE
    assert info.value.message == "listing subagents requires the session projection registry"


def test_err_16_listing_without_a_session_store_says_so() -> None:
    with pytest.raises(SubagentError) as info:
        listing.require_listing_services(projections_available=True, store_available=False)
    assert info.value.code is ErrorCode.SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE
    assert info.value.message == "listing subagents requires the session store"


def test_list_9_a_republished_id_is_a_corrupt_row_naming_the_child() -> None:
    row = listing.resolve_inspection(
        _header("a", at=1.0), False, Inspected(_header("a", at=2.0), None)
    )
    assert row == ListingDiagnostic(
        DiagnosticKind.CORRUPT, SessionId("a"), "the id names another lifecycle"
    )


def test_list_9_a_child_without_a_descriptor_is_a_corrupt_row_naming_the_child() -> None:
    header = _header("a")
    row = listing.resolve_inspection(header, False, Inspected(header, None))
    assert row == ListingDiagnostic(
        DiagnosticKind.CORRUPT, SessionId("a"), "no valid subagent descriptor"
    )


def test_list_15_rows_that_do_not_align_with_their_candidates_are_refused() -> None:
    corpus = listing.merge_corpus([_header("a", parent="R")], [])
    positioned = listing.descendant_candidates(corpus, SessionId("R"))
    with pytest.raises(ValueError, match="zip"):
        listing.descendant_rows(positioned, [None, None])
