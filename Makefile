# Two commands from a fresh clone: `make demo` (set up, run the flagship scenario) and `make test`.
# Both create or reuse .venv; `make test` runs ruff and mypy (configured in pyproject.toml) first.
# `make check` is the quick loop while editing: lint and the unit tier (no Ray, Flower simulation,
# DeepSpeed or child process; tests/conftest.py gives each test its tier) less the tests marked slow
# (paper claims at their calibrated size), on two pytest-xdist workers, in under 3 minutes.
# TORCH_SPEC pins the CPU wheel so set-up never pulls a CUDA build; on a GPU machine use e.g.
# `make demo TORCH_SPEC=torch`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.testbed-installed

.PHONY: install demo lint check test clean

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

# Every extra is installed here, so a test that needs one fails instead of skipping (tests/conftest.py).
check: lint
	TESTBED_REQUIRE_EXTRAS=1 $(BIN)/python -m pytest -q -m "unit and not slow" -n 2

# Two workers, as CI has two cores, each test file on one (its module fixtures start once) and the
# cluster tests one at a time (tests/conftest.py, xdist_scope).
test: lint
	TESTBED_REQUIRE_EXTRAS=1 $(BIN)/python -m pytest -q -n 2 --dist loadscope

clean:
	rm -rf $(VENV) runs .pytest_cache
