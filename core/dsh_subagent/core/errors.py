"""The seam's one error type and its codes.

Theory of operation
-------------------
1. Every failure the seam can name is a ``SubagentError`` carrying an ``ErrorCode``
   (ERR-0). Callers branch on ``code``, never on message text.
2. The codes and their wire spellings are stable (ERR-1 .. ERR-17). ``DURABILITY_FAILED``
   reports a write the store did not confirm. Bad input is never a plain exception: it is a
   ``SubagentError`` (usually ``INVALID_ARGUMENT``) that names the offending field, raised
   before any side effect (ERR-18).
3. Expected refusals (authority denied, notice dropped) are *data*, returned by the
   decision functions; exceptions are for misuse and for failures the caller must see.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """Stable error codes. The value is the wire spelling."""

    # The seam's refusals and failures (ERR-1 .. ERR-17).
    DUPLICATE_PROVIDER = "DUPLICATE_PROVIDER"
    NO_PROVIDER = "NO_PROVIDER"
    UNSUPPORTED_CAPABILITY = "UNSUPPORTED_CAPABILITY"
    CONTINUATION_UNAVAILABLE = "CONTINUATION_UNAVAILABLE"
    PERSISTENCE_UNAVAILABLE = "PERSISTENCE_UNAVAILABLE"
    DUPLICATE_CHILD = "DUPLICATE_CHILD"
    DRAINING = "DRAINING"
    UNAUTHORIZED = "UNAUTHORIZED"
    ACTIVATION_CLOSING = "ACTIVATION_CLOSING"
    PARENT_UNAVAILABLE = "PARENT_UNAVAILABLE"
    NOT_RESUMABLE = "NOT_RESUMABLE"
    ACTIVATION_TEARDOWN_FAILED = "ACTIVATION_TEARDOWN_FAILED"
    ACTIVATION_SETUP_REVOKED = "ACTIVATION_SETUP_REVOKED"
    ACTIVATION_SETUP_RELEASE_FAILED = "ACTIVATION_SETUP_RELEASE_FAILED"
    SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE = "SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE"
    SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE = "SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE"
    CANCELLED = "CANCELLED"
    # A failed or unconfirmed write of a session is reported, never hidden.
    DURABILITY_FAILED = "DURABILITY_FAILED"
    # Typed errors for bad input, depth limits and unreadable stored data (ERR-18).
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEPTH_LIMIT_EXCEEDED = "DEPTH_LIMIT_EXCEEDED"
    CORRUPT_DESCRIPTOR = "CORRUPT_DESCRIPTOR"
    UNSUPPORTED_DESCRIPTOR_VERSION = "UNSUPPORTED_DESCRIPTOR_VERSION"
    CORRUPT_SESSION = "CORRUPT_SESSION"
    # A persistence read or write named a session id no session is stored under.
    NOT_FOUND = "NOT_FOUND"
    # A delegated (owned) agent asked the human a question (ASK-1).
    DELEGATED_CALLER = "DELEGATED_CALLER"
    # The child's lease is held by another live harness on the store (LEASE-2).
    ACTIVATION_HELD = "ACTIVATION_HELD"
    # An append fenced by a lease epoch that is no longer the child's (LEASE-3).
    LEASE_LOST = "LEASE_LOST"
    # A tree budget has nothing left in one dimension (tokens, model requests, wall time).
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    # Misuse of a core machine: an event its current state does not accept.
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"


class SubagentError(Exception):
    """A failure of the subagent seam.

    ``code`` is the machine-readable classification, ``field`` names the offending input
    field when the failure is about bad input, and ``cause`` chains an underlying failure.
    """

    code: ErrorCode
    field: str | None
    cause: BaseException | None

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        field: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause

    def __reduce__(self) -> tuple[type[SubagentError], tuple[ErrorCode, str], dict[str, object]]:
        """Pickle/copy support: the code is a required constructor argument."""
        return (type(self), (self.code, self.message), {"field": self.field, "cause": self.cause})

    @property
    def message(self) -> str:
        """The human-readable message (without the code prefix)."""
        return str(self.args[0])

    def __str__(self) -> str:
        where = f" [{self.field}]" if self.field else ""
        return f"{self.code.value}{where}: {self.args[0]}"

    def __repr__(self) -> str:
        return f"SubagentError({self.code.value!r}, {self.args[0]!r}, field={self.field!r})"


def invalid(field: str, message: str) -> SubagentError:
    """Shorthand for an ``INVALID_ARGUMENT`` error naming ``field``."""
    return SubagentError(ErrorCode.INVALID_ARGUMENT, f"{field}: {message}", field=field)


def not_accepted(event: object, phase: str) -> SubagentError:
    """The ``ILLEGAL_TRANSITION`` a machine raises for an event its phase does not accept."""
    return SubagentError(
        ErrorCode.ILLEGAL_TRANSITION,
        f"{type(event).__name__} is not accepted in phase {phase}",
        field="event",
    )
