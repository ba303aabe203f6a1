"""The checked-in diagrams are exactly what the charts render."""

from __future__ import annotations

from pathlib import Path

from dsh_subagent.spec.diagrams import render_all, write_all

DOCS = Path(__file__).resolve().parents[2] / "docs" / "diagrams"


def test_checked_in_diagrams_match_the_charts() -> None:
    for name, text in render_all().items():
        path = DOCS / name
        assert path.is_file(), f"{path} is missing: run `dsh-subagent diagram`"
        assert path.read_text(encoding="utf-8") == text, (
            f"{name} is stale: run `dsh-subagent diagram`"
        )


def test_write_all_reports_only_changed_files(tmp_path: Path) -> None:
    first = write_all(tmp_path)
    assert {p.name for p in first} == set(render_all())
    assert write_all(tmp_path) == []
    assert all("stateDiagram-v2" in p.read_text() for p in first)
