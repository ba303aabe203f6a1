"""The built wheel, installed (not editable) into fresh venvs outside the tree (issues 20, 21).

1. The wheel is built once per session (``pip wheel --no-deps``) into a temporary directory.
2. Each venv is made without pip (``venv --without-pip``); this interpreter's pip installs into
   it (``pip --python``), using pip's cache. Every command runs from an empty temporary working
   directory with a clean environment, so nothing of the source tree can be imported.
3. The base install runs the README's program; its console script names the missing ``cli``
   extra. With ``[cli]`` added, ``dsh-subagent demo --db relative.db`` runs twice on one store.
   ``[verify]`` runs ``dsh-subagent verify --json``; ``[conformance]`` runs the conformance
   suite with pytest.

Marked ``packaging`` (deselect with ``-m 'not packaging'``); it needs the package index.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging

# The README's program, cut out the way tests/test_readme.py cuts it (one extraction rule).
_spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "tests" / "test_readme.py")
assert _spec is not None
assert _spec.loader is not None
_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_readme)


def _call(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = _call(args, cwd, timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)]
    _ok(pip, out)
    (built,) = out.glob("dsh_subagent-*.whl")
    return built


class Env:
    """A fresh venv with the wheel installed, and an empty working directory outside the tree."""

    def __init__(self, where: Path, wheel: Path) -> None:
        self.wheel = wheel
        self.cwd = where / "work"
        self.cwd.mkdir()
        venv.create(where / "venv", with_pip=False)
        self.bin = where / "venv" / "bin"

    def install(self, extras: str = "") -> None:
        target = f"dsh-subagent[{extras}] @ {self.wheel.as_uri()}" if extras else str(self.wheel)
        pip = [sys.executable, "-m", "pip", "--python", str(self.bin / "python"), "install", "-q"]
        _ok([*pip, target], self.cwd)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _call([str(self.bin / args[0]), *args[1:]], self.cwd)


@pytest.fixture
def env(tmp_path: Path, wheel: Path) -> Env:
    return Env(tmp_path, wheel)


def test_issue20_base_install_runs_the_readme_program_and_cli_extra_runs_the_demo(env: Env) -> None:
    env.install()
    where = env.run("python", "-c", "import dsh_subagent.adapters as a; print(a.__file__)")
    assert "site-packages" in where.stdout, where.stderr
    program = _readme._section_block("Use it in your program")
    for _ in range(2):
        done = env.run("python", "-X", "dev", "-c", program)
        assert done.returncode == 0, done.stderr
        assert "done" in done.stdout
        assert "Warning" not in done.stderr, done.stderr
    missing = env.run("dsh-subagent", "demo")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == (
        "error: MISSING_EXTRA: the dsh-subagent command needs click:"
        " pip install 'dsh-subagent[cli]'\n"
    )
    env.install("cli")
    first = env.run("dsh-subagent", "demo", "--db", "relative.db")
    assert first.returncode == 0, first.stderr
    second = env.run("dsh-subagent", "demo", "--db", "relative.db")
    assert second.returncode == 0, second.stderr
    assert "this store already holds an earlier run's parent" in second.stdout
    assert sorted(p.name for p in env.cwd.iterdir()) == ["relative.db", "sessions.db"]


def test_issue21_verify_extra_runs_verify_json(env: Env) -> None:
    env.install("verify")
    done = env.run(
        "dsh-subagent", "verify", "--json", "--examples", "2", "--steps", "5", "--seed", "1"
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert report["verdict"] == "pass"
    assert [m["name"] for m in report["machines"]] == ["core", "service"]
    assert list(env.cwd.iterdir()) == []  # Hypothesis's files go to the cache directory


def test_issue21_conformance_extra_runs_the_conformance_suite(env: Env) -> None:
    env.install("conformance")
    done = env.run("python", "-m", "pytest", "--pyargs", "dsh_subagent.conformance", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
