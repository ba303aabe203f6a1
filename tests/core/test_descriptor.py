"""The durable descriptor (catalog section 8, DESC-*; ONE-3)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.descriptor import (
    DescriptorFold,
    DescriptorProblem,
    ProblemKind,
    descriptor_to_payload,
    fold_descriptor,
    one_shot_descriptor,
    parse_descriptor_payload,
    resume_descriptor,
    snapshot_descriptor,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    END_SEED,
    TURN_END,
    TURN_START,
    ContinuableDescriptor,
    JsonValue,
    Mode,
    OneShotDescriptor,
    ParentRef,
    SessionEvent,
    SessionId,
    SubagentDescriptorData,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
)

names = st.text(min_size=1).filter(lambda s: s.strip() != "")
jsonish = st.text().filter(lambda s: not any("\ud800" <= c <= "\udfff" for c in s))
tool_lists = st.none() | st.lists(names, unique=True, max_size=3).map(tuple)
tool_filters = st.none() | st.builds(ToolFilter, allow=tool_lists, deny=tool_lists).filter(
    lambda f: f.allow is not None or f.deny is not None
)
one_shots = st.builds(OneShotDescriptor, provider=names, label=st.none() | names)
continuables = st.builds(
    ContinuableDescriptor,
    provider=names,
    label=names,
    agent_provider=st.none() | names,
    agent_model=st.none() | names,
    persona=st.none() | jsonish,
    tool_filter=tool_filters,
)
descriptors = one_shots | continuables

CONTINUABLE = ContinuableDescriptor(provider="fork", label="reviewer", persona="terse")


def log(*entries: tuple[str, JsonValue]) -> tuple[SessionEvent, ...]:
    return tuple(SessionEvent(t, seq, float(seq), data) for seq, (t, data) in enumerate(entries))


def descriptor_event(descriptor: SubagentDescriptorData) -> tuple[str, JsonValue]:
    return (DESCRIPTOR_EVENT, descriptor_to_payload(descriptor))


def snapshot(descriptor: SubagentDescriptorData) -> SubagentDescriptorData:
    if isinstance(descriptor, OneShotDescriptor):
        return snapshot_descriptor(
            mode=Mode.ONE_SHOT, provider=descriptor.provider, label=descriptor.label
        )
    return snapshot_descriptor(
        mode=Mode.CONTINUABLE,
        provider=descriptor.provider,
        label=descriptor.label,
        agent_provider=descriptor.agent_provider,
        agent_model=descriptor.agent_model,
        persona=descriptor.persona,
        tool_filter=descriptor.tool_filter,
    )


def corrupt_field(payload: JsonValue) -> str | None:
    problem = parse_descriptor_payload(payload)
    assert isinstance(problem, DescriptorProblem)
    assert problem.kind is ProblemKind.CORRUPT
    return problem.field


def test_desc_1_every_payload_carries_version_2() -> None:
    assert descriptor_to_payload(OneShotDescriptor("spawn"))["version"] == 2
    assert descriptor_to_payload(CONTINUABLE)["version"] == 2


def test_desc_2_one_shot_payload_has_only_its_keys() -> None:
    assert descriptor_to_payload(OneShotDescriptor("spawn")) == {
        "version": 2,
        "mode": "one-shot",
        "provider": "spawn",
    }
    assert descriptor_to_payload(OneShotDescriptor("spawn", "fix"))["label"] == "fix"
    assert corrupt_field({"version": 2, "mode": "one-shot", "provider": "p", "persona": "x"}) == (
        "payload.persona"
    )


def test_desc_3_continuable_payload_spells_the_composition_in_camel_case() -> None:
    full = ContinuableDescriptor(
        provider="fork",
        label="reviewer",
        agent_provider="deepseek",
        agent_model="v3",
        persona="terse",
        tool_filter=ToolFilter(allow=("read",), deny=("bash",)),
    )
    assert descriptor_to_payload(full) == {
        "version": 2,
        "mode": "continuable",
        "provider": "fork",
        "label": "reviewer",
        "agentProvider": "deepseek",
        "agentModel": "v3",
        "persona": "terse",
        "toolFilter": {"allow": ["read"], "deny": ["bash"]},
    }


@given(descriptors)
def test_desc_4_payload_never_carries_depth_schema_or_activation_knobs(
    descriptor: SubagentDescriptorData,
) -> None:
    payload = descriptor_to_payload(descriptor)
    for omitted in ("subagentDepth", "outputSchema", "maxTokens", "agentOptions"):
        assert omitted not in payload


@given(descriptors)
def test_desc_5_snapshot_round_trips_through_payload_and_parse(
    descriptor: SubagentDescriptorData,
) -> None:
    snapped = snapshot(descriptor)
    assert snapped == descriptor
    assert parse_descriptor_payload(descriptor_to_payload(snapped)) == snapped


@given(descriptors)
def test_desc_6_payload_parse_payload_is_identity(descriptor: SubagentDescriptorData) -> None:
    payload = descriptor_to_payload(descriptor)
    parsed = parse_descriptor_payload(payload)
    assert not isinstance(parsed, DescriptorProblem)
    assert descriptor_to_payload(parsed) == payload


def test_desc_5_snapshot_detaches_a_mutable_tool_filter() -> None:
    allow = ["read"]
    snapped = snapshot_descriptor(
        mode=Mode.CONTINUABLE,
        provider="fork",
        label="l",
        tool_filter=ToolFilter(allow=allow),  # type: ignore[arg-type]
    )
    allow.append("bash")
    assert isinstance(snapped, ContinuableDescriptor)
    assert snapped.tool_filter == ToolFilter(allow=("read",))


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"mode": Mode.ONE_SHOT, "provider": ""}, "descriptor.provider"),
        ({"mode": Mode.ONE_SHOT, "provider": "p", "label": ""}, "descriptor.label"),
        ({"mode": Mode.ONE_SHOT, "provider": "p", "persona": "x"}, "descriptor.persona"),
        ({"mode": Mode.CONTINUABLE, "provider": 1, "label": "l"}, "descriptor.provider"),
        ({"mode": Mode.CONTINUABLE, "provider": "p"}, "descriptor.label"),
        ({"mode": Mode.CONTINUABLE, "provider": "p", "label": " "}, "descriptor.label"),
        (
            {"mode": Mode.CONTINUABLE, "provider": "p", "label": "l", "agent_provider": ""},
            "descriptor.agent_provider",
        ),
        (
            {"mode": Mode.CONTINUABLE, "provider": "p", "label": "l", "agent_model": ""},
            "descriptor.agent_model",
        ),
        (
            {"mode": Mode.CONTINUABLE, "provider": "p", "label": "l", "persona": 3},
            "descriptor.persona",
        ),
        (
            {"mode": Mode.CONTINUABLE, "provider": "p", "label": "l", "tool_filter": ToolFilter()},
            "descriptor.tool_filter",
        ),
    ],
)
def test_desc_5_snapshot_rejects_bad_input_naming_the_field(
    inputs: dict[str, object], field: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        snapshot_descriptor(**inputs)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "payload"),
        ({"mode": "one-shot", "provider": "p"}, "payload.version"),
        ({"version": "2", "mode": "one-shot", "provider": "p"}, "payload.version"),
        ({"version": True, "mode": "one-shot", "provider": "p"}, "payload.version"),
        ({"version": 2, "mode": "oneshot", "provider": "p"}, "payload.mode"),
        ({"version": 2, "mode": "one-shot", "provider": "p", "zeta": 1, "beta": 2}, "payload.beta"),
        ({"version": 2, "mode": "one-shot"}, "payload.provider"),
        ({"version": 2, "mode": "one-shot", "provider": 5}, "payload.provider"),
        ({"version": 2, "mode": "one-shot", "provider": "p", "label": None}, "payload.label"),
        ({"version": 2, "mode": "continuable", "provider": "p"}, "payload.label"),
        (
            {"version": 2, "mode": "continuable", "provider": "p", "label": "l", "persona": 1},
            "payload.persona",
        ),
        (
            {"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": []},
            "payload.toolFilter",
        ),
        (
            {"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {}},
            "payload.toolFilter",
        ),
        (
            {
                "version": 2,
                "mode": "continuable",
                "provider": "p",
                "label": "l",
                "toolFilter": {"allow": [], "only": []},
            },
            "payload.toolFilter.only",
        ),
        (
            {
                "version": 2,
                "mode": "continuable",
                "provider": "p",
                "label": "l",
                "toolFilter": {"deny": "bash"},
            },
            "payload.toolFilter.deny",
        ),
        (
            {
                "version": 2,
                "mode": "continuable",
                "provider": "p",
                "label": "l",
                "toolFilter": {"allow": ["a", 1]},
            },
            "payload.toolFilter.allow",
        ),
    ],
)
def test_desc_6_malformed_current_version_payload_is_corrupt_naming_the_field(
    payload: JsonValue, field: str
) -> None:
    assert corrupt_field(payload) == field


def test_desc_6_parse_keeps_only_recognised_fields_and_accepts_a_float_version() -> None:
    parsed = parse_descriptor_payload(
        {
            "version": 2.0,
            "mode": "continuable",
            "provider": "p",
            "label": "",
            "toolFilter": {"deny": []},
        }
    )
    assert parsed == ContinuableDescriptor("p", "", tool_filter=ToolFilter(deny=()))


@given(
    st.integers().filter(lambda v: v != 2) | st.floats(allow_nan=False).filter(lambda v: v != 2),
    st.dictionaries(st.text(), st.none() | st.integers() | st.text(), max_size=4),
)
def test_desc_7_other_version_is_unsupported_whatever_else_it_holds(
    version: float, rest: Mapping[str, JsonValue]
) -> None:
    problem = parse_descriptor_payload({**rest, "version": version})
    assert isinstance(problem, DescriptorProblem)
    assert problem.kind is ProblemKind.UNSUPPORTED


def test_desc_8_resume_takes_the_first_own_descriptor() -> None:
    later = ContinuableDescriptor(provider="other", label="rewritten")
    events = log(descriptor_event(CONTINUABLE), (TURN_START, {"turn": 1}), descriptor_event(later))
    fold = fold_descriptor(events, None)
    assert fold == DescriptorFold(first=CONTINUABLE, last=later, count=2)
    assert resume_descriptor(fold) == CONTINUABLE


def test_desc_8_no_descriptor_folds_to_nothing() -> None:
    assert fold_descriptor(log((TURN_START, {"turn": 1})), 0) == DescriptorFold()


def test_desc_9_fold_reads_only_the_own_suffix_after_the_seed() -> None:
    ancestor = ContinuableDescriptor(provider="fork", label="ancestor")
    events = log(
        descriptor_event(ancestor),
        (TURN_END, {"turn": 1, "reason": "completed"}),
        (END_SEED, {}),
        descriptor_event(CONTINUABLE),
    )
    fold = fold_descriptor(events, 2)
    assert fold.first == fold.last == CONTINUABLE
    assert fold_descriptor(events[:3], 2) == DescriptorFold()
    assert fold_descriptor(events, 0).first == ancestor


@pytest.mark.parametrize("seed_length", [-1, 5])
def test_desc_9_seed_length_outside_the_log_is_a_corrupt_session(seed_length: int) -> None:
    with pytest.raises(SubagentError) as caught:
        fold_descriptor(log(descriptor_event(CONTINUABLE)), seed_length)
    assert caught.value.code is ErrorCode.CORRUPT_SESSION
    assert caught.value.field == "header.seed_length"


@pytest.mark.parametrize(
    "events",
    [
        log(),
        log((DESCRIPTOR_EVENT, {"version": 3, "mode": "continuable"})),
        log(descriptor_event(OneShotDescriptor("spawn", "l"))),
    ],
)
def test_desc_10_missing_unsupported_or_one_shot_descriptor_is_not_resumable(
    events: tuple[SessionEvent, ...],
) -> None:
    with pytest.raises(SubagentError) as caught:
        resume_descriptor(fold_descriptor(events, 0))
    assert caught.value.code is ErrorCode.NOT_RESUMABLE
    assert "do not retry" in caught.value.message


def test_desc_10_malformed_descriptor_at_resume_is_a_typed_corrupt_error() -> None:
    events = log((DESCRIPTOR_EVENT, {"version": 2, "mode": "continuable", "provider": "p"}))
    with pytest.raises(SubagentError) as caught:
        resume_descriptor(fold_descriptor(events, 0))
    assert caught.value.code is ErrorCode.CORRUPT_DESCRIPTOR
    assert caught.value.field == "payload.label"


def test_desc_14_listing_takes_the_last_descriptor_resume_the_first() -> None:
    corrupt = (DESCRIPTOR_EVENT, {"version": 2})
    fold = fold_descriptor(log(descriptor_event(CONTINUABLE), corrupt), 0)
    assert isinstance(fold.last, DescriptorProblem)
    assert fold.count == 2
    assert resume_descriptor(fold) == CONTINUABLE


def test_one_3_one_shot_descriptor_is_lookup_name_plus_request_label() -> None:
    request = SubagentStartRequest((TextBlock("x"),), ParentRef(SessionId("p")))
    assert one_shot_descriptor("spawn", request) == OneShotDescriptor("spawn")
    labelled = SubagentStartRequest((TextBlock("x"),), ParentRef(SessionId("p")), label="fix it")
    assert descriptor_to_payload(one_shot_descriptor("spawn", labelled)) == {
        "version": 2,
        "mode": "one-shot",
        "provider": "spawn",
        "label": "fix it",
    }
