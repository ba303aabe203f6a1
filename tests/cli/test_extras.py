"""A missing extra is one line naming it, exit status 2 (issue 20, packaging).

Each probe runs in a fresh interpreter with the extra's package made unimportable (``None`` in
``sys.modules`` makes every import of it fail as if it were not installed).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dsh_subagent.cli import entry
from dsh_subagent.core.extras import MissingExtra


def probe(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_missing_extra_is_an_import_error_naming_the_extra() -> None:
    err = MissingExtra("the charts", "python-statemachine", "spec")
    assert isinstance(err, ImportError)
    assert (err.extra, err.package) == ("spec", "python-statemachine")
    assert str(err) == "the charts needs python-statemachine: pip install 'dsh-subagent[spec]'"


@pytest.mark.parametrize("package", ["click", "rich"])
def test_console_script_without_the_cli_extra_names_it_and_exits_2(package: str) -> None:
    done = probe(
        f"import sys; sys.modules[{package!r}] = None;"
        "sys.argv = ['dsh-subagent', 'demo'];"
        "from dsh_subagent.cli.entry import main; main()"
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        f"error: MISSING_EXTRA: the dsh-subagent command needs {package}:"
        " pip install 'dsh-subagent[cli]'\n"
    )


def test_console_script_with_the_cli_extra_runs_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["dsh-subagent", "--version"])
    entry.main()
    assert capsys.readouterr().out.startswith("dsh-subagent, version ")


def test_spec_charts_without_python_statemachine_name_the_spec_extra() -> None:
    done = probe(
        "import sys; sys.modules['statemachine'] = None\n"
        "try:\n"
        "    import dsh_subagent.spec.charts\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "MissingExtra dsh_subagent.spec's charts needs python-statemachine:"
        " pip install 'dsh-subagent[spec]'\n"
    )


def test_diagram_command_without_python_statemachine_is_one_line_exit_2() -> None:
    done = probe(
        "import sys; sys.modules['statemachine'] = None;"
        "sys.argv = ['dsh-subagent', 'diagram', '--out', '/nonexistent-never-written'];"
        "from dsh_subagent.cli.entry import main; main()"
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        "error: MISSING_EXTRA: dsh_subagent.spec's charts needs python-statemachine:"
        " pip install 'dsh-subagent[spec]'\n"
    )


@pytest.mark.parametrize(
    ("module", "blocked", "message"),
    [
        (
            "dsh_subagent.adapters.providers.acp",
            "acp",
            "the acp provider needs agent-client-protocol: pip install 'dsh-subagent[acp]'",
        ),
        (
            "dsh_subagent.adapters.reference.pydantic_ai",
            "pydantic_ai",
            "the pydantic-ai adapter needs pydantic-ai-slim:"
            " pip install 'dsh-subagent[pydantic-ai]'",
        ),
    ],
)
def test_optional_adapters_without_their_package_name_their_extra(
    module: str, blocked: str, message: str
) -> None:
    done = probe(
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"MissingExtra {message}\n"
