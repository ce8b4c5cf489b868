# Durable human-in-the-loop agent runs on Temporal.
# `make demo` and `make test` work on a fresh machine with Python 3.11+ and make.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Two test processes, each with its own dev and time-skipping servers: most tests wait on
# servers and workers, so on 2 cores the suite took 20 min this way and 30 min in one process.
# Three took 15 min (2026-11-27) but starved the machine: 5 then 1 tests failed on timing
# (each fixed since), and what failed next would be the same kind; two stay the default.
PYTEST_ARGS ?= -n 2
BENCH_ARGS ?=

# The time-skipping test server binds every interface; run the suite in a private network
# namespace (loopback only) where the kernel allows it.
ISOLATE := $(shell unshare -n sh -c 'ip link set lo up' >/dev/null 2>&1 && echo yes)

.DEFAULT_GOAL := help
.PHONY: help install links demo demo-email demo-mcp dev screenshots vendor test bench lint format typecheck check docs worker histories clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.x)")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the project with its dev tools

demo: $(STAMP) ## Set up, then run the refund-desk demo on the embedded dev server
	$(PY) -m hitl.examples.demo

demo-email: $(STAMP) ## The same, with the email desk (mail outside the company needs approval)
	$(PY) -m hitl.examples.demo --example email

demo-mcp: $(STAMP) ## The same, with tools from a local MCP server (one asks its own question)
	$(PY) -m hitl.examples.demo --example mcp

dev: $(STAMP) ## The local stack: dev server (UI :8233), search attributes, a worker; Ctrl-C stops
	$(VENV)/bin/hitl dev --agents hitl.examples.refund_desk:agent --agents hitl.examples.file_editor:agent

# Wheels of setuptools and the core dependencies, fetched here, outside the network namespace:
# tests/e2e/test_wheel.py builds our wheel and installs it in a fresh virtualenv from them alone.
WHEELHOUSE := $(VENV)/wheelhouse
$(WHEELHOUSE)/.requirements: pyproject.toml $(STAMP)
	$(PY) -m tests.wheelhouse $(WHEELHOUSE)

test: $(STAMP) $(WHEELHOUSE)/.requirements ## Set up, then run the test suite (unit, time-skipping, dev server, replay)
ifeq ($(ISOLATE),yes)
	unshare -n sh -c 'ip link set lo up && exec $(PY) -m pytest $(PYTEST_ARGS)'
else
	$(PY) -m pytest $(PYTEST_ARGS)
endif

$(VENV)/.bench-installed: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	@touch $@

bench: $(VENV)/.bench-installed ## Benchmarks against the peer, tables and charts (budget 6 min: 6 min 17 s measured 2026-11-26 on a quiet 2-core machine, 8.5 min under load, 17 min before; BENCH_ARGS=--quick 64-65 s on 2026-11-27, 1.7-3 min under heavy load; installs the peer on first use)
	$(PY) -m bench.run $(BENCH_ARGS)

screenshots: $(STAMP) ## Retake the docs' screenshots with the browser tests (needs Chromium)
	HITL_SCREENSHOTS=docs/img $(PY) -m pytest tests/browser -q

vendor: ## Fetch htmx again from the npm registry (the console's one front-end library)
	cd /tmp && npm pack --silent htmx.org@2.0.11 && tar xzf htmx.org-2.0.11.tgz package/dist/htmx.min.js
	echo "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717  /tmp/package/dist/htmx.min.js" | sha256sum -c
	cp /tmp/package/dist/htmx.min.js hitl/console/static/htmx-2.0.11.min.js

# hitl/<name> are symlinks to the top-level folders for the tools that read the source tree
# (mypy, lint-imports); the build does not need them. A checkout without symlinks has text files.
links:
	@for d in workflows activities worker examples; do test -L hitl/$$d || { \
	  echo "hitl/$$d is not a symlink (a checkout without symlinks): git config core.symlinks true && git checkout -- hitl"; \
	  exit 1; }; done

lint typecheck: links

lint: $(STAMP) ## ruff check + format check + the import layering + the docs' links
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

docs: $(STAMP) ## Build the documentation site into site/ (MkDocs)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

format: $(STAMP) ## Format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: $(STAMP) ## mypy --strict on hitl, workflows, activities, worker
	$(VENV)/bin/mypy

check: lint typecheck test ## Everything CI runs

worker: $(STAMP) ## Run a worker for the example agents (needs a server: see README)
	$(PY) -m hitl.worker --agents hitl.examples.refund_desk:agent

histories: $(STAMP) ## Re-record the replay histories in tests/replay/histories
	$(PY) -m tests.replay.record

clean: ## Remove the virtualenv and local state
	rm -rf $(VENV) .hitl .pytest_cache .mypy_cache .ruff_cache
