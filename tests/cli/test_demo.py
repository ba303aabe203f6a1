"""``dsh-subagent demo`` end to end, in process: what it reports comes from the service."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dsh_subagent.cli.main import cli


def _demo(*args: str) -> str:
    result = CliRunner().invoke(cli, ["demo", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_demo_shows_tree_notices_restart_and_catalog(tmp_path: Path) -> None:
    out = _demo("--db", str(tmp_path / "store.db"))
    # The continuable tree and its residency as it changes.
    assert "researcher is running" in out
    assert "writer is waiting" in out
    assert "checker is running" in out
    assert "the writer delegated again: checker (depth 2)" in out
    assert "follow-up to the waiting writer woke it: running" in out
    # Settlement notices, exact texts, as the parent's log holds them.
    assert (
        "notice: Background subagent researcher finished and will do no further work unless "
        "you send it more. / Its closing message:" in out
    )
    # The restart: the catalog from the reopened store, then a cold resume.
    assert "catalog:   writer: continuable 'writer', inactive, has children" in out
    assert "catalog:     checker: continuable 'checker', inactive" in out
    assert "writer before the follow-up: absent" in out
    assert "cold-resumed writer with a user grant: running" in out
    assert "[event] subagent/end    writer -> completed" in out


def test_demo_second_run_on_the_same_store_sees_the_first(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    _demo("--db", db)
    out = _demo("--db", db)
    assert "this store already holds an earlier run's parent parent; its children:" in out
    assert "catalog: writer: continuable 'writer', inactive, has children" in out
    assert "started researcher-2" in out


def test_demo_json_is_a_paired_event_log(tmp_path: Path) -> None:
    events = json.loads(_demo("--json", "--db", str(tmp_path / "store.db")))
    starts = [e["child"] for e in events if e["event"] == "subagent/start"]
    ends = [e["child"] for e in events if e["event"] == "subagent/end"]
    assert sorted(starts) == sorted(ends)
    assert {"researcher", "writer", "checker"} <= set(starts)


def test_demo_reports_a_corrupt_store_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite")
    result = CliRunner().invoke(cli, ["demo", "--db", str(bad)])
    assert result.exit_code != 0
    assert "PERSISTENCE_UNAVAILABLE" in str(result.exception)


def test_catalog_lists_a_demo_store_and_refuses_bad_input(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    _demo("--db", str(db))
    runner = CliRunner()
    listed = runner.invoke(cli, ["catalog", "--db", str(db), "--descendants"])
    assert listed.exit_code == 0, listed.output
    assert "writer" in listed.output
    assert "checker" in listed.output
    assert "has children" in listed.output
    missing = runner.invoke(cli, ["catalog", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code != 0
    assert "no session store at" in str(missing.exception)
    unknown = runner.invoke(cli, ["catalog", "--db", str(db), "--parent", "ghost"])
    assert unknown.exit_code != 0
    assert "the store holds no session 'ghost'" in str(unknown.exception)
