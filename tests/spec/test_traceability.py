"""The traceability table stays complete and true (issue: executable spec)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsh_subagent.spec.traceability import load_catalog_ids, load_table, names_a_test, problems

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "spec" / "traceability.toml"
IDS = ROOT / "spec" / "catalog_ids.txt"
SHARED = ROOT.parent / "shared" / "reference"


def test_table_covers_every_catalog_rule_and_names_real_tests() -> None:
    found = problems(load_table(TABLE), load_catalog_ids(IDS), ROOT)
    assert found == [], "\n".join(found[:40])


def test_vendored_id_list_matches_the_catalogs_when_present() -> None:
    if not SHARED.is_dir():
        pytest.skip("shared/reference is not beside this checkout")
    ids: list[str] = []
    for name, pattern in (
        ("behavior-catalog.md", r"^\*\*([A-Z]+-\d+[a-z]?)\.\*\*"),
        ("tools-catalog.md", r"^- \*\*([A-Z]+-\d+[a-z]?)\*\*"),
        ("acp-rules.md", r"^\* \*\*((?:ACP|ASK)-\d+)\b"),
    ):
        for line in (SHARED / name).read_text(encoding="utf-8").splitlines():
            match = re.match(pattern, line)
            if match:
                ids.append(match.group(1))
    lines = IDS.read_text(encoding="utf-8").splitlines()
    project = {line.split("\t")[0] for line in lines if line.endswith("\tDESIGN.md")}
    assert ids == [rule for rule in load_catalog_ids(IDS) if rule not in project]


def test_checker_reports_each_kind_of_problem(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        "def test_a():\n    pass\nclass TestK:\n    def test_b(self):\n        pass\n"
    )
    table: dict[str, dict[str, object]] = {
        "A-1": {"status": "implemented", "tests": ["t.py::test_a", "t.py::TestK::test_b"]},
        "A-2": {"status": "implemented", "tests": []},
        "A-3": {"status": "planned", "tests": [], "note": ""},
        "A-4": {"status": "deviates", "tests": [], "note": "because"},
        "A-5": {"status": "weird", "tests": ["t.py::test_gone"]},
        "Z-9": {"status": "planned", "tests": [], "note": "x"},
        "A-7": {"status": "implemented", "tests": "t.py::test_a"},
    }
    found = problems(table, ["A-1", "A-2", "A-3", "A-4", "A-5", "A-6", "A-7", "A-7"], tmp_path)
    assert found == [
        "A-7: listed twice in the catalogs",
        "A-6: missing from the table",
        "Z-9: not a catalog rule",
        "A-2: implemented but names no test",
        "A-3: status planned needs a note",
        "A-4: deviates without citing a seed or DESIGN decision",
        "A-5: unknown status 'weird'",
        "A-5: test 't.py::test_gone' does not exist",
        "A-7: tests must be a list",
    ]
    assert names_a_test("t.py::test_a[param]", tmp_path)
    assert not names_a_test("t.py", tmp_path)
    assert not names_a_test("missing.py::test_a", tmp_path)
