"""The command line's paths, error lines and demo output (issue 20, CLI).

Every case runs the console entry point in process (``main`` with ``sys.argv`` set) and reads
what it printed: one ``error: CODE: message`` line on stderr, exit status 1 when the run failed
and 2 when the command line was wrong (nothing ran).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dsh_subagent.cli.main import main

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int | str | None:
    monkeypatch.setattr(sys, "argv", ["dsh-subagent", *args])
    try:
        main()
    except SystemExit as exited:
        return exited.code
    return 0


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_issue20_demo_resolves_a_relative_db_and_ends_with_a_summary(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "demo", "--db", "relative.db") == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert (cwd / "relative.db").is_file()
    assert out.splitlines()[-1] == (
        f"summary: 7 child runs started, 7 ended; the store is kept at {cwd / 'relative.db'}"
    )


def test_issue20_demo_prints_each_generated_id_in_full_once_then_short(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "demo") == 0
    out = capsys.readouterr().out
    ids = set(UUID.findall(out))
    assert len(ids) >= 3  # the one-shot runs and the accepted messages
    for ident in ids:
        assert out.count(ident) == 1, ident
    runs = [i for i in ids if out.count(i[:8]) > 1]
    assert len(runs) >= 3, "the one-shot runs are named again, by their short id"
    assert out.splitlines()[-1].endswith("the store was temporary (--db PATH keeps it)")


def test_issue20_demo_headings_say_what_happens(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "demo") == 0
    out = capsys.readouterr().out
    assert "restart: close the harness, reopen the store in a fresh one" in out
    assert "process" not in out


def test_issue20_demo_step_without_a_terminal_says_so(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert run(monkeypatch, "demo", "--step") == 0
    out, err = capsys.readouterr()
    assert err == "note: --step needs a terminal (stdin is not one); running without pauses\n"
    assert "press Enter" not in out
    assert out.splitlines()[-1].startswith("summary: ")


def test_issue20_db_in_a_missing_directory_is_a_usage_error_and_nothing_is_created(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("demo", "catalog"):
        assert run(monkeypatch, command, "--db", "missing/x.db") == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            f"error: USAGE: Invalid value for '--db': no directory {cwd / 'missing'}"
            f" (see 'dsh-subagent {command} --help')\n"
        )
    assert list(cwd.iterdir()) == []


def test_issue20_a_library_error_is_one_line_naming_the_field_once_exit_1(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (cwd / "bad.db").write_text("not sqlite")
    assert run(monkeypatch, "demo", "--db", "bad.db") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: PERSISTENCE_UNAVAILABLE: path: {cwd / 'bad.db'} is not ")
    assert err.count("\n") == 1
    assert err.count("path") == 1


def test_issue20_a_missing_store_or_session_is_a_runtime_error_exit_1(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "catalog", "--db", "none.db") == 1
    assert capsys.readouterr().err == (
        f"error: NOT_FOUND: --db: no session store at {cwd / 'none.db'}\n"
    )
    assert run(monkeypatch, "demo", "--db", "store.db") == 0
    capsys.readouterr()
    assert run(monkeypatch, "catalog", "--db", "store.db", "--parent", "ghost") == 1
    assert capsys.readouterr().err == (
        "error: NOT_FOUND: --parent: the store holds no session 'ghost'\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "--examples", "0"], "Invalid value for '--examples': 0 is not in the range"),
        (["verify", "--steps", "-1"], "Invalid value for '--steps': -1 is not in the range"),
        (["verify", "--seed", "x"], "Invalid value for '--seed': 'x' is not a valid integer"),
        (["nosuch"], "No such command 'nosuch'."),
    ],
)
def test_issue20_a_bad_command_line_is_one_usage_line_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    assert run(monkeypatch, *args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: USAGE: {message}")
    assert err.count("\n") == 1


def test_issue20_no_command_prints_the_help_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch) == 2
    assert capsys.readouterr().out.startswith("Usage: dsh-subagent [OPTIONS] COMMAND")
