# healer: `make run` runs the main job, `make test` runs the whole test suite.
# Both set themselves up first (system packages if missing, .venv, Python deps).

VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test setup setup-test lint bench demo clean

setup:
	@scripts/setup.sh

setup-test:
	@scripts/setup.sh --test

## run the headless healer loop on the embedded defaults
run: setup
	$(BIN)/python -m healer.loop

## lint, check generated schemas, run every test
test: setup-test
	$(BIN)/ruff check healer tests benchmarks
	$(BIN)/python -m healer.config --check
	$(BIN)/python -m pytest -n 2 --dist loadfile -q -rfE $(PYTEST_ARGS)

lint: setup-test
	$(BIN)/ruff check healer tests benchmarks

## run every benchmark and print the figures
bench: setup-test
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
