# Userland: two commands for a new user on a fresh Debian/Ubuntu machine.
#   make run    the whole platform on this machine (real control plane, embedded)
#   make test   everything the tests need, then the whole suite
# Both are idempotent; the control plane is built once into $(K8S_CACHE).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
K8S_CACHE ?= $(HOME)/.cache/userland/k8s-1.20.2-p1
export USERLAND_K8S_CACHE := $(K8S_CACHE)
# The real apps (code-server, JupyterLab, MariaDB + phpMyAdmin), installed once by
# scripts/install-local-apps.sh; the folder's name is the recipe key, so a changed recipe
# installs afresh. Its bin/ is what the local runner puts on PATH (USERLAND_APPS_BIN).
LOCAL_APPS ?= vscode jupyterlab mariadb
APPS_PREFIX ?= $(shell bash scripts/install-local-apps.sh --print-prefix)
export USERLAND_APPS_PREFIX := $(APPS_PREFIX)
export USERLAND_APPS_BIN := $(APPS_PREFIX)/bin
PYTEST_ARGS ?=
# `make test` runs the suite on 4 pytest-xdist workers: the tests mostly wait on processes
# (control planes, make-run instances, browsers), so more workers than cores pay. Each worker
# starts its own control plane and Redis once (session fixtures); a test file stays on one
# worker and the make-run tests on two, one after the other (the scheduler: tests/conftest.py).
# `make test TEST_JOBS=0` runs everything in one process, in order (for a debugger or -x).
TEST_JOBS ?= 4

.PHONY: help deps venv control-plane local-apps lint test test-fast test-cluster run bench clean

help:
	@echo "make run    start the platform locally (control plane, operator, gateway; Ctrl-C stops all;"
	@echo "            PORT=8100 for another port than 8000; PROMETHEUS=1 with a Prometheus;"
	@echo "            IDLE=1m: environments sleep after 1 minute unused, to try sleep and wake)"
	@echo "make test   install what the tests need (once), lint, run the whole suite"
	@echo "make test-cluster   deploy/ on a real single-node Kubernetes (root; builds what is missing)"
	@echo "make bench  run the benchmarks (by hand; figures go in docs/benchmarks.md)"
	@echo "make local-apps  install code-server, JupyterLab, MariaDB + phpMyAdmin (once, cached)"

deps:
	@bash scripts/install-deps.sh

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

# Strict editable install: the link tree is rebuilt each time so new modules are seen.
# pip's output goes to a log, shown only when it fails.
venv: $(VENV)/.created
	@$(PY) -m pip install -e '.[test,local]' --config-settings editable_mode=strict > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "pip install failed (log: $(VENV)/install.log)"; exit 1; }

control-plane: deps
	@bash scripts/build-control-plane.sh "$(K8S_CACHE)" >/dev/null

# Prints nothing when everything is in place; the first run takes a few minutes.
local-apps:
	@bash scripts/install-local-apps.sh --prefix "$(APPS_PREFIX)" $(LOCAL_APPS) >/dev/null

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p userland.platform -p userland.operator -p userland.auth -p userland.proxy -p userland.local -p userland.cli -p userland.web -p userland.coursework
	$(VENV)/bin/lint-imports

test: deps venv control-plane local-apps lint
	$(PY) -m pytest -q -n $(TEST_JOBS) --durations=10 $(PYTEST_ARGS)

# deploy/ on a real node (root): builds the node's binaries and images once, runs tests/cluster/
# inside the node's network namespace, takes everything down and checks nothing is left.
test-cluster: venv
	@bash scripts/test-cluster.sh $(PYTEST_ARGS)

# Every test that needs no server (no control plane, Redis, browser, make run or real apps),
# wherever its file lives: the `unit` marker, set by tests/conftest.py from each test's fixtures.
test-fast: deps venv
	$(PY) -m pytest -q -m unit $(PYTEST_ARGS)

# `make run PORT=8100` serves on another port (default 8000); `make run SKIP_APPS=1` does not
# install the real apps (their Templates then say they are not installed); `make run
# PROMETHEUS=1` also starts a Prometheus scraping every part, with the alert rules; `make run
# IDLE=1m` sets every example Template's idleTimeout, to try sleep and wake.
run: deps venv control-plane $(if $(SKIP_APPS),,local-apps)
	$(VENV)/bin/userland local$(if $(PORT), --port $(PORT))$(if $(PROMETHEUS), --prometheus)$(if $(IDLE), --idle $(IDLE))

bench: deps venv control-plane
	bash bench/setup.sh
	$(PY) bench/operator_bench.py
	$(PY) bench/gateway_bench.py
	$(PY) bench/web_roster_bench.py
	$(PY) bench/activity_bench.py
	$(PY) bench/help_bench.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .run
