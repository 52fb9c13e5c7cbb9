# healer: `make run` runs the main job (the healer loop on an embedded local fleet, faults
# injected and healed live), `make test` runs the whole test suite. Both set themselves up
# first (system packages if missing, .venv, Python deps). `make loop` runs the plain loop.

VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# `make test` leaves out the exhaustive rest of the big matrices (every source × every case,
# the eval grid sample); `make test-all` runs everything.
PYTEST_MARKS ?= not exhaustive

.PHONY: run loop test test-all setup setup-demo setup-test lint bench clean

setup:
	@scripts/setup.sh

setup-demo:
	@scripts/setup.sh --demo

setup-test:
	@scripts/setup.sh --test

## the main job on the embedded defaults: the loop on a local fleet, faults healed live
run: setup-demo
	$(BIN)/python -m healer.loop --demo

## the headless healer loop for your own fleet (Ctrl-C stops it)
loop: setup
	$(BIN)/python -m healer.loop

## lint, check generated schemas, run every test
# One worker per core and one more: the tests wait on real processes (servers, the Claude CLI,
# sshd, nats-server) about a quarter of the time, which the extra worker fills (on two cores
# pytest took 908-1,019 s with three workers vs 1,079-1,183 s with two). `make test WORKERS=N`
# sets the count; no test depends on it.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Each file runs whole on one worker, the slowest first (tests/durations.json; xdist would
# otherwise start the files with the most tests first), so no long file is left for the end;
# the summary names failures, errors and skip reasons, then the 15 slowest tests.
# The plugins are named, not discovered: the test projects healer verifies run pytest on this
# venv too, and without autoloading they skip importing schemathesis and hypothesis (about 3 s
# per run; healer passes PYTEST_DISABLE_PLUGIN_AUTOLOAD on to its confined test runs).
PLUGINS := -p xdist.plugin -p pytest_asyncio.plugin -p pytest_timeout -p anyio.pytest_plugin \
	-p _hypothesis_pytestplugin
test: setup-test
	$(BIN)/ruff check healer tests benchmarks
	$(BIN)/python -m healer.config --check
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(BIN)/python -m pytest $(PLUGINS) -n $(WORKERS) --dist loadfile \
		--no-loadscope-reorder -q -rfEs --durations=15 -m "$(PYTEST_MARKS)" $(PYTEST_ARGS)

## every test, the exhaustive matrices included
test-all:
	$(MAKE) test PYTEST_MARKS=

lint: setup-test
	$(BIN)/ruff check healer tests benchmarks

## run every benchmark (about 15 minutes), then one table of figures and targets; fails on a miss
bench:
	@scripts/setup.sh --bench
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
