"""``bench/run``: our workloads and the peers', interleaved, into one table and ``latest.json``.

Theory of operation
-------------------
1. The peers' scripts are called where they live (``../shared/bench/peers``), never copied.
   They run in their own virtualenv, ``bench/.venv-peers`` (created on first use, git-ignored
   by a ``.gitignore`` inside it), with the packages the peers' README names. If the venv or
   a script cannot run, that system is absent from every result (never zero) and the reason
   is printed and written under the table.
2. Each repetition runs every script once, one at a time, in a fixed order: ours
   (``bench/workloads.py``), the bare-asyncio floor, openai-agents, pydantic-ai, LangGraph.
   Before each run the machine must be quiet (other CPU use below ``QUIET_PCT`` over 2 s,
   waiting at most ``--max-wait`` s); the other processes' CPU share during the run is kept.
3. Each figure is the median over the repetitions of the per-run figure; cells show the
   median and the [min-max] of the runs. Beside each wall figure of W1-W3 the table shows
   the process CPU time too (not in ``latest.json``): on a shared machine it is the less
   disturbed cross-check; beside W4 it shows the drain's time in the cyclic GC (table
   only too). W6 (a deep chain) and W7 (a wide tree) report start + drain at the large size,
   its ratio to the small size, and memory per child with its ratio (ours only). Ratios:
   ours / floor and ours / best peer (the
   lowest peer figure; below 1 means we are faster).
4. The peer figure for W1 is each peer's delegation call without a parent model (the peers'
   README: ``W1_as_tool``, ``W1_delegate_body``, ``W1_parent_node``); W2 is
   ``W2_direct_barrier``; W3 is ``W3_resume``. W4 and W5 are ours only.
5. A full run writes ``bench/results/latest.json`` (the issue's shape) and replaces the table
   between the markers in ``bench/RESULTS.md``; ``--quick`` (small sizes, one repetition)
   writes ``bench/results/quick.json.tmp`` and nothing else. Raw per-run records go to
   ``bench/results/raw.jsonl.tmp`` (``quick-raw.jsonl.tmp``); ``--from-raw FILE`` re-renders
   both outputs from such a file without running anything; ``--results DIR`` moves the
   JSON outputs elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

BENCH: Final = Path(__file__).resolve().parent
ROOT: Final = BENCH.parent
PEERS_DIR: Final = ROOT.parent / "shared" / "bench" / "peers"
PEERS_VENV: Final = BENCH / ".venv-peers"
PEER_PACKAGES: Final = (
    "openai-agents",
    "pydantic-ai-slim",
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "psutil",
)
OURS: Final = "ours"
FLOOR: Final = "asyncio_floor"
SCRIPTS: Final = {  # system -> peer script, in run order after ours
    FLOOR: "bench_asyncio_baseline.py",
    "openai-agents": "bench_openai_agents.py",
    "pydantic-ai": "bench_pydantic_ai.py",
    "langgraph": "bench_langgraph.py",
}
PEERS: Final = ("openai-agents", "pydantic-ai", "langgraph")
W1_MECHANISM: Final = {
    FLOOR: "W1_direct",
    OURS: "W1_oneshot",
    "openai-agents": "W1_as_tool",
    "pydantic-ai": "W1_delegate_body",
    "langgraph": "W1_parent_node",
}
W2_VARIANT: Final = {OURS: "W2_oneshot_barrier"}
TABLE_ONLY: Final = frozenset(
    {"W1_cpu_us_median", "W2_cpu_ms", "W3_resume_cpu_us_median", "W4_gc_10k_ms"}
)
"""Process CPU time beside the wall figures (a cross-check when other processes compete),
and the part of the 10k drain spent in CPython's cyclic garbage collector."""
OTEL_FIGURES: Final = (
    "unavailable_cpu_us",
    "api_cpu_us",
    "sdk_noop_cpu_us",
    "api_overhead_pct",
    "sdk_noop_overhead_pct",
    "hooks_api_added_us",
    "api_hooks_pct_of_w1",
)
"""W1 with tracing unavailable, the API only, the SDK with no span processor (issue 24)."""
QUIET_PCT: Final = 15.0
RUN_TIMEOUT_S: Final = 900
DASH: Final = "\u2013"
MARK_BEGIN: Final = "<!-- bench/run table: begin -->"
MARK_END: Final = "<!-- bench/run table: end -->"
Record = dict[str, object]
Figures = dict[str, dict[str, list[float]]]  # figure -> system -> per-run values


# --------------------------------------------------------------------------- the peers' venv


def peers_python(peers_dir: Path, install: bool) -> tuple[Path | None, str]:
    """The peers' interpreter, creating and filling the venv if needed; or None and why."""
    if not peers_dir.is_dir():
        return None, f"peer scripts not found at {peers_dir}"
    python = PEERS_VENV / "bin" / "python"
    if _imports_ok(python):
        return python, ""
    if not install:
        return None, "peer venv missing (run without --no-install to create it)"
    print(f"installing the peers into {PEERS_VENV} ...", flush=True)
    log = BENCH / "results" / "peers-install.log.tmp"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(PEERS_VENV)], check=False, stdout=out, stderr=out
        )
        if made.returncode == 0:
            (PEERS_VENV / ".gitignore").write_text("*\n")
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES],
                check=False,
                stdout=out,
                stderr=out,
            )
    if _imports_ok(python):
        return python, ""
    return None, f"peer install failed (see {log.relative_to(ROOT)})"


def _imports_ok(python: Path) -> bool:
    if not python.exists():
        return False
    probe = "import agents, pydantic_ai, langgraph, langgraph.checkpoint.sqlite, psutil"
    return (
        subprocess.run([str(python), "-c", probe], check=False, capture_output=True).returncode == 0
    )


# --------------------------------------------------------------------------- running


def busy_and_total_jiffies() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_quiet(max_wait: float) -> float:
    """Wait (bounded) until other processes use under ``QUIET_PCT`` of the machine."""
    deadline = time.monotonic() + max_wait
    while True:
        busy0, total0 = busy_and_total_jiffies()
        time.sleep(2.0)
        busy1, total1 = busy_and_total_jiffies()
        pct = 100.0 * (busy1 - busy0) / max(1, total1 - total0)
        if pct < QUIET_PCT or time.monotonic() >= deadline:
            return round(pct, 1)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_script(command: Sequence[str], max_wait: float) -> Record:
    """Run one benchmark script; its last stdout line is its JSON result."""
    quiet = wait_quiet(max_wait) if max_wait > 0 else None
    tick = os.sysconf("SC_CLK_TCK")
    busy0, total0 = busy_and_total_jiffies()
    own0, wall0 = children_cpu_s(), time.monotonic()
    try:
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT
        )
        code: int | str = done.returncode
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, out, err = -1, "", f"timeout after {RUN_TIMEOUT_S} s"
    busy1, total1 = busy_and_total_jiffies()
    own = children_cpu_s() - own0
    others = max(0.0, (busy1 - busy0) / tick - own)
    record: Record = {
        "rc": code,
        "wall_s": round(time.monotonic() - wall0, 1),
        "quiet_pct_before": quiet,
        "others_cpu_pct": round(100.0 * others * tick / max(1, total1 - total0), 1),
    }
    try:
        if code == 0:
            record["result"] = json.loads(out.strip().splitlines()[-1])
            return record
    except (ValueError, IndexError):
        code = record["rc"] = "no JSON result"
    record["error"] = (err.strip().splitlines() or [f"exit {code}"])[-1][-300:]
    return record


def commands(peers: Path | None, peers_dir: Path, quick: bool) -> dict[str, list[str]]:
    sized = ["--n", "200", "--warmup", "20", "--fanout", "100", "--convs", "20", "--turns", "3"]
    ours = [sys.executable, "-m", "bench.workloads"]
    if quick:
        ours += [*sized, "--tree", "100,1000", "--cycles", "200", "--chain", "50,200"]
        ours += ["--wide", "50,200", "--acc-messages", "200"]
        ours += ["--otel-block", "20", "--otel-blocks", "3", "--otel-warmup", "20"]
        ours += ["--otel-rounds", "1"]
    result = {OURS: ours}
    if peers is not None:
        for system in (FLOOR, *PEERS):
            result[system] = [str(peers), str(peers_dir / SCRIPTS[system])] + (
                sized if quick else []
            )
    return result


# --------------------------------------------------------------------------- figures


def _at(result: Mapping[str, object], key: str, field: str) -> float | None:
    entry = result.get(key)
    if isinstance(entry, Mapping) and isinstance(entry.get(field), int | float):
        return float(entry[field])
    return None


def figures_of(system: str, result: Mapping[str, object]) -> dict[str, float | None]:
    """The figures one run of ``system`` provides (rule 4; ``TABLE_ONLY`` ones: table only)."""
    w1 = W1_MECHANISM[system]
    w2 = W2_VARIANT.get(system, "W2_direct_barrier")
    found = {
        "W1_us_median": _at(result, w1, "median_us"),
        "W1_cpu_us_median": _at(result, w1, "cpu_median_us"),
        "W1_us_p95": _at(result, w1, "p95_us"),
        "W2_wall_ms": _at(result, w2, "wall_ms"),
        "W2_cpu_ms": _at(result, w2, "cpu_ms"),
        "W2_kib_per_child": _at(result, w2, "kib_per_child"),
        "W3_resume_us_median": _at(result, "W3_resume", "median_us"),
        "W3_resume_cpu_us_median": _at(result, "W3_resume", "cpu_median_us"),
    }
    if system == OURS:
        drains = result.get("W4_drain")
        if isinstance(drains, Mapping) and drains:
            sizes = sorted(drains, key=int)
            small, large = _at(drains, sizes[0], "drain_ms"), _at(drains, sizes[-1], "drain_ms")
            found["W4_drain_10k_ms"] = large
            found["W4_gc_10k_ms"] = _at(drains, sizes[-1], "gc_ms")
            found["W4_scaling_10k_over_1k"] = large / small if large and small else None
        found["W5_core_events_per_s"] = _at(result, "W5_core", "events_per_s")
        found.update(_shape_figures("W6", result.get("W6_chain")))
        found.update(_shape_figures("W7", result.get("W7_wide")))
        for name in ("ACC_1", "ACC_10", "ACC_100", "ACC_sqlite_floor"):
            found[f"{name}_us_median"] = _at(result, name, "median_us")
            found[f"{name}_us_p99"] = _at(result, name, "p99_us")
            found[f"{name}_msgs_per_s"] = _at(result, name, "msgs_per_s")
        for name in OTEL_FIGURES:
            found[f"OTEL_W1_{name}"] = _at(result, "W1_otel", name)
    return found


def _shape_figures(name: str, runs: object) -> dict[str, float | None]:
    """W6/W7: start + drain at the large size, its ratio to the small one, memory per child
    at the large size and its ratio to the small one's (ideal: 10x and 1)."""
    if not isinstance(runs, Mapping) or not runs:
        return {}
    sizes = sorted(runs, key=int)
    total = [_sum(runs, size, ("start_ms", "drain_ms")) for size in (sizes[0], sizes[-1])]
    memory = [_at(runs, size, "kib_per_child") for size in (sizes[0], sizes[-1])]
    return {
        f"{name}_start_drain_10k_ms": total[1],
        f"{name}_scaling_10k_over_1k": total[1] / total[0] if total[0] and total[1] else None,
        f"{name}_kib_per_child_10k": memory[1],
        f"{name}_kib_10k_over_1k": memory[1] / memory[0] if memory[0] and memory[1] else None,
    }


def _sum(result: Mapping[str, object], key: str, fields: Sequence[str]) -> float | None:
    values = [_at(result, key, field) for field in fields]
    return None if None in values else sum(v for v in values if v is not None)


def collect(records: Sequence[tuple[str, Record]]) -> Figures:
    figures: Figures = {}
    for system, record in records:
        result = record.get("result")
        if not isinstance(result, Mapping):
            continue
        for figure, value in figures_of(system, result).items():
            if value is not None:
                figures.setdefault(figure, {}).setdefault(system, []).append(value)
    return figures


def medians(figures: Figures) -> dict[str, dict[str, float]]:
    """``latest.json``'s workloads: the issue's figures only, median per system."""
    return {
        figure: {system: round(statistics.median(vals), 2) for system, vals in by_system.items()}
        for figure, by_system in figures.items()
        if figure not in TABLE_ONLY
    }


def _cell(values: Sequence[float] | None) -> str:
    if not values:
        return DASH
    digits = 0 if statistics.median(values) >= 100 else 2
    median = f"{statistics.median(values):,.{digits}f}"
    if len(values) == 1:
        return median
    return f"{median} [{min(values):,.{digits}f}{DASH}{max(values):,.{digits}f}]"


def _ratio(ours: float | None, other: float | None, higher_is_better: bool) -> str:
    if ours is None or not other:
        return DASH
    return f"{(other / ours if higher_is_better else ours / other):.3g}"


def table(figures: Figures) -> str:
    """The markdown table: each figure, each system, and the two ratios (rule 3)."""
    systems = [OURS, FLOOR, *PEERS]
    head = ["figure", *systems, "ours / floor", "ours / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for figure, by_system in figures.items():
        mid = {system: statistics.median(vals) for system, vals in by_system.items()}
        peers = [mid[p] for p in PEERS if p in mid]
        higher = figure.endswith("_per_s")
        best = (max if higher else min)(peers) if peers else None
        cells = [_cell(by_system.get(system)) for system in systems]
        ratios = [
            _ratio(mid.get(OURS), mid.get(FLOOR), higher),
            _ratio(mid.get(OURS), best, higher),
        ]
        lines.append("| " + " | ".join([f"`{figure}`", *cells, *ratios]) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- reporting


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as info:
        mem_kib = int(info.readline().split()[1])
    cpus = len(os.sched_getaffinity(0))
    memory = f"{mem_kib / 2**20:.0f} GiB"
    return f"{platform.machine()}, {cpus} vCPU {model}, {memory}, Linux {platform.release()}"


def versions(records: Sequence[tuple[str, Record]]) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for _, record in records:
        result = record.get("result")
        env = result.get("env") if isinstance(result, Mapping) else None
        packages = env.get("packages") if isinstance(env, Mapping) else None
        if isinstance(packages, Mapping):
            found.update({k: str(v) for k, v in packages.items() if v is not None})
    return dict(sorted(found.items()))


def utc_stamp(seconds: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def report(
    records: Sequence[tuple[str, Record]], absent: Mapping[str, str], reps: int, stamp: str
) -> tuple[dict[str, object], str]:
    """``latest.json`` and the rendered table with its notes, from the runs' records."""
    figures = collect(records)
    latest: dict[str, object] = {
        "date": stamp,
        "machine": machine(),
        "versions": versions(records),
        "workloads": medians(figures),
    }
    notes = [f"Run {stamp} on {latest['machine']}; median [min{DASH}max] of {reps} run(s)."]
    notes += [f"* {system} absent: {why}" for system, why in absent.items()]
    for system, record in records:
        if record.get("rc") != 0:
            notes.append(f"* {system}: a run failed: {record.get('error')}")
    others: dict[str, list[str]] = {}
    for system, record in records:
        others.setdefault(system, []).append(f"{record.get('others_cpu_pct')}")
    shares = "; ".join(f"{system} {', '.join(pcts)}" for system, pcts in others.items())
    notes.append(f"* other processes' CPU during each run (% of the machine): {shares}")
    return latest, table(figures) + "\n\n" + "\n".join(notes)


def replace_table(results_md: Path, rendered: str) -> None:
    text = results_md.read_text() if results_md.exists() else f"{MARK_BEGIN}\n{MARK_END}\n"
    before, _, rest = text.partition(MARK_BEGIN)
    _, _, after = rest.partition(MARK_END)
    results_md.write_text(f"{before}{MARK_BEGIN}\n{rendered}\n{MARK_END}{after}")


def run_plan(
    plan: Mapping[str, list[str]], reps: int, max_wait: float, raw: Path
) -> list[tuple[str, Record]]:
    """Every script once per repetition, interleaved; each record is also appended to ``raw``."""
    records: list[tuple[str, Record]] = []
    raw.write_text("")
    for rep in range(1, reps + 1):
        for system, command in plan.items():
            record = run_script(command, max_wait)
            records.append((system, record))
            with open(raw, "a") as out:
                out.write(json.dumps({"system": system, "rep": rep, **record}) + "\n")
            print(
                f"rep {rep} {system}: rc={record['rc']} wall={record['wall_s']}s "
                f"others_cpu={record['others_cpu_pct']}%",
                flush=True,
            )
    return records


def load_raw(raw: Path) -> tuple[list[tuple[str, Record]], int]:
    """The records of an earlier run (``--from-raw``) and its number of repetitions."""
    lines = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    records = [(str(line.pop("system")), line) for line in lines]
    return records, max((int(rec.pop("rep")) for _, rec in records), default=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repetition")
    parser.add_argument("--no-peers", action="store_true", help="run ours only")
    parser.add_argument("--no-install", action="store_true", help="never create the peer venv")
    parser.add_argument("--peers-dir", type=Path, default=PEERS_DIR)
    parser.add_argument("--max-wait", type=float, default=30.0, help="quiet-machine wait, s")
    parser.add_argument("--from-raw", type=Path, help="only re-render an earlier run's records")
    parser.add_argument("--results", type=Path, default=BENCH / "results", help="output folder")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    raw = args.results / ("quick-raw.jsonl.tmp" if args.quick else "raw.jsonl.tmp")
    absent: dict[str, str] = {}
    if args.from_raw is not None:
        records, reps = load_raw(args.from_raw)
        stamp = utc_stamp(args.from_raw.stat().st_mtime)
    else:
        reps = 1 if args.quick else args.reps
        peers: Path | None = None
        if args.no_peers:
            absent = dict.fromkeys((FLOOR, *PEERS), "not requested (--no-peers)")
        else:
            peers, why = peers_python(args.peers_dir, install=not args.no_install)
            if peers is None:
                absent = dict.fromkeys((FLOOR, *PEERS), why)
                print(f"peers absent: {why}", flush=True)
        plan = commands(peers, args.peers_dir, args.quick)
        records = run_plan(plan, reps, 0.0 if args.quick else args.max_wait, raw)
        stamp = utc_stamp()
    latest, rendered = report(records, absent, reps, stamp)
    print(rendered)
    target = args.results / ("quick.json.tmp" if args.quick else "latest.json")
    target.write_text(json.dumps(latest, indent=2) + "\n")
    if not args.quick:
        replace_table(BENCH / "RESULTS.md", rendered)
    print(f"wrote {target}", flush=True)


if __name__ == "__main__":
    main()
