#!/usr/bin/env bash
# Mutation check of the pure core (see docs/mutation.md). Slow: not part of scripts/check or CI.
#
# mutmut 3 expects one importable source root, so this script assembles a flat copy of the
# repository in a scratch directory (src/dsh_subagent/{core,adapters,spec,cli}), writes the
# mutmut configuration there and runs mutmut in that copy. Nothing is written into the
# repository itself. Each module runs under its own wall-clock bound; a module cut short
# reports its unchecked mutants instead of a score. The summary lists every survivor and
# flags those that docs/mutation.md does not triage yet.
#
#   scripts/mutation.sh                          # the lifecycle modules (the list below)
#   scripts/mutation.sh --module budget --module manager.ops --time-limit 600
#   scripts/mutation.sh --module all             # every core module (hours on 2 cores)
#   scripts/mutation.sh --workdir /tmp/x --jobs 1 --tests "tests/core stateful_tests"
#   scripts/mutation.sh --recheck                # after adding tests: re-run only the survivors
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="$repo/.venv/bin/python"
work=/tmp/dsh-mutation
tests="tests/core"
jobs=2
limit=900
recheck=""
modules=()
default_modules=(residency teardown notices manager.ops manager.state authority budget manager)

usage() {
  echo "usage: scripts/mutation.sh [--module NAME]... [--time-limit SECONDS] [--jobs N]" >&2
  echo "                          [--workdir DIR] [--tests \"PATHS\"] [--recheck]" >&2
  echo "  NAME: a core module, dotted below dsh_subagent.core (budget, manager.ops), or all" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --module) [[ $# -ge 2 ]] || usage; modules+=("$2"); shift 2 ;;
    --time-limit) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; limit="$2"; shift 2 ;;
    --jobs) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; jobs="$2"; shift 2 ;;
    --workdir) [[ $# -ge 2 ]] || usage; work="$2"; shift 2 ;;
    --tests) [[ $# -ge 2 ]] || usage; tests="$2"; shift 2 ;;
    --recheck) recheck=1; shift ;;
    *) usage ;;
  esac
done
[[ ${#modules[@]} -gt 0 ]] || modules=("${default_modules[@]}")
"$python" -c "import mutmut" 2>/dev/null || {
  echo "mutmut is not installed in .venv: .venv/bin/pip install -e '.[mutation]'" >&2
  exit 2
}
core="$repo/core/dsh_subagent/core"
if [[ "${modules[*]}" == "all" ]]; then
  modules=()
  for f in "$core"/*.py "$core"/*/*.py; do
    name="${f#"$core"/}"
    name="${name%.py}"
    name="${name%/__init__}"
    [[ "$name" == __init__ ]] || modules+=("${name//\//.}")
  done
fi
# A module NAME (dotted below the core: budget, manager.ops) maps to the files mutmut mutates
# and to the pattern of its mutant names; a package name means its __init__ module alone.
only=""
patterns=()
for m in "${modules[@]}"; do
  path="${m//.//}"
  if [[ -d "$core/$path" ]]; then
    only="$only\"src/dsh_subagent/core/$path/__init__.py\", "
    patterns+=("dsh_subagent.core.$m.x*")
  elif [[ -f "$core/$path.py" ]]; then
    only="$only\"src/dsh_subagent/core/$path.py\", "
    patterns+=("dsh_subagent.core.$m.x*")
  else
    echo "no core module named $m" >&2
    exit 2
  fi
done

rm -rf "$work/src" "$work/tests" "$work/stateful_tests"
mkdir -p "$work/src/dsh_subagent"
cp -r "$core" "$work/src/dsh_subagent/"
cp -r "$repo/adapters/dsh_subagent/adapters" "$repo/adapters/dsh_subagent/cli" "$work/src/dsh_subagent/"
cp -r "$repo/spec/dsh_subagent/spec" "$work/src/dsh_subagent/"
cp -r "$repo/tests" "$repo/stateful_tests" "$repo/conftest.py" "$work/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +

selection=""
for t in $tests; do selection="$selection\"$t\", "; done
{
  sed -n '/^\[tool.pytest.ini_options\]/,/^$/p' "$repo/pyproject.toml"
  cat <<TOML
[tool.mutmut]
source_paths = ["src/dsh_subagent/core"]
only_mutate = [${only%, }]
also_copy = ["src/dsh_subagent/adapters", "src/dsh_subagent/cli", "src/dsh_subagent/spec", "conftest.py"]
pytest_add_cli_args_test_selection = [${selection%, }]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]
TOML
} > "$work/pyproject.toml"

cd "$work"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
# One bounded mutmut run; an explicit pattern re-runs every mutant it names, so each run is a
# fresh measure.
run_mutmut() {
  local name="$1"
  shift
  local start=$SECONDS
  echo "== mutating $name (at most ${limit}s)"
  timeout --signal=INT --kill-after=30 "$limit" \
    "$python" -m mutmut run --max-children "$jobs" "$@" > "$work/run-$name.log" 2>&1 \
    || echo "   mutmut ended with status $? (124: the time limit); see $work/run-$name.log"
  echo "$name $((SECONDS - start))" >> "$work/times.txt"
}
: > "$work/times.txt"
if [[ -n "$recheck" ]]; then
  # The previous run's survivors against the tests as they are now, under one bound.
  [[ -s "$work/survivors.txt" ]] || { echo "no $work/survivors.txt to recheck" >&2; exit 2; }
  cp "$work/survivors.txt" "$work/survivors-before.txt"
  mapfile -t survivors < "$work/survivors-before.txt"
  run_mutmut recheck "${survivors[@]}"
else
  for i in "${!modules[@]}"; do run_mutmut "${modules[$i]}" "${patterns[$i]}"; done
fi
"$python" -m mutmut results --all true > "$work/results.txt" || true
"$python" - "$work" "$repo/docs/mutation.md" "${modules[@]}" <<'PY'
# The summary: a table per module, survivors.txt (what --recheck re-runs) and triage.md, the
# triage rows regenerated from this run (the row docs/mutation.md has for a triaged survivor, a
# TODO row with mutmut's diff line for a new one). Only a row whose outcome is "equivalent",
# "accepted" or "not reachable" triages a survivor; a survivor docs/mutation.md lists as
# "killed" is a regression. Exit 1 when a survivor is not triaged.
import pathlib, re, subprocess, sys
work, triage, modules = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
doc_rows = {
    m.group(2): m.group(0)
    for m in re.finditer(r"^\| (\S+) \| `(dsh_subagent\.core\.\S+__mutmut_\d+)` \|.*\| (.+) \|$",
                         triage.read_text(), re.M)
}
def outcome(row: str) -> str:
    return row.rsplit(" | ", 1)[1]
accepted = {n for n, r in doc_rows.items()
            if outcome(r).startswith(("equivalent", "accepted", "not reachable"))}
rows = re.findall(r"^\s*(\S+__mutmut_\d+): (.+)$", (work / "results.txt").read_text(), re.M)
detected = {"killed", "timeout", "segfault", "caught by type check"}  # a timeout is a detection
missed = {"survived", "no tests"}  # "no tests": no selected test reaches the mutated function
times = dict(line.split() for line in (work / "times.txt").read_text().splitlines())
head = ("module", "mutants", "killed", "equivalent", "survived", "unchecked", "seconds")
print("{:<17} {:>7} {:>7} {:>10} {:>8} {:>9} {:>7}".format(*head))
untriaged, stale, regenerated = [], [], []
for m in modules:
    mine = [(n, s) for n, s in rows if n.startswith(f"dsh_subagent.core.{m}.x")]
    killed = sum(s in detected for _, s in mine)
    survived = [n for n, s in mine if s in missed]
    equivalent = [n for n in survived if n in accepted]
    unchecked = len(mine) - killed - len(survived)
    print(f"{m:<17} {len(mine):>7} {killed:>7} {len(equivalent):>10} "
          f"{len(survived) - len(equivalent):>8} {unchecked:>9} {times.get(m, '-'):>7}")
    untriaged += [n for n in survived if n not in accepted]
    stale += [n for n, s in mine if s in detected and n in accepted]
    for n in survived:
        if n in accepted:
            regenerated.append(doc_rows[n])
            continue
        diff = subprocess.run([sys.executable, "-m", "mutmut", "show", n],
                              capture_output=True, text=True).stdout.splitlines()
        lines = [d for d in diff if d[:1] in "+-" and d[:3] not in ("+++", "---")]
        added = [d[1:].strip() for d in lines if d.startswith("+")]
        change = added[0] if added else f"removed: {lines[0][1:].strip()}" if lines else "?"
        change = change.replace("`", "").replace("|", "\\|")
        regenerated.append(f"| {m} | `{n}` | `{change}` | TODO: a killing test, or why it is equivalent |")
(work / "survivors.txt").write_text("".join(f"{n}\n" for n, s in rows if s in missed))
(work / "triage.md").write_text("".join(f"{r}\n" for r in regenerated))
print(f"survivors: {work}/survivors.txt; their triage rows: {work}/triage.md;"
      f" diff of one: (cd {work} && mutmut show NAME)")
if stale:
    print(f"{len(stale)} mutant(s) docs/mutation.md calls equivalent were killed (fix the row):")
    print("".join(f"  {n}\n" for n in stale), end="")
if untriaged:
    print(f"{len(untriaged)} survivor(s) not triaged in docs/mutation.md"
          " (a row listing one as killed is a regression):")
    print("".join(f"  {n}\n" for n in untriaged), end="")
    sys.exit(1)
PY
