"""``dsh-subagent verify`` through its CLI: tables, seeds, JSON, JUnit XML, vacuity, bad counts.

Every Hypothesis run here is tiny (a few examples of a few steps). Hypothesis's files go to a
scratch cache (``XDG_CACHE_HOME``), and each test runs in an empty working directory, so a test
can check that nothing lands there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner, Result

from dsh_subagent.cli.main import cli
from dsh_subagent.core.manager import ManagerState
from dsh_subagent.spec import machines
from dsh_subagent.spec.invariants import check_state

# Runs the console entry point with Hypothesis made unimportable (``None`` in
# ``sys.modules`` makes every ``import hypothesis`` fail as if it were not installed).
_WITHOUT_HYPOTHESIS = """
import sys
sys.modules["hypothesis"] = None
sys.argv = ["dsh-subagent", "verify", "--examples", "1"]
from dsh_subagent.cli.main import main
main()
"""

CONSOLE_SCRIPT = str(Path(sys.executable).with_name("dsh-subagent"))
CORE = ["verify", "--machine", "core", "--examples", "3", "--steps", "4", "--seed", "1"]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, with the user cache directory under ``tmp_path``."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return work


def verify(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def document(result: Result) -> Any:
    return json.loads(result.stdout)


def test_verify_without_hypothesis_names_the_extra_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HYPOTHESIS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "error: MISSING_EXTRA: dsh-subagent verify needs hypothesis:"
        " pip install 'dsh-subagent[verify]'"
    ]


def test_verify_runs_the_core_machine_and_prints_its_invariant_table(workdir: Path) -> None:
    result = verify(*CORE)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("seed: 1\n")
    assert "core lockstep machine" in result.output
    assert re.search(r"INV-INBOX-1 .*│ [1-9]\d* +│ held", result.output), result.output
    assert "violated" not in result.output
    assert "vacuous" not in result.output


def test_verify_prints_the_drawn_seed_on_a_passing_run(workdir: Path) -> None:
    result = verify("verify", "--machine", "core", "--examples", "1", "--steps", "2")
    assert result.exit_code == 0, result.output
    assert re.match(r"seed: \d+\n", result.output), result.output


def test_verify_json_is_one_document_with_counts_seed_and_verdict(workdir: Path) -> None:
    result = verify(*CORE, "--json")
    assert result.exit_code == 0, result.output
    doc = document(result)
    assert doc["verdict"] == "pass"
    assert (doc["seed"], doc["examples"], doc["steps"]) == (1, 3, 4)
    [core] = doc["machines"]
    assert (core["name"], core["seed"], core["verdict"], core["failure"]) == (
        "core",
        1,
        "pass",
        None,
    )
    ids = [inv["id"] for inv in core["invariants"]]
    assert ids == list(machines.CoreMachine.CHECKED)
    assert all(inv["checks"] > 0 and inv["result"] == "held" for inv in core["invariants"])
    assert result.stderr == "seed: 1\n"


@pytest.fixture
def res_1_always_violated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a violation: INV-RES-1 fails as soon as the core holds any Activation."""

    def planted(state: ManagerState) -> dict[str, list[str]]:
        found = check_state(state)
        if state.activations:
            found["INV-RES-1"] = ["planted violation"]
        return found

    monkeypatch.setattr(machines, "check_state", planted)


@pytest.mark.usefixtures("res_1_always_violated")
def test_verify_json_reports_a_violation_with_its_shrunk_sequence(workdir: Path) -> None:
    result = verify(*CORE, "--json")
    assert result.exit_code == 1, result.output
    doc = document(result)
    assert doc["verdict"] == "fail"
    [core] = doc["machines"]
    results = {inv["id"]: inv["result"] for inv in core["invariants"]}
    assert results["INV-RES-1"] == "violated"
    assert "planted violation" in core["failure"]["message"]
    sequence = core["failure"]["sequence"]
    assert "state = CoreMachine()" in sequence
    assert any(line.startswith("state.") for line in sequence[1:])
    assert doc["reproduce"] == (
        "dsh-subagent verify --machine core --examples 3 --steps 4 --seed 1"
    )


def test_verify_keeps_hypothesis_files_in_the_cache_not_the_working_directory(
    tmp_path: Path,
) -> None:
    # A fresh process: Hypothesis writes some of its caches once per process.
    work = tmp_path / "work"
    work.mkdir()
    for extra in ([], ["--cache-dir", "off"]):
        cache = tmp_path / f"cache{len(extra)}"
        done = subprocess.run(
            [CONSOLE_SCRIPT, *CORE[:-2], "--seed", "2", *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=work,
            env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert list(work.iterdir()) == []
        assert (cache / "dsh-subagent" / "hypothesis").is_dir() is (extra == [])


@pytest.mark.usefixtures("res_1_always_violated")
def test_verify_junit_xml_has_a_case_per_invariant_and_fails_the_violated_one(
    workdir: Path, tmp_path: Path
) -> None:
    report = tmp_path / "reports" / "verify.xml"
    result = verify(*CORE, "--junit-xml", str(report))
    assert result.exit_code == 1, result.output
    [suite] = ET.parse(report).getroot()
    assert suite.get("name") == "verify.core"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(machines.CoreMachine.CHECKED)
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["INV-RES-1"]
    assert suite.get("failures") == "1"
    assert suite.find("properties/property[@name='seed']").get("value") == "1"  # type: ignore[union-attr]


def test_verify_fails_an_invariant_never_checked_unless_allowed(workdir: Path) -> None:
    # One step per sequence never reaches a whole drain, so the "eventually" checks of the
    # service machine never run.
    tiny = ["verify", "--machine", "service", "--examples", "1", "--steps", "1", "--seed", "1"]
    result = verify(*tiny, "--json")
    assert result.exit_code == 1, result.output
    [service] = document(result)["machines"]
    vacuous = [inv["id"] for inv in service["invariants"] if inv["result"] == "vacuous"]
    assert "SVC-ORPHAN-1" in vacuous
    assert service["verdict"] == "fail"
    allowed = verify(*tiny, "--allow-vacuous")
    assert allowed.exit_code == 0, allowed.output
    assert "vacuous" in allowed.output


@pytest.mark.parametrize(
    ("option", "value"), [("--examples", "-1"), ("--examples", "0"), ("--steps", "0")]
)
def test_verify_rejects_bad_counts_as_a_usage_error(option: str, value: str) -> None:
    result = CliRunner().invoke(cli, ["verify", option, value])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.output
    assert "Traceback" not in result.output
