# Two commands from a fresh clone: `make demo` (set up, run the flagship scenario) and `make test`.
# Both create or reuse .venv; `make test` runs ruff and mypy (configured in pyproject.toml) first.
# TORCH_SPEC pins the CPU wheel so set-up never pulls a CUDA build; on a GPU machine use e.g.
# `make demo TORCH_SPEC=torch`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.testbed-installed

.PHONY: install demo lint test clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/testbed run scenarios/federated/sdea-quick.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
