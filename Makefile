# Quick start: `make demo` and `make test`. Both create .venv with pip when it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo lint test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The demo replaces its own result when run again (--overwrite): running it asks for a fresh one.
demo: $(STAMP)
	$(BIN)/loadtune sweep configs/demo.yaml --out results/demo-images.csv --plot results/demo-images.png --overwrite

# Style, import order and pyflakes' checks (ruff), then the typed modules under mypy --strict (the
# files mypy checks are listed in pyproject.toml's [tool.mypy], beside ruff's configuration).
lint: $(STAMP)
	$(BIN)/ruff check loadtune tests benchmarks
	$(BIN)/mypy

# Lint first; then two steps: tests of behaviour two at a time (pytest-xdist; an idle worker takes
# tests queued for the other, so one long test at the end does not hold the step), then, alone,
# the few that assert measured figures (marked serial), so that no other test's load moves them.
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not serial"
	$(BIN)/python -m pytest -q -m serial

# The unit tests only: no DataLoader workers, subprocesses, real sweeps or ranks (marked slow).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) results .pytest_cache
