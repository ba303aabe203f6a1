"""OTEL: W1 with tracing unavailable, with the OpenTelemetry API only, and with the SDK.

Theory of operation
-------------------
1. The three set-ups (issue 24) are the three code paths ``telemetry`` can take:
   ``unavailable`` runs without the package, so ``telemetry.AVAILABLE`` is false at import and
   the service gets the logging-only hooks; ``api`` imports the API with no tracer provider
   set, so every span is the API's no-op; ``sdk_noop`` traces through an SDK
   ``TracerProvider`` with no span processor: spans are recorded (attributes set), then
   dropped at their end.
2. Each set-up lives in its own interpreter, a worker (``python -m bench.otel_overhead
   --variant V``), since the choice is made at import. ``unavailable`` hides the package
   before anything imports it (``sys.modules["opentelemetry"] = None``: the import then
   fails as it does without the package); each worker checks ``telemetry.AVAILABLE`` agrees.
3. A worker runs W1's body (``service.start`` + ``await run.result`` + ``await
   run.dispose()``) ``warmup`` times, says it is ready, then runs one block of ``k``
   delegations for each ``k`` it reads on stdin, answering with the block's process CPU
   time. CPU time is what other processes on a shared machine disturb least.
4. ``otel_overhead`` runs ``rounds`` rounds; each starts the three workers afresh and hands
   them ``blocks`` blocks in turn (interleaved block by block, so a change of load hits
   the three alike). Per block it takes each set-up's CPU per delegation and the overheads
   of ``api`` and ``sdk_noop`` over ``unavailable`` in that block; the figures are medians
   over every block of every round, with each round's median beside them.
5. Under load the per-block figures scatter by more than the overhead sought, so
   ``hook_cost`` also measures the difference directly, in one interpreter: the only code
   W1 runs differently with the API is the service's ``subagent/start`` and ``subagent/end``
   hooks (``Tracing`` with the API's no-op spans, against ``Lifecycle``, what ``attach``
   hands out without the package), replayed on one delegation's real payloads in
   alternating blocks; the CPU per delegation they add, and its share of ``unavailable``.
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


async def serve(variant: str, warmup: int) -> None:
    """The worker: warm up, then time one block per ``k`` read on stdin (rules 1-3)."""
    from bench.world import BenchModel, World, delegate_and_dispose
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
    print(json.dumps({"variant": variant, "available": telemetry.AVAILABLE}), flush=True)
    for line in sys.stdin:
        k = int(line)
        cpu0 = time.process_time_ns()
        for _ in range(k):
            await delegate_and_dispose(world, parent)
        print(json.dumps({"n": k, "cpu_ns": time.process_time_ns() - cpu0}), flush=True)


class Worker:
    """One set-up's interpreter, driven block by block over its stdin and stdout (rule 4)."""

    def __init__(self, variant: str, warmup: int) -> None:
        boot = ["-c", _HIDDEN] if variant == "unavailable" else ["-m", "bench.otel_overhead"]
        self.process = subprocess.Popen(
            [sys.executable, *boot, "--variant", variant, "--warmup", str(warmup)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.ready = self._answer()

    def _answer(self) -> JsonDict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited with {self.process.wait()}")
        answer: JsonDict = json.loads(line)
        return answer

    def block(self, k: int) -> float:
        """CPU microseconds per delegation over one block of ``k``."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{k}\n")
        self.process.stdin.flush()
        cpu_ns = self._answer()["cpu_ns"]
        assert isinstance(cpu_ns, int)
        return cpu_ns / 1000 / k

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


async def otel_overhead(block: int, blocks: int, warmup: int, rounds: int) -> JsonDict:
    """``rounds`` rounds of ``blocks`` interleaved blocks per set-up (rule 4)."""
    cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    per_round: list[JsonDict] = []
    available: dict[str, object] = {}
    for _ in range(rounds):
        workers = {variant: Worker(variant, warmup) for variant in VARIANTS}
        try:
            available = {v: w.ready.get("available") for v, w in workers.items()}
            mine: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
            for _ in range(blocks):
                for variant, worker in workers.items():
                    mine[variant].append(worker.block(block))
        finally:
            for worker in workers.values():
                worker.close()
        for variant in VARIANTS:
            cpu[variant] += mine[variant]
        per_round.append({f"{v}_cpu_us": _median(mine[v]) for v in VARIANTS})
    summary: JsonDict = {
        "delegations_per_variant": block * blocks * rounds,
        "block": block,
        "blocks": blocks,
        "rounds": rounds,
        "warmup": warmup,
        "available": available,
        "per_round": per_round,
    }
    for variant in VARIANTS:
        summary[f"{variant}_cpu_us"] = _median(cpu[variant])
    for variant in VARIANTS[1:]:
        paired = [
            100.0 * (with_ / without - 1.0)
            for with_, without in zip(cpu[variant], cpu["unavailable"], strict=True)
        ]
        summary[f"{variant}_overhead_pct"] = _median(paired)
        summary[f"{variant}_overhead_pct_iqr"] = (
            [round(q, 2) for q in statistics.quantiles(paired, n=4)[::2]]
            if len(paired) > 1
            else None
        )
    summary.update(await hook_cost(blocks * block * rounds))
    added, base = summary["hooks_api_added_us"], summary["unavailable_cpu_us"]
    assert isinstance(added, float)
    assert isinstance(base, float)
    summary["api_hooks_pct_of_w1"] = round(100.0 * added / base, 2)
    return summary


async def hook_cost(n: int, blocks: int = 10) -> JsonDict:
    """CPU per delegation of the start and end hooks: no-op spans against logging only (rule 5)."""
    from bench.world import BenchModel, World, delegate_and_dispose
    from dsh_subagent.adapters import telemetry

    world = World(BenchModel())
    payloads: list[object] = []
    world.service.on("subagent/start", payloads.append)
    world.service.on("subagent/end", payloads.append)
    await delegate_and_dispose(world, await world.root("parent"))
    hooks = {"unavailable": telemetry.Lifecycle(), "api": telemetry.attach(world.registry)}
    assert type(hooks["api"]) is not telemetry.Lifecycle, "the API is not importable here"
    spent = dict.fromkeys(hooks, 0)
    each = max(1, n // blocks)
    for _ in range(blocks):
        for name, hook in hooks.items():
            cpu0 = time.process_time_ns()
            for _ in range(each):
                for payload in payloads:
                    hook.observe(payload)
            spent[name] += time.process_time_ns() - cpu0
    per = {name: ns / 1000 / (each * blocks) for name, ns in spent.items()}
    result: JsonDict = {f"hooks_{name}_us": round(us, 3) for name, us in per.items()}
    result["hooks_api_added_us"] = round(per["api"] - per["unavailable"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--warmup", type=int, default=100, help="untimed delegations")
    args = parser.parse_args()
    asyncio.run(serve(args.variant, args.warmup))


if __name__ == "__main__":
    main()
