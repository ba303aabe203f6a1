"""Run ``crosshair check`` over every core module that carries contracts.

CrossHair's defaults stop after 5 uninteresting iterations and miss planted bugs
(see shared/reference/style.md, pitfall C1), so the budget is explicit here:
at least 20 uninteresting iterations and a per-condition time bound. Any
counterexample (non-empty output or a non-zero exit) fails the run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "core" / "dsh_subagent" / "core"
MAX_UNINTERESTING = "20"
PER_CONDITION_TIMEOUT = "6"


def modules_with_contracts() -> list[Path]:
    return sorted(
        p for p in CORE.rglob("*.py") if "post:" in p.read_text() or "pre:" in p.read_text()
    )


def main() -> int:
    targets = modules_with_contracts()
    if not targets:
        print("crosshair: no core module carries contracts yet")
        return 0
    failed = False
    for path in targets:
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "crosshair",
                "check",
                str(path),
                "--max_uninteresting_iterations",
                MAX_UNINTERESTING,
                "--per_condition_timeout",
                PER_CONDITION_TIMEOUT,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        out = (proc.stdout + proc.stderr).strip()
        ok = proc.returncode == 0 and not out
        took = time.monotonic() - started
        print(f"crosshair {path.name}: {'ok' if ok else 'FAILED'} ({took:.1f}s)")
        if not ok:
            failed = True
            print(out)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
