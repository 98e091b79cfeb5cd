# `make smoke` and `make test` work on a fresh machine: they create .venv and install pins.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: smoke test test-slow lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools

$(VENV)/.runtime-installed: $(BIN)/python requirements.txt requirements-nodeps.txt pyproject.toml
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.test-installed: $(VENV)/.runtime-installed requirements-test.txt
	$(BIN)/pip install -q -r requirements-test.txt
	touch $@

smoke: $(VENV)/.runtime-installed
	rm -rf runs/smoke
	$(BIN)/python launch/tpu_run.py --config configs/smoke.py --workdir runs/smoke

# Three workers on two cores: much of a test's time is one thread (Python, subprocess start-up,
# the sandbox), so a third worker fills the idle core time (bench/RESULTS.md, `make test`).
# Files go out in collection order, not xdist's most-tests-first: conftest.py puts the
# pipeline-sized ones first.
# `make test` leaves out the tests marked `slow`: whole pipelines at their real size (the
# starter build and its loop, the two-process run, the plan against TPU compiles, `plan
# --compile` end to end, an 8-layer TPU train step, the regret test's mutations, every minigame
# candidate validated, the Colab notebook's launch, the TPU sizing of bench/accelerator.py),
# which `make test-slow` runs and bench/RESULTS.md records.
PYTEST := $(BIN)/python -m pytest tests proj -q -p no:cacheprovider -n 3 --dist loadfile \
	  --no-loadscope-reorder --durations=20
test: $(VENV)/.test-installed
	$(PYTEST) -m "not slow"

test-slow: $(VENV)/.test-installed
	$(PYTEST) -m slow

lint: $(VENV)/.test-installed
	$(BIN)/ruff check spade_jax launch configs bench tests scripts

bench: $(VENV)/.test-installed
	for b in bench/*.py; do $(BIN)/python $$b; done

clean:
	rm -rf $(VENV) runs
