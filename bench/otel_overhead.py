"""OTEL: W1 with tracing unavailable, with the OpenTelemetry API only, and with the SDK.

Theory of operation
-------------------
1. The three set-ups (issue 24) are the three code paths ``telemetry`` can take:
   ``unavailable`` runs without the package, so ``telemetry.AVAILABLE`` is false at import and
   the service gets the logging-only hooks; ``api`` imports the API with no tracer provider
   set, so every span is the API's no-op; ``sdk_noop`` traces through an SDK
   ``TracerProvider`` with no span processor: spans are recorded (attributes set), then
   dropped at their end.
2. Each set-up runs in its own fresh interpreter (``python -m bench.otel_overhead --variant
   V``), since the choice is made at import. ``unavailable`` hides the package before
   anything imports it (``sys.modules["opentelemetry"] = None``, the import then fails as
   it does without the package); the script checks ``telemetry.AVAILABLE`` agrees.
3. In each interpreter: W1's body (``service.start`` + ``await run.result`` +
   ``await run.dispose()``) ``warmup`` times untimed, then ``n`` times timed. The figure is
   process CPU time per delegation (the timed block's CPU over ``n``, and the per-call
   median), which other processes on a shared machine disturb less than wall time.
4. ``otel_overhead`` runs ``rounds`` rounds, each running the three set-ups once in turn
   (interleaved), and reports each round's figures, the medians over the rounds, and the
   overhead of ``api`` and ``sdk_noop`` over ``unavailable`` paired within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
VARIANTS: Final = ("unavailable", "api", "sdk_noop")
_HIDDEN: Final = (
    "import runpy, sys; sys.modules['opentelemetry'] = None; "
    "runpy.run_module('bench.otel_overhead', run_name='__main__')"
)
JsonDict = dict[str, object]


async def measure(variant: str, n: int, warmup: int) -> JsonDict:
    """W1's body ``n`` times in this interpreter, set up as ``variant`` (rules 1, 3)."""
    from bench.world import BenchModel, Timer, World, delegate_and_dispose
    from dsh_subagent.adapters import telemetry

    if telemetry.AVAILABLE is (variant == "unavailable"):
        raise SystemExit(f"{variant}: telemetry.AVAILABLE is {telemetry.AVAILABLE}")
    world = World(BenchModel())
    if variant == "sdk_noop":
        from opentelemetry.sdk.trace import TracerProvider

        telemetry.use_tracer_provider(world.service, TracerProvider())  # no span processor
    parent = await world.root("parent")
    for _ in range(warmup):
        await delegate_and_dispose(world, parent)
    timer = Timer()
    cpu0 = time.process_time_ns()
    for _ in range(n):
        await timer.time(lambda: delegate_and_dispose(world, parent))
    cpu_ns = time.process_time_ns() - cpu0
    return {
        "variant": variant,
        "available": telemetry.AVAILABLE,
        "cpu_us_per_delegation": round(cpu_ns / 1000 / n, 2),
        **timer.summary(),
    }


def in_fresh_interpreter(variant: str, n: int, warmup: int) -> JsonDict:
    """One set-up in a new interpreter, the package hidden for ``unavailable`` (rule 2)."""
    boot = ["-c", _HIDDEN] if variant == "unavailable" else ["-m", "bench.otel_overhead"]
    args = ["--variant", variant, "--n", str(n), "--warmup", str(warmup)]
    completed = subprocess.run(
        [sys.executable, *boot, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    if completed.returncode != 0:
        return {"error": (completed.stderr.strip().splitlines() or ["failed"])[-1]}
    result: JsonDict = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def _figure(result: JsonDict) -> float | None:
    value = result.get("cpu_us_per_delegation")
    return float(value) if isinstance(value, int | float) else None


def otel_overhead(n: int, warmup: int, rounds: int) -> JsonDict:
    """``rounds`` interleaved rounds of the three set-ups, and the paired overheads (rule 4)."""
    runs: dict[str, list[JsonDict]] = {variant: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            runs[variant].append(in_fresh_interpreter(variant, n, warmup))
    summary: JsonDict = {"n": n, "warmup": warmup, "rounds": rounds, "runs": runs}
    for variant in VARIANTS:
        values = [v for v in map(_figure, runs[variant]) if v is not None]
        summary[f"{variant}_cpu_us"] = round(statistics.median(values), 2) if values else None
    for variant in VARIANTS[1:]:
        paired = [
            100.0 * (with_ / without - 1.0)
            for with_, without in zip(
                map(_figure, runs[variant]), map(_figure, runs["unavailable"]), strict=True
            )
            if with_ is not None and without
        ]
        summary[f"{variant}_overhead_pct"] = round(statistics.median(paired), 2) if paired else None
        summary[f"{variant}_overhead_pct_per_round"] = [round(p, 2) for p in paired]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--n", type=int, default=500, help="timed delegations")
    parser.add_argument("--warmup", type=int, default=100, help="untimed delegations")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.variant, args.n, args.warmup))))


if __name__ == "__main__":
    main()
