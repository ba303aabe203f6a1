"""The missing-extra error, pinned in the core's own selection (docs/mutation.md)."""

from __future__ import annotations

from dsh_subagent.core.extras import MissingExtra


def test_a_missing_extra_is_one_import_error_line_naming_what_to_install() -> None:
    error = MissingExtra("verify", "hypothesis", "verify")
    assert isinstance(error, ImportError)
    assert str(error) == "verify needs hypothesis: pip install 'dsh-subagent[verify]'"
    assert (error.extra, error.package) == ("verify", "hypothesis")
