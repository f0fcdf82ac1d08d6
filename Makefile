# Every target installs what it needs into .venv on first use (from a fresh clone).
# `make test` installs the tested versions pinned in constraints.txt; `make test-latest`
# resolves the newest versions pyproject.toml allows (in .venv-latest) and `make
# test-oldest` the lowest (constraints-oldest.txt, in .venv-oldest).
PYTHON      ?= python3
VENV        ?= .venv
CONSTRAINTS ?= constraints.txt
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed-stamp
PIN         := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),--upgrade --upgrade-strategy eager)
# pytest-xdist workers: tests are mostly single-threaded compiles, so one per core.
WORKERS     ?= 2

.PHONY: demo test test-latest test-oldest test-thorough test-exhaustive lint bench bench-jit \
	bench-comm bench-lib clean

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIN) -e '.[test,mpi,data,train,viz]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m ruff check .
	TILEPY_HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(WORKERS) -m "not exhaustive" tests

test-latest:
	rm -f .venv-latest/.installed-stamp
	$(MAKE) test VENV=.venv-latest CONSTRAINTS=

test-oldest:
	$(MAKE) test VENV=.venv-oldest CONSTRAINTS=constraints-oldest.txt

test-thorough: $(STAMP)
	TILEPY_HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -n $(WORKERS) -m "not exhaustive" tests

test-exhaustive: $(STAMP)
	TILEPY_HYPOTHESIS_PROFILE=thorough TILEPY_EXHAUSTIVE=1 $(PY) -m pytest -q tests -m exhaustive

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/interp_vs_triton.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/codecs.py

bench-jit: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/jit_bench.py

bench-lib: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/library_bench.py

bench-comm: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/collectives.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/comm_scaling.py

clean:
	rm -rf .venv .venv-latest .venv-oldest build *.egg-info
