"""The conformance suite's persistence tests on PostgreSQL, as a harness author would run them.

One run of ``pytest --pyargs dsh_subagent.conformance -m dsh_db --dsh-db=<address>`` in a
subprocess (``--noconftest``: this checkout's ``conftest.py`` stays out, as it is out of an
installed package), on an empty database of the throwaway cluster. ``-m dsh_db`` selects
every suite test that persists and reopens a harness, so a new one is covered here too; the
rest of the suite runs once, in ``scripts/check``, on memory and SQLite.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from dsh_subagent.adapters.reference.harness import open_persistence
from tests.conformance.test_conformance_plugin import conformance


def test_pg_1_the_conformance_suites_persistence_tests_pass_on_postgres(
    postgres_db: str, tmp_path: Path
) -> None:
    code, output, _seconds = conformance(
        tmp_path, "-q", "-p", "no:cacheprovider", "-m", "dsh_db", f"--dsh-db={postgres_db}"
    )
    assert code == 0, output
    passed = re.search(r"(\d+) passed", output)
    assert passed is not None, output
    assert int(passed.group(1)) >= 2, output
    assert "error" not in output.lower(), output

    async def stored() -> int:  # the tests wrote to PostgreSQL, not to a file of their own
        store = await open_persistence(postgres_db, readonly=True)
        try:
            return len(await store.list())
        finally:
            await store.close()

    assert asyncio.run(stored()) >= 2
