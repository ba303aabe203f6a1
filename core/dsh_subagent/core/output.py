"""A child's final output, its consumed work, and the stop-reason mappings.

Theory of operation
-------------------
1. Every function here reads a child's **own** events (after the seed or epoch boundary,
   ONE-13); the caller slices. Payloads are read in the shapes of ``wire.py``; a malformed
   payload raises ``CORRUPT_SESSION`` naming the field.
2. Output selection (ONE-11, ONE-12): the content of the last ``assistant/message`` whose
   content is non-empty; else the concatenated text of every ``assistant/chunk`` as one text
   block; else ``()``. Empty messages are skipped, a non-empty message wins over text
   streamed after it, and the stop reason plays no part. Blocks come out in their wire JSON
   form (``{"type": "text", "text": ...}``).
3. ``AssistantOutputFold`` is the same rule as an immutable incremental fold: ``apply(event)``
   and ``push_text(text)`` return a new fold in O(1) (streamed text is a persistent linked
   list, joined once by ``collect()``).
4. Consumed work (HARNESS-24) is one pass over the log tracking the open turn, the turns that
   entered a step and the turns that claimed input (a removing splice without an outcome
   inside an open turn). A cancelling splice that inserted nothing sets *dropped unrun*; a
   replacement does not. A closing turn becomes the *accounting turn* if it stepped, or if it
   claimed input and did not end ``completed``; that clears *dropped unrun*.
5. Two stop-reason mappings are kept apart on purpose (A9): the one-shot run maps
   ``interrupted`` and "no accounting turn" to ``error`` and lets a cancellation override any
   non-``completed`` reason to ``aborted`` (ONE-20); the continuable epoch maps
   ``interrupted`` to ``aborted`` and a clean or absent ending to ``completed``, or to
   ``aborted`` when accepted work was dropped unrun (EVT-10). An unknown (extension) turn
   ending is always ``error``.
6. A one-shot result with a requested output schema carries ``structured`` only when a value
   was captured; without one a ``completed`` run reports ``error`` (``aborted`` if cancelled)
   (ONE-14).
7. A one-shot run settles a background job by a third mapping (ONE-19, BG-6, A8):
   ``completed`` -> ``completed`` with the concatenated text of the output's text blocks,
   ``aborted`` -> ``killed``, any other reason -> ``failed`` with ``<reason>`` or
   ``<reason>; diagnostic: <d>`` (partial output is dropped). A failed disposal afterwards
   turns any outcome ``failed``, appending ``dispose failed: <error>`` to the detail.
8. A result diagnostic is bounded to 4096 UTF-8 bytes, cut on a character boundary and marked
   as truncated, so infrastructure detail cannot flood the parent (ONE-15, OOP-7).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jobs import JobOutcome, JobStatus
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    INBOX_SPLICED,
    STEP_START,
    TURN_END,
    TURN_START,
    JsonValue,
    KnownStop,
    SessionEvent,
    StopReason,
    SubagentResult,
    TextBlock,
    TurnEndReason,
    output_text,
    stop_reason_text,
)
from dsh_subagent.core.wire import decode_content, encode_block, turn_end_reason

Output: TypeAlias = tuple[JsonValue, ...]


def _corrupt(field: str, why: str) -> SubagentError:
    return SubagentError(ErrorCode.CORRUPT_SESSION, f"{field}: {why}", field=field)


def _object(data: JsonValue, field: str) -> Mapping[str, JsonValue]:
    if not isinstance(data, Mapping):
        raise _corrupt(field, "payload is not an object")
    return data


# --------------------------------------------------------------------------- output selection


def select_output(message: Output | None, streamed: str) -> Output:
    """The selection rule: the message candidate, else the streamed text, else nothing.

    post: __return__ == message if message is not None else True
    post: message is not None or (len(__return__) == 1) == (streamed != "")
    """
    if message is not None:
        return message
    return (encode_block(TextBlock(streamed)),) if streamed else ()


@attrs.frozen
class _Streamed:
    """One streamed text piece and the pieces before it (a persistent linked list)."""

    text: str
    before: _Streamed | None


@attrs.frozen
class AssistantOutputFold:
    """The output selection rule as an immutable, incremental fold (ONE-12)."""

    message: Output | None = None
    streamed: _Streamed | None = None

    def apply(self, event: SessionEvent) -> AssistantOutputFold:
        """Fold one event: a non-empty assistant message or an assistant text chunk.

        raises: SubagentError
        """
        if event.type == ASSISTANT_MESSAGE:
            field = f"{ASSISTANT_MESSAGE}.message"
            message = _object(_object(event.data, ASSISTANT_MESSAGE).get("message"), field)
            content = decode_content(message.get("content"), f"{field}.content")
            if content:
                return attrs.evolve(self, message=tuple(encode_block(b) for b in content))
        elif event.type == ASSISTANT_CHUNK:
            chunk = _object(event.data, ASSISTANT_CHUNK).get("chunk")
            if not isinstance(chunk, str):
                raise _corrupt(f"{ASSISTANT_CHUNK}.chunk", "chunk is not a string")
            return self.push_text(chunk)
        return self

    def push_text(self, text: str) -> AssistantOutputFold:
        """Extend the streamed fallback with raw text (for transports without events)."""
        return attrs.evolve(self, streamed=_Streamed(text, self.streamed)) if text else self

    def collect(self) -> Output:
        """The output selected so far."""
        pieces: list[str] = []
        node = self.streamed
        while node is not None:
            pieces.append(node.text)
            node = node.before
        return select_output(self.message, "".join(reversed(pieces)))


def final_assistant_output(events: Sequence[SessionEvent]) -> Output:
    """Apply the selection rule to one complete own-event suffix (ONE-11).

    raises: SubagentError
    """
    fold = AssistantOutputFold()
    for event in events:
        fold = fold.apply(event)
    return fold.collect()


def last_assistant_message(output: Output) -> Output | None:
    """``subagent/end``'s ``lastAssistantMessage``: the output, absent when empty (EVT-6)."""
    return output or None


# --------------------------------------------------------------------------- consumed work


@attrs.frozen
class OtherTurnEnd:
    """A ``turn/end`` reason this port does not know (an extension); always a failure."""

    reason: str


TurnEnding: TypeAlias = TurnEndReason | OtherTurnEnd


@attrs.frozen
class ConsumedWork:
    """The accounting turn's ending (``None`` when none closed) and whether work was dropped
    unrun after it (HARNESS-24)."""

    end: TurnEnding | None = None
    dropped_unrun: bool = False


def _turn_of(data: JsonValue, event_type: str) -> int:
    turn = _object(data, event_type).get("turn")
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise _corrupt(f"{event_type}.turn", "turn is not an integer")
    return turn


def _ending_of(data: JsonValue) -> TurnEnding:
    reason = _object(data, TURN_END).get("reason")
    if isinstance(reason, str) and reason not in {m.value for m in TurnEndReason}:
        return OtherTurnEnd(reason)
    return turn_end_reason(data)


def _accounts_for_claim(ending: TurnEnding) -> bool:
    """A claim without a step accounts for its input unless the turn ended ``completed``."""
    return ending is not TurnEndReason.COMPLETED


def fold_consumed_work(events: Sequence[SessionEvent]) -> ConsumedWork:
    """Fold a log (or an owned suffix) into its account of consumed work (HARNESS-24).

    raises: SubagentError
    """
    stepped: set[int] = set()
    claimed: set[int] = set()
    open_turn: int | None = None
    work = ConsumedWork()
    for event in events:
        if event.type == TURN_START:
            open_turn = _turn_of(event.data, TURN_START)
        elif event.type == STEP_START and open_turn is not None:
            stepped.add(open_turn)
        elif event.type == INBOX_SPLICED:
            data = _object(event.data, INBOX_SPLICED)
            removed = data.get("removedCount", 0)
            inserted = data.get("inserted")
            if isinstance(removed, bool) or not isinstance(removed, int):
                raise _corrupt(f"{INBOX_SPLICED}.removedCount", "removedCount is not an integer")
            if isinstance(inserted, str) or not isinstance(inserted, Sequence):
                raise _corrupt(f"{INBOX_SPLICED}.inserted", "inserted is not a list")
            if removed and data.get("outcome") == "canceled":
                # A replacement keeps the work pending; a cancellation leaving nothing drops it.
                work = attrs.evolve(work, dropped_unrun=work.dropped_unrun or not inserted)
            elif removed and open_turn is not None:
                claimed.add(open_turn)
        elif event.type == TURN_END:
            turn, ending = _turn_of(event.data, TURN_END), _ending_of(event.data)
            open_turn = None
            did_step, did_claim = turn in stepped, turn in claimed
            stepped.discard(turn)
            claimed.discard(turn)
            if did_step or (did_claim and _accounts_for_claim(ending)):
                work = ConsumedWork(end=ending, dropped_unrun=False)
    return work


# --------------------------------------------------------------------------- stop reasons

_ONE_SHOT_STOP: Final[Mapping[TurnEndReason, KnownStop]] = {
    TurnEndReason.COMPLETED: KnownStop.COMPLETED,
    TurnEndReason.MAX_TOKENS: KnownStop.MAX_TOKENS,
    TurnEndReason.ABORTED: KnownStop.ABORTED,
    TurnEndReason.BLOCKED: KnownStop.REFUSAL,
    TurnEndReason.ERROR: KnownStop.ERROR,
    TurnEndReason.INTERRUPTED: KnownStop.ERROR,
    TurnEndReason.BUDGET_EXHAUSTED: KnownStop.BUDGET_EXHAUSTED,
}

_EPOCH_STOP: Final[Mapping[TurnEndReason, KnownStop]] = {
    **_ONE_SHOT_STOP,
    TurnEndReason.INTERRUPTED: KnownStop.ABORTED,
}


def one_shot_stop_reason(end: TurnEnding | None, *, cancelled: bool = False) -> KnownStop:
    """A one-shot run's stop reason from its accounting turn's ending (ONE-20, A9).

    post: not cancelled or __return__ in (KnownStop.COMPLETED, KnownStop.ABORTED)
    post: end is not None or __return__ in (KnownStop.ERROR, KnownStop.ABORTED)
    post: (__return__ is KnownStop.COMPLETED) == (end is TurnEndReason.COMPLETED)
    """
    recorded = _ONE_SHOT_STOP[end] if isinstance(end, TurnEndReason) else KnownStop.ERROR
    return KnownStop.ABORTED if cancelled and recorded is not KnownStop.COMPLETED else recorded


def epoch_stop_reason(work: ConsumedWork) -> KnownStop:
    """A continuable epoch's stop reason from its consumed work (EVT-10, A9).

    post: __return__ is not KnownStop.COMPLETED or not work.dropped_unrun
    post: __return__ is not KnownStop.COMPLETED or work.end in (None, TurnEndReason.COMPLETED)
    """
    if isinstance(work.end, OtherTurnEnd):
        return KnownStop.ERROR
    mapped = KnownStop.COMPLETED if work.end is None else _EPOCH_STOP[work.end]
    return KnownStop.ABORTED if mapped is KnownStop.COMPLETED and work.dropped_unrun else mapped


@attrs.frozen
class Captured:
    """A structured value the child committed through the capture tool."""

    value: JsonValue


def one_shot_result(
    events: Sequence[SessionEvent],
    *,
    cancelled: bool = False,
    structured_requested: bool = False,
    captured: Captured | None = None,
) -> SubagentResult:
    """A one-shot run's result from its own events (ONE-11, ONE-14, ONE-20).

    raises: SubagentError
    """
    output = final_assistant_output(events)
    stop: StopReason = one_shot_stop_reason(fold_consumed_work(events).end, cancelled=cancelled)
    if captured is not None:
        return SubagentResult(output, stop, structured=captured.value, has_structured=True)
    if structured_requested and stop is KnownStop.COMPLETED:
        stop = KnownStop.ABORTED if cancelled else KnownStop.ERROR
    return SubagentResult(output, stop)


DIAGNOSTIC_LIMIT: Final = 4096
TRUNCATION_SUFFIX: Final = "\n[diagnostic truncated]"


def limit_diagnostic(text: str) -> str:
    """``text`` if it fits 4096 UTF-8 bytes, else cut on a character boundary plus a suffix
    (rule 8)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= DIAGNOSTIC_LIMIT:
        return text
    budget = DIAGNOSTIC_LIMIT - len(TRUNCATION_SUFFIX.encode("utf-8"))
    return encoded[:budget].decode("utf-8", errors="ignore") + TRUNCATION_SUFFIX


# --------------------------------------------------------------------------- job outcomes


def job_outcome(result: SubagentResult) -> JobOutcome:
    """A one-shot run's result as a background job's outcome (rule 7, ONE-19, BG-6)."""
    if result.stop_reason is KnownStop.COMPLETED:
        return JobOutcome(JobStatus.COMPLETED, output_text(result.output))
    if result.stop_reason is KnownStop.ABORTED:
        return JobOutcome(JobStatus.KILLED)
    detail = stop_reason_text(result.stop_reason)
    if result.diagnostic:
        detail += f"; diagnostic: {result.diagnostic}"
    return JobOutcome(JobStatus.FAILED, detail=detail)


def dispose_failed(outcome: JobOutcome, failure: str) -> JobOutcome:
    """``outcome`` after the run's disposal failed with ``failure`` (rule 7, BG-6).

    post: __return__.status is JobStatus.FAILED and __return__.output == ""
    """
    text = f"dispose failed: {failure}"
    return JobOutcome(
        JobStatus.FAILED, detail=f"{outcome.detail}; {text}" if outcome.detail else text
    )


__all__ = [
    "AssistantOutputFold",
    "Captured",
    "ConsumedWork",
    "DIAGNOSTIC_LIMIT",
    "Output",
    "OtherTurnEnd",
    "TRUNCATION_SUFFIX",
    "TurnEnding",
    "dispose_failed",
    "epoch_stop_reason",
    "final_assistant_output",
    "fold_consumed_work",
    "job_outcome",
    "last_assistant_message",
    "limit_diagnostic",
    "one_shot_result",
    "one_shot_stop_reason",
    "output_text",
    "select_output",
]
