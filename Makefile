# Two entry points: `make demo` and `make test`. Both install into .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# The CPU wheel of torch, installed first so that the package's own torch range is already
# satisfied and pip never fetches the multi-gigabyte CUDA build on a CPU machine.
TORCH ?= torch==2.13.0
DEMO_OUT ?= demo
# pip byte-compiles every module of every package it installs (23k files with the dev extras: about two minutes of
# one core, half of the installation); without that, Python compiles only the modules a process imports, once,
# into the same __pycache__ (measured: compileall took 18 s for transformers' 2,912 files, 11 s for ray's 2,579).
PIP := $(PY) -m pip install -q --no-compile
# Byte-compiled modules are cached in __pycache__ even where the environment says not to: the tests start
# about a hundred Python processes (torchrun workers, the command line), each recompiling every module
# it imports without the cache.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install test test-fast demo bench clean

install: $(STAMP)

# The demo needs the package alone; the tests add the dev extras (pytest, import-linter, Triton for the
# kernel's interpreter tests), so `make demo` on a fresh machine does not wait for them.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) "$(TORCH)"
	$(PIP) -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PIP) -e ".[dev]"
	touch $(DEV_STAMP)

# Test processes (pytest-xdist). Whole files go to one worker (--dist loadfile), so that a module's
# shared runs (tests/training/test_fsdp.py's torchrun runs) are made once, not once per worker; the longest
# files first (tests/durations.py), not xdist's most-tests-first order.
TEST_JOBS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

# ruff: format and lint (pyproject.toml's [tool.ruff]); lint-imports: the import contracts of
# [tool.importlinter] (the package's layers); then every test.
test: $(DEV_STAMP)
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST)

# The unit tests alone (no process starts, no long training, no large interpreted kernels): under a minute.
test-fast: $(DEV_STAMP)
	$(PYTEST) -m "not slow"

demo: install
	$(VENV)/bin/blocklab compare --preset quick --out $(DEMO_OUT)

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
