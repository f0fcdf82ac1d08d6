# Every target installs what it needs into .venv on first use (from a fresh clone).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-thorough test-exhaustive lint bench bench-jit bench-comm clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,mpi]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m ruff check .
	TILEPY_HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -m "not exhaustive" tests

test-thorough: $(STAMP)
	TILEPY_HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -m "not exhaustive" tests

test-exhaustive: $(STAMP)
	TILEPY_HYPOTHESIS_PROFILE=thorough TILEPY_EXHAUSTIVE=1 $(PY) -m pytest -q tests -m exhaustive

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/interp_vs_triton.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/codecs.py

bench-jit: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/jit_bench.py

bench-comm: $(STAMP)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/collectives.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/comm_scaling.py

clean:
	rm -rf $(VENV) build *.egg-info
