"""Micro-benchmark of ``PMap``: get, set, insert and remove per size; old against new in one run.

Usage: ``.venv/bin/python -m bench.pmap_micro [OLD_PMAP_PY]``. ``OLD_PMAP_PY`` is a copy of an
older ``core/dsh_subagent/core/pmap.py`` (e.g. ``git show REV:core/dsh_subagent/core/pmap.py
> /tmp/pmap_old.py``); without it only the current module is timed. Each cell is the median
of interleaved repeats of process CPU time per operation (ns), so the two columns share the
machine's load. Keys are short strings, as in the core's ledgers and session maps.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
import timeit
from types import ModuleType

from dsh_subagent.core import pmap as new_pmap

SIZES = (2, 8, 32, 1000, 10000)
OPS = ("get", "set", "insert", "remove")
REPEATS = 7
CALLS = 2000


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("pmap_old", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pmap_old"] = module
    spec.loader.exec_module(module)
    return module


def _statement(module: ModuleType, op: str, size: int) -> tuple[str, dict[str, object]]:
    keys = [f"session-{n}" for n in range(size)]
    pmap = module.PMap({key: n for n, key in enumerate(keys)})
    spare = "session-new"
    scope: dict[str, object] = {"m": pmap, "keys": keys, "spare": spare}
    cycle = f"keys[(i := (i + 7) % {size})]"
    statements = {
        "get": f"m[{cycle}]",
        "set": f"m.set({cycle}, 1)",
        "insert": "m.set(spare, 1)",
        "remove": f"m.remove({cycle})",
    }
    return statements[op], scope


def _ns_per_call(module: ModuleType, op: str, size: int) -> float:
    statement, scope = _statement(module, op, size)
    timer = timeit.Timer(statement, "i = 0", globals=scope, timer=time.process_time)
    return timer.timeit(CALLS) / CALLS * 1e9


def main() -> None:
    modules: list[tuple[str, ModuleType]] = [("new", new_pmap)]
    if len(sys.argv) > 1:
        modules.insert(0, ("old", _load(sys.argv[1])))
    header = f"{'op':<8}{'size':>7}" + "".join(f"{name + ' ns':>11}" for name, _ in modules)
    print(header + ("   old/new" if len(modules) == 2 else ""))
    for op in OPS:
        for size in SIZES:
            samples: dict[str, list[float]] = {name: [] for name, _ in modules}
            for _ in range(REPEATS):
                for name, module in modules:
                    samples[name].append(_ns_per_call(module, op, size))
            medians = [statistics.median(samples[name]) for name, _ in modules]
            row = f"{op:<8}{size:>7}" + "".join(f"{value:>11.0f}" for value in medians)
            if len(medians) == 2:
                row += f"{medians[0] / medians[1]:>10.1f}x"
            print(row)


if __name__ == "__main__":
    main()
