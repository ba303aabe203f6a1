# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each creates or refreshes its own virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
# Two stamps: the demo needs only the cli extra; the tests need the dev extra (which has it).
CLI_STAMP := $(VENV)/.installed-cli
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test venv clean

$(VENV)/bin/python:
	@$(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --upgrade pip

$(CLI_STAMP): pyproject.toml | $(VENV)/bin/python
	@$(VENV)/bin/python -m pip install -q -e '.[cli]'
	@touch $(CLI_STAMP)

$(DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	@$(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $(DEV_STAMP) $(CLI_STAMP)

venv: $(DEV_STAMP)

demo: $(CLI_STAMP)
	@$(VENV)/bin/dsh-subagent demo

test: $(DEV_STAMP)
	@bash scripts/check

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .hypothesis .coverage
