"""HARNESS-11 as a bounded stateful machine (``inbox_machine``) over the harness under test."""

from __future__ import annotations

import pytest

from dsh_subagent.conformance.plugin import MISSING_HYPOTHESIS
from dsh_subagent.conformance.support import HarnessFactory


def test_harness_11_every_accepted_message_leaves_exactly_once(
    dsh_harness: HarnessFactory,
) -> None:
    try:
        from dsh_subagent.conformance.inbox_machine import (
            check_every_accepted_message_leaves_exactly_once,
        )
    except ModuleNotFoundError as err:
        if err.name != "hypothesis":
            raise
        pytest.fail(MISSING_HYPOTHESIS, pytrace=False)
    check_every_accepted_message_leaves_exactly_once(dsh_harness)
