"""Error values the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pickle

from dsh_subagent.core.errors import ErrorCode, SubagentError


def test_err_0_an_error_survives_pickling_with_its_field_and_cause() -> None:
    cause = ValueError("root")
    error = SubagentError(ErrorCode.CORRUPT_SESSION, "bad", field="f", cause=cause)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message, copy.field) == (ErrorCode.CORRUPT_SESSION, "bad", "f")
    assert isinstance(copy.cause, ValueError)
    assert copy.cause.args == ("root",)
