# Userland: two commands for a new user on a fresh Debian/Ubuntu machine.
#   make run    the whole platform on this machine (real control plane, embedded)
#   make test   everything the tests need, then the whole suite
# Both are idempotent; the control plane is built once into $(K8S_CACHE).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
K8S_CACHE ?= $(HOME)/.cache/userland/k8s-1.20.2
export USERLAND_K8S_CACHE := $(K8S_CACHE)
PYTEST_ARGS ?=

.PHONY: help deps venv control-plane lint test test-fast run bench clean

help:
	@echo "make run    start the platform locally (control plane, operator, gateway; Ctrl-C stops all)"
	@echo "make test   install what the tests need (once), lint, run the whole suite"
	@echo "make bench  run the benchmarks (by hand; figures go in the README)"

deps:
	@bash scripts/install-deps.sh

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

# Strict editable install: the link tree is rebuilt each time so new modules are seen.
# pip's output goes to a log, shown only when it fails.
venv: $(VENV)/.created
	@$(PY) -m pip install -e '.[test]' --config-settings editable_mode=strict > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "pip install failed (log: $(VENV)/install.log)"; exit 1; }

control-plane: deps
	@bash scripts/build-control-plane.sh "$(K8S_CACHE)" >/dev/null

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p userland.platform -p userland.operator -p userland.auth -p userland.proxy -p userland.local -p userland.cli
	$(VENV)/bin/lint-imports

test: deps venv control-plane lint
	$(PY) -m pytest -q --durations=10 $(PYTEST_ARGS)

# Only the tests that need no control plane (seconds).
test-fast: venv
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

run: deps venv control-plane
	$(VENV)/bin/userland local

bench: deps venv control-plane
	bash bench/setup.sh
	$(PY) bench/operator_bench.py
	$(PY) bench/gateway_bench.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .run
