# strait — the two set-up commands are `make lab` and `make test`; each installs what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=
# Parallel test workers (pytest-xdist): the suite mostly waits on JVMs and clusters, so two workers on
# two cores nearly halve it; tests that time something run alone (tests/support/machine.py).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS)

.PHONY: help deps lab test test-unit test-integration test-e2e test-compose up down clean bench bench-quick bench-paths test-faults test-compat

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(INSTALLED): pyproject.toml tools/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "strait needs Python 3.11 or newer; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]' -e ./tools
	touch $@

deps: $(INSTALLED) ## virtualenv, Python packages, the native copy loop, Kafka jars, redis-server, prometheus (only what is missing)
	$(PY) -m strait_lab.deps system native kafka mm2 spark

lab: deps ## run the embedded lab (clusters A and B, Redis, Prometheus) until Ctrl-C
	$(VENV)/bin/strait lab up

test: deps ## run every test: unit, integration, e2e and slow
	$(VENV)/bin/pytest $(PARALLEL) $(PYTEST_ARGS)

test-unit: deps ## only the unit tests
	$(VENV)/bin/pytest $(PARALLEL) -m unit $(PYTEST_ARGS)

test-integration: deps ## only the integration tests
	$(VENV)/bin/pytest $(PARALLEL) -m integration $(PYTEST_ARGS)

test-e2e: deps ## only the end-to-end tests
	$(VENV)/bin/pytest $(PARALLEL) -m e2e $(PYTEST_ARGS)

test-faults: deps ## the fault drills at full length (make test runs their short version)
	STRAIT_FAULTS=full $(VENV)/bin/pytest -m faults -rA $(PYTEST_ARGS)

test-compat: deps ## in full: every pair of Kafka 2.4, 3.9 (ZooKeeper) and 4.x, the AMQ two-way example for 2 minutes (make test: short forms)
	STRAIT_COMPAT=full $(VENV)/bin/pytest -m compat -rA -s $(PYTEST_ARGS)

test-compose: deps ## boot the compose lab on a Docker engine (started, with stand-in base images, when missing; root)
	$(VENV)/bin/pytest -m compose -rs -s $(PYTEST_ARGS)

up: ## the full lab in Docker Compose (needs a Docker engine; copy compose/.env.example to compose/.env first)
	docker compose -f compose/compose.yml --env-file compose/.env up --build --wait

down: ## stop the compose lab and remove its volumes
	docker compose -f compose/compose.yml down -v --remove-orphans

clean: ## remove the virtualenv and every cache (jars, lab data, test logs)
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

bench: deps ## strait vs MirrorMaker 2 vs the broker limit, one machine, one run (BENCH_ARGS=... to change sizes)
	$(PY) -m strait_bench $(BENCH_ARGS)

bench-quick: deps ## the same benchmark at a size that finishes in under 5 minutes
	$(PY) -m strait_bench --quick $(BENCH_ARGS)

bench-paths: deps ## measure Spark's Kafka sink against strait's writer (records/s, MB/s)
	$(PY) -m strait_bench.paths
