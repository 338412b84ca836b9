# The README's commands. Each target does its own set-up: a fresh clone needs nothing else.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Bytecode, and pytest's assert-rewritten modules, are cached in __pycache__ (git-ignored) even
# where the environment asks not to: without the cache every test process (each worker, each
# `serve` a test starts) rewrites ~600 modules and compiles the project again, which about
# doubles a worker's collection (benchmarks/RESULTS.md).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install test test-fast serve bench lint docs clean

# torch first, pinned to the CPU build on disk: otherwise pip resolves a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,plot,openai-agents,langgraph]'
	touch $(STAMP)

# The inspector's browser tests drive Debian's Chromium through its chromedriver (Selenium
# downloads nothing): installed by `make test` when missing and we are root, as on CI. Only
# the tests need it: `make serve` and `make test-fast` do not install a browser.
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver

$(CHROMIUM) $(CHROMEDRIVER):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else \
		echo "$@ is missing: run 'sudo apt-get install -y chromium chromium-driver' (the browser tests fail without it)"; \
	fi

install: $(STAMP)

# Two workers (pytest-xdist), each with its own PostgreSQL database (tests/support/postgres.py);
# the slowest 15 tests are listed at the end (pyproject addopts).
PYTEST := $(BIN)/python -m pytest -q -n 2

# The layer contracts first (pyproject.toml [tool.importlinter]): an upward import fails CI.
# Every test: PostgreSQL on 127.0.0.1:5432 (MEMORY_TEST_POSTGRES_DSN), serve processes, all.
test: install $(CHROMIUM) $(CHROMEDRIVER)
	$(BIN)/lint-imports --no-cache
	$(PYTEST)

# The developer's loop: no PostgreSQL or Redis, no serve or CLI processes, none of the slow randomised
# checks, no browser, files and Qdrant Edge but not qdrant-client's local mode (the markers are
# set in tests/conftest.py from the fixtures and backends a test uses).
test-fast: install
	$(PYTEST) -m "not postgres and not redis and not subprocess and not slow and not qdrant_client and not browser"

# `make serve PORT=9000` serves on 9000; only a PORT on make's command line counts, not one
# the environment holds for some other program (MEMORY_API__PORT is the setting itself).
serve: install
	$(BIN)/memory-service serve$(if $(filter command line,$(origin PORT)), --port $(PORT))

bench: install
	$(BIN)/memory-service bench

lint: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link or anchor fails.
# NO_MKDOCS_2_WARNING quiets Material's notice about mkdocs' successor, which is no fault of ours.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info site
