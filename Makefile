# One-command set-up on a fresh machine with Python 3.10+: `make test`, `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install services test lint demo bench sdk-tests test-window-long

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all,dev]"
	touch $@

services:
	bash scripts/start-services.sh

test: install services
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

demo: install
	$(PY) -m agent_sessions demo

# Writes docs/benchmarks.md, .png and .json; `make bench QUICK=1` for the short run.
bench: install services
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/run.py $(if $(QUICK),--quick,)

# Long property runs of the window layer (CI runs a few examples per backend).
test-window-long: install services
	WINDOW_EXAMPLES=300 $(PY) -m pytest tests/test_window.py -q

# The SDK's own session test files against our classes, every file on every store (prints a
# per-file count; also what tests/test_sdk_suite.py runs with AGENT_SESSIONS_SDK_SUITE=full).
sdk-tests: install services
	$(PY) -m tests.sdk_compat.run
