# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test check lint typecheck proto bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: venv
	$(BIN)/earmark serve

test: venv
	$(BIN)/pytest

lint: venv
	$(BIN)/ruff check src tests tools bench
	$(BIN)/ruff format --check src tests tools bench

typecheck: venv
	$(BIN)/mypy

# What CI runs.
check: lint typecheck test

proto: venv
	$(BIN)/python tools/protogen.py

bench: venv
	$(BIN)/python -m bench.reserve_hot

clean:
	rm -rf $(VENV) .earmark .pytest_cache .mypy_cache .ruff_cache
