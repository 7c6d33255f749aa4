# BlackOps: every target sets up .venv on first use (python3 -m venv + pip install).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8080
APP    ?= examples.shop:app
PYTEST_ARGS ?=
# Test processes for the parallel part of `make test` (most tests wait on I/O and timers).
JOBS   ?= 6

.PHONY: run test test-min lint format bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,otel]'
	touch $(STAMP)

## Serve the example app on the embedded SQLite store (./.blackops/).
run: $(STAMP)
	$(BIN)/blackops serve --app $(APP) --host $(HOST) --port $(PORT)

## All tests, on SQLite and PostgreSQL (CI=true makes a missing PostgreSQL fatal): every test
## but the fault tests in $(JOBS) parallel processes, then the fault tests on their own.
test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) -m "not faults" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m faults $(PYTEST_ARGS)

## The suite on the oldest dependency versions pyproject.toml admits (its own .venv-min).
test-min:
	test -x .venv-min/bin/python || $(PYTHON) -m venv .venv-min
	.venv-min/bin/python -m pip install --quiet -r constraints-min.txt
	.venv-min/bin/python -m pip install --quiet --no-deps -e .
	.venv-min/bin/python -m pytest -p no:cacheprovider -n $(JOBS) -m "not faults" $(PYTEST_ARGS)
	.venv-min/bin/python -m pytest -p no:cacheprovider -m faults $(PYTEST_ARGS)

## ruff (lint + format check) and mypy (strict for the library packages).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## Benchmarks print their figures; nothing is asserted.
bench: $(STAMP)
	$(BIN)/python bench/documents.py
	$(BIN)/python bench/jsonl.py
	$(BIN)/python bench/inline.py
	$(BIN)/python bench/operations.py
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/workflows.py
	$(BIN)/python bench/versions.py
	$(BIN)/python bench/read_api.py
	$(BIN)/python bench/http_bench.py
	$(BIN)/python bench/steady.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/audit.py
	$(BIN)/python bench/witness.py
	$(BIN)/python bench/replay_check.py

clean:
	rm -rf $(VENV) .venv-min .mypy_cache .ruff_cache .pytest_cache .hypothesis
