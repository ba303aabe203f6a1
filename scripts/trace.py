"""Maintain spec/traceability.toml.

    python scripts/trace.py ids     # regenerate spec/catalog_ids.txt from ../shared/reference
    python scripts/trace.py merge [NAME...]  # fold spec/trace_fragments/*.toml (or NAME.toml)

``merge`` keeps every existing entry, lets a fragment entry replace the entry for its rule,
and adds a ``planned`` entry (naming the issue that owns the rule's family) for any catalog
rule still missing. Fragments are deleted once merged.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "spec" / "traceability.toml"
IDS = ROOT / "spec" / "catalog_ids.txt"
FRAGMENTS = ROOT / "spec" / "trace_fragments"
SHARED = ROOT.parent / "shared" / "reference"

OWNER = {
    "HARNESS": "issue #5 (harness protocols, reference loop, persistence)",
    **dict.fromkeys(
        [
            "REG",
            "CAP",
            "ONE",
            "DEPTH",
            "POLICY",
            "EVT",
            "OOP",
            "SPAWN",
            "FORK",
            "DRIVER",
            "STRUCT",
            "DESC",
            "ERR",
        ],
        "issue #6 (SubagentService part 1)",
    ),
    **dict.fromkeys(
        ["CONT", "RES", "AUTH", "NOTICE", "TEAR", "SETUP", "PROJ", "LIST"],
        "issue #7 (SubagentService part 2)",
    ),
    **dict.fromkeys(["TOOL", "BG", "CTRL", "REPORT"], "issue #8 (model-facing tools)"),
}


def catalog_ids() -> list[tuple[str, str]]:
    ids = []
    for name, pattern in (
        ("behavior-catalog.md", r"^\*\*([A-Z]+-\d+[a-z]?)\.\*\*"),
        ("tools-catalog.md", r"^- \*\*([A-Z]+-\d+[a-z]?)\*\*"),
        ("acp-rules.md", r"^\* \*\*((?:ACP|ASK)-\d+)\b"),
    ):
        for line in (SHARED / name).read_text(encoding="utf-8").splitlines():
            if match := re.match(pattern, line):
                ids.append((match.group(1), name))
    return ids


def write_ids() -> None:
    lines = [
        "# Rule IDs of shared/reference/behavior-catalog.md, tools-catalog.md and acp-rules.md,",
        "# one a line.",
        "# Regenerate with: .venv/bin/python scripts/trace.py ids",
    ]
    lines += [f"{rule}\t{source}" for rule, source in catalog_ids()]
    IDS.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _load(path: Path) -> dict[str, dict[str, object]]:
    with path.open("rb") as handle:
        return dict(tomllib.load(handle).get("rules", {}))


RANK = {"implemented": 3, "deviates": 2, "partial": 1, "planned": 0}


def combine(old: dict[str, object] | None, new: dict[str, object]) -> dict[str, object]:
    """Merge two entries for one rule: the stronger status wins, tests are united, and the
    notes of both are kept (a planned placeholder note is dropped once real work lands)."""
    if old is None or str(old.get("note", "")).startswith("not yet built"):
        return new
    status = max(
        str(old.get("status", "planned")), str(new.get("status", "planned")), key=RANK.__getitem__
    )
    tests = list(dict.fromkeys([*old.get("tests", []), *new.get("tests", [])]))  # type: ignore[misc]
    notes = [str(e.get("note", "")) for e in (old, new) if e.get("status") == status]
    return {"status": status, "tests": tests, "note": " ".join(n for n in notes if n)}


def merge(names: list[str]) -> None:
    table = _load(TABLE) if TABLE.exists() else {}
    fragments = sorted(FRAGMENTS.glob("*.toml")) if FRAGMENTS.is_dir() else []
    if names:
        fragments = [f for f in fragments if f.stem in names]
    for fragment in fragments:
        for rule, entry in _load(fragment).items():
            table[rule] = combine(table.get(rule), entry)
    order = [
        line.split("\t")[0] for line in IDS.read_text().splitlines() if line and line[0] != "#"
    ]
    out = [
        "# Traceability: one entry per catalog rule (spec/catalog_ids.txt).",
        "# status: implemented | partial | planned | deviates; note required unless implemented.",
        "# Checked by tests/spec/test_traceability.py. Update with scripts/trace.py merge.",
        "",
    ]
    for rule in order + sorted(set(table) - set(order)):
        entry = table.get(rule) or {
            "status": "planned",
            "tests": [],
            "note": f"not yet built: {OWNER.get(rule.split('-')[0], 'a later issue')}",
        }
        tests = ", ".join(json.dumps(str(t)) for t in entry.get("tests", []))  # type: ignore[attr-defined]
        out += [
            f'[rules."{rule}"]',
            f"status = {json.dumps(str(entry.get('status', 'planned')))}",
            f"tests = [{tests}]",
            f"note = {json.dumps(str(entry.get('note', '')))}",
            "",
        ]
    TABLE.write_text("\n".join(out), encoding="utf-8")
    for fragment in fragments:
        fragment.unlink()
    print(f"merged {len(fragments)} fragment(s) into {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["ids"]:
        write_ids()
    else:
        merge(sys.argv[2:])
