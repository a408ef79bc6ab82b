# Every target works on a fresh clone with nothing installed: it makes .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_FLAGS := --disable-pip-version-check -q

.PHONY: install test test-fast test-torch bench docs lint typecheck clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/python -m pip install $(PIP_FLAGS) -c constraints.txt -e ".[dev,bench,docs]"
	touch $(STAMP)

install: $(STAMP)

## Run the whole test suite (unit, conformance, doctests in src/ and docs/).
test: $(STAMP)
	$(BIN)/python -m pytest -q

## Quick subset: everything but slow and torch.compile tests.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not compile"

## Run the suite (less slow tests) against another torch release in its own venv, e.g.
## `make test-torch TORCH=2.11.0`. torch comes from the registry (on x86_64 Linux a CUDA
## build of several GB); a constraints file pins it so pip cannot pick another release.
TORCH ?= 2.11.0
TORCH_VENV := .venv-torch-$(TORCH)
TORCH_STAMP := $(TORCH_VENV)/.installed

$(TORCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(TORCH_VENV)
	echo "torch==$(TORCH)" > $(TORCH_VENV)/constraints.txt
	$(TORCH_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install $(PIP_FLAGS) -c $(TORCH_VENV)/constraints.txt "torch==$(TORCH)" -e ".[dev,bench]"
	$(TORCH_VENV)/bin/python -c "import torch; assert torch.__version__.split('+')[0] == '$(TORCH)', torch.__version__"
	touch $(TORCH_STAMP)

test-torch: $(TORCH_STAMP)
	$(TORCH_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not slow"

## The main job: the benchmark suite in its quick setting.
bench: $(STAMP)
	$(BIN)/hardgrad bench --quick --out bench-results

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) docs/_build bench-results build dist .pytest_cache .mypy_cache .ruff_cache
