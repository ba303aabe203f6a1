"""``dsh-subagent catalog`` opens stores read-only and refuses other files (issue 19)."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsh_subagent.cli.main import cli, main


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["dsh-subagent", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    code = exited.value.code
    assert isinstance(code, int)
    return code


def make_foreign(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")


@pytest.mark.parametrize("kind", ["foreign", "empty"])
def test_list_16_issue_19_catalog_of_a_foreign_or_empty_file_is_one_error_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    db = tmp_path / "other.db"
    if kind == "foreign":
        make_foreign(db)
    else:
        db.write_bytes(b"")
    before = {entry.name: entry.read_bytes() for entry in tmp_path.iterdir()}
    assert run_main(monkeypatch, "catalog", "--db", str(db)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: PERSISTENCE_UNAVAILABLE: path: {db} is not a dsh-subagent store\n"
    assert {entry.name: entry.read_bytes() for entry in tmp_path.iterdir()} == before
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_list_16_issue_19_catalog_lists_a_demo_store_without_changing_it(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    demo = CliRunner().invoke(cli, ["demo", "--db", str(db)], catch_exceptions=False)
    assert demo.exit_code == 0, demo.output
    before = db.read_bytes()
    listed = CliRunner().invoke(cli, ["catalog", "--db", str(db)], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    assert "writer" in listed.output
    assert db.read_bytes() == before
