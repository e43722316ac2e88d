# One-command set-up on a fresh machine with Python 3.10+: `make test`, `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install lock services test lint demo bench smoke-core docs test-window-long test-resilient-long faults props sdk-tests

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[all,dev]"
	touch $@

# constraints.txt: the newest versions pyproject.toml allows, resolved in a scratch venv.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --upgrade pip
	.lock-venv/bin/python -m pip install -q -e ".[all,dev]"
	{ head -2 constraints.txt; .lock-venv/bin/python -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .lock-venv

services:
	bash scripts/start-services.sh

test: install services
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: install
	$(PY) -m agent_sessions demo

# Writes docs/benchmarks.md, .png and .json; `make bench QUICK=1` for the short run.
bench: install services
	$(PY) -m pip install -q -c constraints.txt -e ".[bench]"
	$(PY) benchmarks/run.py $(if $(QUICK),--quick,)

# The docs site (MkDocs Material, API reference from docstrings) into site/; fails on any
# warning (a broken link, a missing page or API object).
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# A core-only install (no extras) in a fresh venv: import, open_session, demo, extra hints.
smoke-core:
	PYTHON=$(PYTHON) bash scripts/smoke-core.sh

# Long property runs of the window layer (CI runs a few examples per backend).
test-window-long: install services
	WINDOW_EXAMPLES=300 $(PY) -m pytest tests/test_window.py -q

# The SDK's DaprSession (on the SDK's fake Dapr client) under every wrapper stack through
# ForeignSession (CI runs it bare).
.PHONY: test-dapr-long
test-dapr-long: install
	AGENT_SESSIONS_DAPR_STACKS=all $(PY) -m pytest tests/test_dapr.py -q

# The SDK's own session test files against our classes, every file on every store (prints a
# per-file count; also what tests/test_sdk_suite.py runs with AGENT_SESSIONS_SDK_SUITE=full).
sdk-tests: install services
	$(PY) -m tests.sdk_compat.run

# Long stateful property run: every stack over every backend, 120 examples of 40 steps each
# (CI runs 3 examples of 10 steps over memory, SQLite and Redis). A stack over the MongoDB
# stand-in (mongomock filters in Python) took 5-13 minutes here: past the suite's 300 s limit.
props: install services
	AGENT_SESSIONS_PROPS=long $(PY) -m pytest tests/test_properties.py -q --timeout=1800

# Fault-injection soak: the CI fault suite with FAULT_SCALE times the rounds (kill -9, random
# cancellation, connection termination, Redis outages, SQLite threads x loops). FAULT_SEED=n
# replays a run.
faults: install services
	FAULT_SCALE=$(or $(FAULT_SCALE),10) $(PY) -m pytest tests/test_faults.py tests/test_sql_faults.py -q

# Long run of the interleaving property test: several objects on one session id, every stack
# over memory, 2000 seeded schedules per stack of longer programs (CI and `make test` run 100
# short ones; about 6 minutes here). advanced-ttl passed 2000 examples while TTLSession passed
# COMMIT on; it no longer does (a livelock on Redis), so through TTL a branch move is checked,
# then appended (core.commit.commit_by_api): not re-run since (strict xfail in
# tests/test_branch_pops.py).
.PHONY: test-interleavings-long
test-interleavings-long: install
	INTERLEAVING_EXAMPLES=2000 INTERLEAVING_OPS=6 $(PY) -m pytest tests/test_interleavings.py -q

# Long runs of the resilient layer: more random fault sequences, more kill -9 rounds.
test-resilient-long: install services
	RESILIENT_EXAMPLES=500 RESILIENT_KILLS=4 $(PY) -m pytest tests/test_resilient.py tests/test_resilient_faults.py -q

# The SDK users get: the SDK-facing tests (the SDK's own session test files, the adapter for its
# classes, Runner runs through the layers) on the newest openai-agents on the index and on the
# oldest pyproject.toml allows, each in its own venv (.venv-sdk-latest, .venv-sdk-oldest) with
# constraints.txt for everything else. Prints the SDK version that ran.
.PHONY: test-sdk-latest test-sdk-oldest
test-sdk-latest: services
	PYTHON=$(PYTHON) bash scripts/sdk-pass.sh latest tests/test_context_scopes.py tests/test_fastapi_example.py
test-sdk-oldest: services
	PYTHON=$(PYTHON) bash scripts/sdk-pass.sh oldest
