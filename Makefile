# evaluator-host — the front door. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install run test lint unit bench soak images engine docs clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/evaluator-host: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

install: $(BIN)/evaluator-host ## create .venv with the service and the dev tools

run: install ## start the service on $(HOST):$(PORT): docker backend when an engine answers, else the process sandbox
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory images; \
	else echo "no Docker engine answers: serving on the embedded process sandbox"; fi
	$(BIN)/evaluator-host serve --host $(HOST) --port $(PORT)

lint: install ## ruff + mypy --strict on the package
	$(BIN)/ruff check .
	$(BIN)/ruff format --check evaluator_host runtimes
	$(BIN)/mypy

test: install lint ## lint, then the whole test suite (conformance vectors from ../shared when present)
	$(BIN)/pytest -q $(PYTEST_ARGS)

unit: install ## the fast tests only (no sandbox)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

images: install ## build the Docker base image (debootstrap + docker import, or BASE_IMAGE=python:3.12-slim)
	PYTHON=$(BIN)/python sandbox_images/build_base.sh

engine: ## install (Debian, root) and start a Docker engine if none answers
	sandbox_images/start_engine.sh

bench: install ## run the benchmarks and write docs/benchmarks.md
	$(BIN)/python -m bench.run

soak: install ## hostile neighbours: 200 clients x 60 s over 6 good + 6 hostile evaluators; 5xx, errors, RSS
	$(BIN)/python -m bench.hostile $(SOAK_BACKENDS)

docs: install ## regenerate README's configuration table from the Settings model
	$(BIN)/python -m evaluator_host.settings_doc README.md

clean: ## remove the venv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info
