# The two commands of the README: `make demo` (the main job) and `make test` (every test).
# Both set up what they need (virtualenv, Go-built binaries) into a cache outside the repo.
SHELL := /bin/bash
VENV = $(shell scripts/bootstrap-venv.sh)
PY = $(VENV)/bin/python

.PHONY: demo test lint unit test-slow bench tools engine

tools:
	@scripts/build-go-tools.sh cluster

# The Pulumi engine (CLI, Python host, Kubernetes provider) from Go modules: the module proxy
# this workplace reaches refuses those modules today (see README, "Pulumi engine").
engine:
	@scripts/build-go-tools.sh pulumi

demo: tools
	@$(PY) -m scripts.demo

lint:
	@echo "lint: ruff, mypy --strict, import contracts"
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/mypy .
	@$(VENV)/bin/lint-imports --config pyproject.toml

test: tools lint
	@$(PY) -m pytest -m "not slow"

unit:
	@$(PY) -m pytest tests -m "not cluster and not engine and not slow"

test-slow: tools
	@$(PY) -m pytest -m slow

bench: tools
	@scripts/build-go-tools.sh reference
	@$(PY) -m bench $(BENCH_ARGS)
