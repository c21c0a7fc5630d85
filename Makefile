# The two commands of the README: `make demo` and `make test`. Both set themselves up.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup demo test lint format docs docs-serve bench clean services

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch from the pinned CPU wheel first, so no dependency can pull a CUDA build
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	# verl with --no-deps (it declares a CUDA torch); its import chain is in the dev extra
	$(PY) -m pip install -q --no-deps "verl==0.9.1"
	touch $@

setup: $(STAMP)

services:
	bash scripts/ensure-services.sh

demo: setup
	$(VENV)/bin/rlguard demo --serve --host $(HOST) --port $(PORT)

# Two pytest-xdist workers, a whole file to each (tests/conftest.py): one worker alone leaves much
# of the second core idle while it waits on servers, browsers and subprocesses.
TEST_WORKERS ?= 2

test: setup services
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=30

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy trainer_hook/rlguard backend/rlguard_backend frontend/rlguard_frontend \
		compose/rlguard_compose

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The docs site (MkDocs, Material) into ./site; --strict fails on any warning: a broken link,
# a missing anchor, a page outside the nav. The REST reference is rendered from the OpenAPI schema.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

BENCHMARKS := ingest query hook_overhead demo_overhead detectors dashboard samples public_logs \
	stop_latency hook_memory wandb_tee

bench: setup services
	for b in $(BENCHMARKS); do echo "== $$b"; $(PY) -m benchmarks.$$b || exit 1; done

clean:
	rm -rf $(VENV) build dist site *.egg-info .rlguard test-artifacts
