"""Diagrams rendered from the charts, checked in under ``docs/diagrams/``.

Theory of operation
-------------------
1. Every chart in ``CHARTS`` renders to Mermaid text with python-statemachine's own
   formatter; nothing is drawn by hand, so a diagram cannot drift from its chart.
2. ``render_all()`` returns ``{file name: text}``; ``write_all(directory)`` writes them and
   returns the paths whose content changed. ``tests/spec/test_diagrams.py`` fails when the
   checked-in files differ from a fresh rendering (regenerate with ``dsh-subagent diagram``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dsh_subagent.spec.charts import CHARTS

if TYPE_CHECKING:
    from statemachine import StateChart


def render(chart: type[StateChart[object]]) -> str:
    """Mermaid ``stateDiagram-v2`` text of ``chart``, with a title comment."""
    title = (chart.__doc__ or chart.__name__).strip().splitlines()[0]
    return f"%% {chart.__name__}: {title}\n{chart:mermaid}"


def render_all() -> dict[str, str]:
    """File name → Mermaid text, for every chart."""
    return {f"{name}.mmd": render(chart) for name, chart in CHARTS.items()}


def write_all(directory: Path) -> list[Path]:
    """Write every diagram into ``directory``; return the files whose content changed."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in render_all().items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed
