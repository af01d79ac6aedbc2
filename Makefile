# Two entry points: `make demo` and `make test`. Both install into .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# The CPU wheel of torch, installed first so that the package's own torch range is already
# satisfied and pip never fetches the multi-gigabyte CUDA build on a CPU machine.
TORCH ?= torch==2.13.0
DEMO_OUT ?= demo
# The environment starts without pip (`venv --without-pip`: ensurepip alone took 8 s of the demo's start): the
# system's pip puts uv into it, and uv installs the rest, torch first. torch's CPU wheel lies on this machine's
# disk where pip's find-links point (PIP_FIND_LINKS; uv reads no pip configuration, so it is passed on); without
# them pip installs torch as before. The package and its dependencies follow with torch held at the version
# installed (torch.txt), so nothing fetches another build. Measured from an empty cache on the 2-core machine
# (the demo's timestamped log): venv, uv and torch 23 s with ensurepip and pip, 9 s this way; uv installs the
# package's dependencies in 6 s (pip took 47 s).
# Nothing is byte-compiled at install (23k files with the dev extras, two minutes of one core): Python compiles
# the modules a process imports, once, into the same __pycache__. pip is added for the user's own installs.
PIP := python3 -m pip --python $(PY) install -q --no-compile
UV := $(VENV)/bin/uv pip install -q --python $(PY)
FIND_LINKS := $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))
# Byte-compiled modules are cached in __pycache__ even where the environment says not to: the tests start
# about a hundred Python processes (torchrun workers, the command line), each recompiling every module
# it imports without the cache.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install test test-fast demo bench clean

install: $(STAMP)

# The demo needs the package alone; the tests add the dev extras (pytest, import-linter, Triton for the
# kernel's interpreter tests), so `make demo` on a fresh machine does not wait for them.
$(STAMP): pyproject.toml
	python3 -m venv --without-pip $(VENV)
	$(PIP) "uv>=0.9" || { $(PY) -m ensurepip -q && $(PY) -m pip install -q --no-compile "uv>=0.9"; }
	if [ -n "$(FIND_LINKS)" ]; then $(UV) $(FIND_LINKS) "$(TORCH)"; \
	else $(PIP) "$(TORCH)" || $(PY) -m pip install -q --no-compile "$(TORCH)"; fi
	$(PY) -c 'from importlib.metadata import version; print("torch==" + version("torch").split("+")[0])' > $(VENV)/torch.txt
	$(UV) --constraint $(VENV)/torch.txt -e . pip
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(UV) --constraint $(VENV)/torch.txt -e ".[dev]"
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
