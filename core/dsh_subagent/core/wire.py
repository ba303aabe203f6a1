"""The JSON shapes of session-event payloads, written and read through one definition.

Theory of operation
-------------------
1. The reference agent loop writes, and the core's folds read, session events whose ``data``
   is lossless JSON. Every shape the seam relies on is built by one function here, so the
   writer and the readers cannot drift apart.
2. Shapes (``data`` of each event type):

   ==========================  =========================================================
   ``turn/start``              ``{"turn": n}``
   ``turn/end``                ``{"turn": n, "reason": r}`` with r one of ``TurnEndReason``
                               values; ``aborted`` adds ``"cause": {"kind": k[, "reason"]}``,
                               ``error`` adds ``"error": "<message>"``
   ``step/start``/``step/end`` ``{}``
   ``user/message``            ``{"message": <message>}``
   ``assistant/chunk``         ``{"chunk": "<text>"}``
   ``assistant/message``       ``{"message": {"content": [<block>...]}, "refusal": bool}``;
                               a metered request adds ``"charged": {<dimension>: n}``
                               (``core.budget_log``)
   ``tool/result``             ``{"tool": name, "callId": id, "content": [<block>...],
                               "isError": bool}``
   ``agent/inbox/spliced``     ``{"target": "next-turn"|"next-step", "start": i,
                               "removedCount": n?, "inserted": [<message>...],
                               "outcome": "canceled"?}``
   ==========================  =========================================================

   ``<block>`` is ``{"type": "text", "text": s}`` or ``{"type": "data", "value": v}``;
   ``<message>`` is ``{"id": s, "content": [<block>...], "source": <source>}``;
   ``<source>`` is ``{"kind": k, ...}`` with the sender/summary fields in camelCase.
3. Decoders raise ``SubagentError(CORRUPT_SESSION)`` naming the field on a malformed payload.
4. Seeds: a session built from a seed (even an empty one) closes it with one
   ``session/end-seed`` unless the seed already ends with one; a session built without a seed
   gets no marker (HARNESS-20, DESC-11). The session constructor and the continuable creator's
   staged seed both ask ``needs_end_seed``. A fork seed is the parent's log through its last
   ``turn/end``: an in-flight turn cannot be replayed, so it is excluded, and a log with no
   completed turn gives no seed (CAP-8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    END_SEED,
    TURN_END,
    BaseSource,
    BaseSourceKind,
    CancelKind,
    Content,
    ContentBlock,
    CoordinatorSource,
    DataBlock,
    JsonObject,
    JsonValue,
    MessageId,
    MessageSource,
    SessionEvent,
    SessionId,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    TurnEndReason,
    UserMessage,
)


def _corrupt(field: str, why: str) -> SubagentError:
    return SubagentError(ErrorCode.CORRUPT_SESSION, f"{field}: {why}", field=field)


# --------------------------------------------------------------------------- content


def encode_block(block: ContentBlock) -> JsonObject:
    """JSON form of a content block."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {"type": "data", "value": block.value}


def encode_content(content: Content) -> list[JsonValue]:
    """JSON form of a content tuple."""
    return [encode_block(b) for b in content]


def decode_block(value: JsonValue, field: str) -> ContentBlock:
    """Parse one content block.

    raises: SubagentError
    """
    if not isinstance(value, Mapping):
        raise _corrupt(field, "content block is not an object")
    kind = value.get("type")
    if kind == "text" and isinstance(value.get("text"), str):
        return TextBlock(str(value["text"]))
    if kind == "data" and "value" in value:
        return DataBlock(value["value"])
    raise _corrupt(field, f"unknown content block {kind!r}")


def decode_content(value: JsonValue, field: str) -> Content:
    """Parse a content list.

    raises: SubagentError
    """
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise _corrupt(field, "content is not a list")
    return tuple(decode_block(v, f"{field}[{i}]") for i, v in enumerate(value))


# --------------------------------------------------------------------------- sources


def encode_source(source: MessageSource) -> JsonObject:
    """JSON form of a message source."""
    match source:
        case BaseSource(kind=kind):
            return {"kind": kind.value}
        case CoordinatorSource(sender_session_id=sender, form=form):
            return {"kind": "coordinator", "form": form, "senderSessionId": sender}
        case SubagentReportSource(sender_session_id=sender, form=form):
            return {"kind": "subagent-report", "form": form, "senderSessionId": sender}
    assert isinstance(source, SubagentSettledSource)
    return {
        "kind": "subagent-settled",
        "form": source.form,
        "summary": source.summary,
        "senderSessionId": source.sender_session_id,
    }


def decode_source(value: JsonValue, field: str) -> MessageSource:
    """Parse a message source.

    raises: SubagentError
    """
    if not isinstance(value, Mapping):
        raise _corrupt(field, "source is not an object")
    kind = value.get("kind")
    sender = value.get("senderSessionId")
    if kind in {k.value for k in BaseSourceKind}:
        return BaseSource(BaseSourceKind(kind))
    if not isinstance(sender, str):
        raise _corrupt(f"{field}.senderSessionId", "missing sender session id")
    if kind == "coordinator":
        return CoordinatorSource(SessionId(sender))
    if kind == "subagent-report":
        return SubagentReportSource(SessionId(sender))
    summary = value.get("summary")
    if kind == "subagent-settled" and isinstance(summary, str):
        return SubagentSettledSource(SessionId(sender), summary)
    raise _corrupt(field, f"unknown source kind {kind!r}")


# --------------------------------------------------------------------------- messages


def encode_message(message: UserMessage) -> JsonObject:
    """JSON form of a user message."""
    return {
        "id": message.id,
        "content": encode_content(message.content),
        "source": encode_source(message.source),
    }


def decode_message(value: JsonValue, field: str) -> UserMessage:
    """Parse a user message.

    raises: SubagentError
    """
    if not isinstance(value, Mapping) or not isinstance(value.get("id"), str):
        raise _corrupt(field, "message is not an object with a string id")
    return UserMessage(
        MessageId(str(value["id"])),
        decode_content(value.get("content"), f"{field}.content"),
        decode_source(value.get("source"), f"{field}.source"),
    )


# --------------------------------------------------------------------------- event data


def turn_start_data(turn: int) -> JsonObject:
    """``turn/start`` payload."""
    return {"turn": turn}


def turn_end_data(
    turn: int,
    reason: TurnEndReason,
    *,
    cause: CancelKind | None = None,
    cause_reason: str | None = None,
    error: str | None = None,
    limit: str | None = None,
) -> JsonObject:
    """``turn/end`` payload; ``cause`` only for aborted turns, ``error`` only for errors,
    ``limit`` (the budget dimension reached) only for ``budget-exhausted``."""
    data: dict[str, JsonValue] = {"turn": turn, "reason": reason.value}
    if reason is TurnEndReason.ABORTED:
        kind = cause or CancelKind.USER
        cause_obj: dict[str, JsonValue] = {"kind": kind.value}
        if cause_reason is not None:
            cause_obj["reason"] = cause_reason
        data["cause"] = cause_obj
    if reason is TurnEndReason.ERROR:
        data["error"] = error or "error"
    if reason is TurnEndReason.BUDGET_EXHAUSTED and limit is not None:
        data["limit"] = limit
    return data


def turn_end_reason(data: JsonValue) -> TurnEndReason:
    """The reason of a ``turn/end`` payload.

    raises: SubagentError
    """
    if isinstance(data, Mapping):
        reason = data.get("reason")
        for member in TurnEndReason:
            if member.value == reason:
                return member
    raise _corrupt("turn/end.reason", f"unknown turn end reason in {data!r}")


def user_message_data(message: UserMessage, encoded: JsonValue = None) -> JsonObject:
    """``user/message`` payload; ``encoded`` is the message's form already logged (by its
    inbox splice), shared instead of encoding the message again."""
    return {"message": encode_message(message) if encoded is None else encoded}


def assistant_chunk_data(chunk: str) -> JsonObject:
    """``assistant/chunk`` payload."""
    return {"chunk": chunk}


def assistant_message_data(
    content: Content, *, refusal: bool = False, charged: JsonObject | None = None
) -> JsonObject:
    """``assistant/message`` payload; ``charged``: the budget charge of the request that
    produced it (``core.budget_log``), when it was metered."""
    message: JsonValue = {"content": encode_content(content)}
    data: dict[str, JsonValue] = {"message": message, "refusal": refusal}
    if charged is not None:
        data["charged"] = charged
    return data


def tool_result_data(tool: str, call_id: str, content: Content, *, is_error: bool) -> JsonObject:
    """``tool/result`` payload."""
    return {
        "tool": tool,
        "callId": call_id,
        "content": encode_content(content),
        "isError": is_error,
    }


def splice_data(
    target: str,
    start: int,
    *,
    removed_count: int = 0,
    inserted: Sequence[UserMessage] = (),
    canceled: bool = False,
) -> JsonObject:
    """``agent/inbox/spliced`` payload (HARNESS-10)."""
    data: dict[str, JsonValue] = {
        "target": target,
        "start": start,
        "inserted": [encode_message(m) for m in inserted],
    }
    if removed_count:
        data["removedCount"] = removed_count
    if canceled:
        data["outcome"] = "canceled"
    return data


# --------------------------------------------------------------------------- seeds


def needs_end_seed(seed: Sequence[SessionEvent] | None) -> bool:
    """Whether a session built from ``seed`` must append the ``session/end-seed`` marker (rule 4).

    post: __return__ == (seed is not None and (len(seed) == 0 or seed[-1].type != END_SEED))
    """
    return seed is not None and (not seed or seed[-1].type != END_SEED)


def completed_turn_prefix(events: Sequence[SessionEvent]) -> tuple[SessionEvent, ...] | None:
    """Every event through the last ``turn/end``, or ``None`` when no turn completed (rule 4)."""
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == TURN_END:
            return tuple(events[: index + 1])
    return None
