# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each creates or refreshes its own virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --upgrade pip
	@$(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@$(VENV)/bin/dsh-subagent demo

test: $(STAMP)
	@bash scripts/check

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .hypothesis .coverage
