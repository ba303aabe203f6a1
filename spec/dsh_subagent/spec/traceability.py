"""The traceability table: where each catalog rule meets the code and its tests.

Theory of operation
-------------------
1. ``spec/traceability.toml`` holds one ``[rules."ID"]`` entry per rule ID of the behaviour
   and tools catalogs (listed in ``spec/catalog_ids.txt``), with a ``status``
   (implemented | partial | planned | deviates), the ``tests`` that check it, and a ``note``.
2. ``problems(table, catalog_ids, repo_root)`` returns every way the table is wrong, as
   readable strings; the test suite asserts the list is empty. Checks: each catalog ID is
   present exactly once and no unknown ID is listed; statuses are known; implemented rules
   name at least one test; partial, planned and deviates rules carry a note; deviates notes
   cite a seed or a DESIGN decision; every named test exists (found statically with ``ast``,
   without importing or running it).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

STATUSES = frozenset({"implemented", "partial", "planned", "deviates"})
_CITATION = re.compile(r"DESIGN|decision \d|seed|A\d+\b", re.IGNORECASE)


def load_table(path: Path) -> Mapping[str, Mapping[str, object]]:
    """The ``rules`` table of a traceability TOML file."""
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    rules = data.get("rules", {})
    if not isinstance(rules, dict):
        raise ValueError(f"{path}: [rules] must be a table")
    return rules


def load_catalog_ids(path: Path) -> list[str]:
    """Rule IDs listed in ``catalog_ids.txt`` (first column; ``#`` lines are comments)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line and not line.startswith("#")]


@cache
def _test_names(path: Path) -> frozenset[str]:
    """``func`` and ``Class::method`` names of test functions defined in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):  # e.g. ``TestMachine = Machine.TestCase``
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.update({target.id, f"{target.id}::runTest"})
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{item.name}")
    return frozenset(names)


def names_a_test(node_id: str, repo_root: Path) -> bool:
    """Whether ``path::name`` (parameters stripped) names a test defined in the repo."""
    file_part, _, name = node_id.partition("::")
    path = repo_root / file_part
    if not name or not path.is_file():
        return False
    return name.split("[")[0] in _test_names(path)


def problems(
    table: Mapping[str, Mapping[str, object]],
    catalog_ids: Iterable[str],
    repo_root: Path,
) -> list[str]:
    """Every inconsistency between the table, the catalogs and the test tree."""
    found: list[str] = []
    wanted = list(catalog_ids)
    duplicates = {i for i in wanted if wanted.count(i) > 1}
    found += [f"{i}: listed twice in the catalogs" for i in sorted(duplicates)]
    found += [f"{i}: missing from the table" for i in wanted if i not in table]
    found += [f"{i}: not a catalog rule" for i in table if i not in set(wanted)]
    for rule_id, entry in table.items():
        status = entry.get("status")
        tests = entry.get("tests", [])
        note = str(entry.get("note", "")).strip()
        if status not in STATUSES:
            found.append(f"{rule_id}: unknown status {status!r}")
        if not isinstance(tests, list):
            found.append(f"{rule_id}: tests must be a list")
            continue
        if status == "implemented" and not tests:
            found.append(f"{rule_id}: implemented but names no test")
        if status in {"partial", "planned", "deviates"} and not note:
            found.append(f"{rule_id}: status {status} needs a note")
        if status == "deviates" and not _CITATION.search(note):
            found.append(f"{rule_id}: deviates without citing a seed or DESIGN decision")
        found += [
            f"{rule_id}: test {t!r} does not exist"
            for t in tests
            if not names_a_test(str(t), repo_root)
        ]
    return found
