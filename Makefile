# The README's commands. Each target does its own set-up: a fresh clone needs nothing else.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install test serve bench lint clean

# torch first, pinned to the CPU build on disk: otherwise pip resolves a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,plot]'
	touch $(STAMP)

install: $(STAMP)

# The layer contracts first (pyproject.toml [tool.importlinter]): an upward import fails CI.
test: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q

serve: install
	$(BIN)/memory-service serve

bench: install
	$(BIN)/memory-service bench

lint: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
