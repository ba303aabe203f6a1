#!/usr/bin/env bash
# Mutation check of the pure core (see docs/mutation.md). Slow: not part of scripts/check.
#
# mutmut 3 expects one importable source root, so this script assembles a flat copy of the
# repository in a scratch directory (src/dsh_subagent/{core,adapters,spec,cli}), writes the
# mutmut configuration there and runs mutmut in that copy. Nothing is written into the
# repository itself. Usage:
#   scripts/mutation.sh [workdir]          # default workdir: /tmp/dsh-mutation
#   MUTATION_TESTS="tests/core stateful_tests" scripts/mutation.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/dsh-mutation}"
tests="${MUTATION_TESTS:-tests/core}"
python="$repo/.venv/bin/python"

rm -rf "$work/src" "$work/tests" "$work/stateful_tests"
mkdir -p "$work/src/dsh_subagent"
cp -r "$repo/core/dsh_subagent/core" "$work/src/dsh_subagent/"
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
also_copy = ["src/dsh_subagent/adapters", "src/dsh_subagent/cli", "src/dsh_subagent/spec", "conftest.py"]
pytest_add_cli_args_test_selection = [${selection%, }]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]
TOML
} > "$work/pyproject.toml"

cd "$work"
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" "$python" -m mutmut run --max-children "${MUTATION_JOBS:-2}" || true
"$python" -m mutmut results > "$work/results.txt" || true
"$python" - "$work" <<'PY'
import pathlib, re, sys
text = (pathlib.Path(sys.argv[1]) / "results.txt").read_text()
counts: dict[str, int] = {}
for status in re.findall(r":\s*(\w[\w ]*)$", text, re.M):
    counts[status] = counts.get(status, 0) + 1
print("surviving/other mutants listed by `mutmut results`:", counts)
PY
