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

# The demo never replaces an earlier result: run again, it writes beside it (demo-images-2.csv, ...).
DEMO_OUT := $(shell f=results/demo-images.csv; n=1; while [ -e $$f ]; do n=$$((n + 1)); f=results/demo-images-$$n.csv; done; echo $$f)
demo: $(STAMP)
	$(BIN)/loadtune sweep configs/demo.yaml --out $(DEMO_OUT) --plot $(DEMO_OUT:.csv=.png)

# Style, import order and pyflakes' checks (ruff), then the whole package under mypy --strict (its
# settings in pyproject.toml's [tool.mypy], beside ruff's), then the size limits (tests/test_shape.py).
lint: $(STAMP)
	$(BIN)/ruff check loadtune tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_shape.py

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
