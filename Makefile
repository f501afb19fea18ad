# onnxmem developer targets. PYTHON defaults to the project's virtual environment.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
SHARED ?= ../shared

.PHONY: install test test-slow test-cuda check bench bench-solvers bench-order bench-verify bench-alias models

$(VENV)/bin/python:
	python3 -m venv $(VENV)

install: $(VENV)/bin/python
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e ".[dev]"

test:
	$(PYTHON) -m pytest -q

test-slow:
	$(PYTHON) -m pytest -q -m slow

test-cuda:
	$(PYTHON) -m pytest -q -m cuda

check:
	$(PYTHON) -m ruff check onnxmem tests bench models tools
	$(PYTHON) -m mypy onnxmem

models:
	$(PYTHON) models/build_models.py

bench:
	$(PYTHON) bench/bench_models.py --verify

bench-solvers:
	$(PYTHON) bench/bench_solvers.py --shared $(SHARED)

bench-order:
	$(PYTHON) bench/bench_order.py

bench-verify:
	$(PYTHON) bench/bench_verify.py

bench-alias:
	$(PYTHON) bench/bench_alias.py
