"""Exact refusals (code, field, message) the mutation check showed were not pinned down.

Each case states what a caller sees: the error code, the field it names, and the text.
"""

from __future__ import annotations

import math

import pytest

from dsh_subagent.core import lifecycle, oneshot_observer
from dsh_subagent.core.authority import (
    AgentRef,
    Denied,
    Presented,
    TargetFacts,
    authorize_ancestor_interrupt,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import check_json, require_str
from dsh_subagent.core.lifecycle import (
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
)
from dsh_subagent.core.oneshot_observer import (
    Observation,
    ProviderAdded,
    ProviderRemoved,
    RunEnded,
    RunStarted,
)
from dsh_subagent.core.values import EventId, KnownStop, RunId, SessionId

E = EventId("e")
ROOT = AgentRef(SessionId("root"), 1)
CHILD = SessionId("child")


def _raised(call: object, *args: object, **kwargs: object) -> SubagentError:
    with pytest.raises(SubagentError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value


def _said(error: SubagentError) -> tuple[ErrorCode, str | None, str]:
    return error.code, error.field, error.message


# --------------------------------------------------------------------------- AUTH-6


def test_auth_6_interrupt_refusals_name_their_reason() -> None:
    stale = authorize_ancestor_interrupt(CHILD, Presented(ROOT, 2), None)
    itself = authorize_ancestor_interrupt(ROOT.session_id, Presented(ROOT, 1), None)
    facts = TargetFacts(SessionId("other"), frozenset())
    stranger = authorize_ancestor_interrupt(CHILD, Presented(ROOT, 1), facts)
    assert stale == Denied(ErrorCode.UNAUTHORIZED, "exact live caller required")
    assert itself == Denied(ErrorCode.UNAUTHORIZED, "an agent cannot interrupt itself")
    assert stranger == Denied(ErrorCode.UNAUTHORIZED, "caller is not a live ancestor of the target")


# --------------------------------------------------------------------------- EVT-16 / EVT-3


def _fold(state: Observation, event: oneshot_observer.ObserverEvent) -> Observation:
    return oneshot_observer.apply(state, event)[0]


def _start(run: str = "r1", provider: str = "spawn", child: str = "c1") -> RunStartInfo:
    return RunStartInfo(RunId(run), provider, child, True, SessionId("root"))


def test_evt_16_provider_pairing_refusals() -> None:
    empty = _raised(_fold, Observation(), ProviderAdded(E, ProviderAddedInfo("")))
    assert _said(empty) == (ErrorCode.INVALID_ARGUMENT, "provider", "provider: must not be empty")
    added = _fold(Observation(), ProviderAdded(E, ProviderAddedInfo("p")))
    twice = _raised(_fold, added, ProviderAdded(E, ProviderAddedInfo("p")))
    assert _said(twice) == (ErrorCode.ILLEGAL_TRANSITION, "provider", "provider 'p' added twice")
    unknown = _raised(_fold, added, ProviderRemoved(E, ProviderRemovedInfo("q")))
    assert _said(unknown) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "provider",
        "removal names unknown provider 'q'",
    )


def test_evt_16_run_pairing_refusals() -> None:
    state = _fold(Observation(), RunStarted(E, _start()))
    again = _raised(_fold, state, RunStarted(E, _start()))
    assert _said(again) == (ErrorCode.ILLEGAL_TRANSITION, "run_id", "run id 'r1' repeated")
    orphan = _raised(_fold, Observation(), RunEnded(E, RunEndInfo(_start(), KnownStop.COMPLETED)))
    assert _said(orphan) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "run_id",
        "end of run 'r1' has no open start",
    )
    other = RunEndInfo(_start(child="c2"), KnownStop.COMPLETED)
    diverged = _raised(_fold, state, RunEnded(E, other))
    assert _said(diverged) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "run_id",
        "end of run 'r1' diverges from its start",
    )


@pytest.mark.parametrize(
    ("info", "field", "message"),
    [
        (_start(provider=""), "provider", "must not be empty"),
        (_start(run=""), "run_id", "must not be empty"),
        (_start(child=""), "child_id", "must not be empty"),
        (
            _start(run="spawn"),
            "run_id",
            "must be minted fresh, not taken from the provider or child id",
        ),
        (
            _start(run="c1"),
            "run_id",
            "must be minted fresh, not taken from the provider or child id",
        ),
    ],
)
def test_evt_3_evt_16_start_info_refusals(info: RunStartInfo, field: str, message: str) -> None:
    error = _raised(lifecycle.check_start_info, info)
    assert _said(error) == (ErrorCode.INVALID_ARGUMENT, field, f"{field}: {message}")


# --------------------------------------------------------------------------- ERR-0 (field named)


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        (math.inf, "v", "inf is not representable in JSON"),
        (math.nan, "v", "nan is not representable in JSON"),
        ("\ud800", "v", "string contains a lone surrogate"),
        ({1: "x"}, "v", "object key 1 is not a string"),
        ({"\udc00": 1}, "v", "object key contains a lone surrogate"),
        ({"a": [1, {"b": b"x"}]}, "v.a[1].b", "bytes is not a JSON value"),
        ([0, object()], "v[1]", "object is not a JSON value"),
    ],
)
def test_err_0_check_json_names_the_exact_path(value: object, path: str, message: str) -> None:
    error = _raised(check_json, value, "v")
    assert _said(error) == (ErrorCode.INVALID_ARGUMENT, path, f"{path}: {message}")


def test_err_0_check_json_accepts_lossless_json() -> None:
    check_json({"a": [None, True, 1, 1.5, "s", {"b": ()}]}, "v")


@pytest.mark.parametrize(
    ("value", "non_empty", "message"),
    [
        (3, False, "expected a string, got int"),
        ("  ", True, "must not be empty"),
        ("\ud800", False, "string contains a lone surrogate"),
    ],
)
def test_err_0_require_str_refusals(value: object, non_empty: bool, message: str) -> None:
    error = _raised(require_str, value, "name", non_empty=non_empty)
    assert _said(error) == (ErrorCode.INVALID_ARGUMENT, "name", f"name: {message}")


def test_err_0_require_str_accepts_blank_unless_non_empty() -> None:
    assert require_str("  ", "name") == "  "
    assert require_str("x", "name", non_empty=True) == "x"
