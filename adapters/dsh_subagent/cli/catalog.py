"""``dsh-subagent catalog``: the durable children of a store, as the service lists them.

Theory of operation
-------------------
1. The store is opened through the reference harness, so listing is exactly the service's
   ``list_children`` / ``list_descendants`` (live-preferred merge, projection-served identity,
   corrupt and unavailable diagnostics). Nothing is resumed, repaired or written: the store
   is opened read-only, and a file that is not a dsh-subagent store is refused unchanged
   (one error line, issue 19).
2. Without ``--parent`` every root session (a header with no parent) is listed with its tree.
   An id the store does not hold is a user error: one line, non-zero exit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from dsh_subagent.adapters.protocols import Model
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.persistence import redact
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import ChildRow, DescendantRow, ListingDiagnostic
from dsh_subagent.core.values import AgentOptions, SessionId


def _no_model(_session: LiveSession, _options: AgentOptions) -> Model:
    raise click.ClickException("catalog never runs an agent")


async def _rows(
    db: Path | str, parent: str | None, descendants: bool
) -> list[tuple[str, ChildRow | ListingDiagnostic | DescendantRow]]:
    harness = await ReferenceHarness.open(_no_model, db=db, readonly=True)
    try:
        headers = await harness.persistence.list()
        known = {h.id for h in headers}
        if parent is not None and parent not in known:
            raise SubagentError(
                ErrorCode.NOT_FOUND, f"the store holds no session {parent!r}", field="--parent"
            )
        roots = [SessionId(parent)] if parent else [h.id for h in headers if not h.parent_session]
        rows: list[tuple[str, ChildRow | ListingDiagnostic | DescendantRow]] = []
        for root in roots:
            listing = (
                await harness.service.list_descendants(root)
                if descendants
                else await harness.service.list_children(root)
            )
            rows += [(root, row) for row in listing]
        return rows
    finally:
        await harness.close()


def print_catalog(db: Path | str, parent: str | None, *, descendants: bool) -> None:
    """Print the catalog table of ``db`` (a SQLite file or a PostgreSQL address)."""
    rows = asyncio.run(_rows(db, parent, descendants))
    where = db if isinstance(db, Path) else redact(db)
    table = Table(title=f"children in {where}")
    for column in ("root", "depth", "id", "mode", "label", "activity", "note"):
        table.add_column(column, overflow="fold")
    for root, listed in rows:
        depth, row = (
            (str(listed.depth), listed.row)
            if isinstance(listed, DescendantRow)
            else (
                "1",
                listed,
            )
        )
        if isinstance(row, ListingDiagnostic):
            table.add_row(root, depth, row.child_id, "", "", "", f"{row.kind.value}: {row.reason}")
        else:
            note = "has children" if row.has_children else ""
            label = row.label or ""
            table.add_row(root, depth, row.id, row.mode.value, label, row.activity.value, note)
    console = Console(width=max(Console().width, 140))
    console.print(table if rows else f"no subagent children in {where}")
