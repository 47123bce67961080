# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The dashboard's browser tests use Debian's chromium (.ci/services); Playwright never downloads one.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: demo test lint typecheck services bench clean install-check docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/jobyard demo

services:
	@bash .ci/services

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs in TEST_JOBS processes (pytest-xdist): most tests wait on servers, worker
# processes and leases rather than on a core, so a 2-core machine runs more than 2. Tests marked
# xdist_group (the chaos runs, the browser's) take one process per group (--dist loadgroup).
# Tests marked alone assert a wall-clock bound or run on leases of a second (the chaos and
# partition runs): they run afterwards, in one process, with no other test loading the machine.
# TEST_JOBS=0 runs the first part in one process too.
TEST_JOBS ?= 4
test: $(STAMP) services lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadgroup -m 'not alone'
	$(BIN)/pytest -q -p no:cacheprovider -m alone

# The user guide (mkdocs.yml) into site/: strict, so a broken link or a page missing fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# `pip install jobyard` without extras, then with each store's extra, in fresh venvs (.ci/run).
install-check:
	bash .ci/install-check

bench: $(STAMP)
	$(BIN)/python bench/throughput.py --backend sqlite

# Peer libraries live in bench/.venv-peers (created by bench/peers.py from requirements-peers.txt).
.PHONY: bench-peers bench-compare
bench-peers: $(STAMP) services
	$(BIN)/python bench/peers.py --store redis
	$(BIN)/python bench/peers.py --store postgres

bench-compare: $(STAMP) services
	$(BIN)/python bench/compare.py --store redis
	$(BIN)/python bench/compare.py --store postgres

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache jobyard.db* site
