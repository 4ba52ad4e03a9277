# The two commands that are the contract: `make demo` and `make test`.
# Both set everything up on a fresh machine; later runs reuse .venv and the model cache.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,models,local,server,langgraph,refine,plots,otel,redis,ray,mcp,docs
BENCH_EXTRAS ?= langgraph,ray,adversarial

.PHONY: all setup system-deps test lint typecheck docs pytest demo bench-demo bench models clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip wheel

# Reinstall when either distribution's dependency list changes: closedloop (the library)
# and closedloop-bench (the world, the reference agents and the benchmarks, in bench/).
$(STAMP): pyproject.toml bench/pyproject.toml | $(BIN)/python
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/python -m pip install \
		-e ".[$(EXTRAS)]" -e "./bench[$(BENCH_EXTRAS)]"
	touch $(STAMP)

setup: system-deps $(STAMP) models

# Debian packages the tests drive for real (chromium, redis-server, node, curl, jq; see
# the script). A test whose tool is missing fails rather than skips.
system-deps:
	bash scripts/install_system_deps.sh

models: $(STAMP)
	$(BIN)/closedloop models pull --all

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (mkdocs.yml): strict, so a broken link or a public name without a
# docstring fails the build. The pages land in site/ (ignored by git).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

pytest: $(STAMP)
	$(BIN)/pytest -q -n logical --dist loadscope

test: setup lint typecheck docs pytest

# The main job on the embedded defaults. Its report goes to the run folder it prints
# (runs/<id>/, ignored by git): a user's run never rewrites a committed file.
# DEMO_ARGS passes options through (`make demo DEMO_ARGS="--tool-tasks 12"`).
DEMO_ARGS ?=
demo: $(STAMP) models
	$(BIN)/closedloop demo $(DEMO_ARGS)

# Rewrites the committed results the README's and the benchmarks' demo tables quote
# (bench/results/demo.json): run it on an idle machine, then update those tables.
bench-demo: $(STAMP) models
	$(BIN)/closedloop demo --results bench/results/demo.json

bench: setup
	$(BIN)/python bench/control_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
