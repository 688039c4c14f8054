# One entry point for everything: `make test` and `make demo` build .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo lint bench api-docs spec-docs clean

$(STAMP): pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,plot]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# the fast loop: every test that starts no server or subprocess (tests/conftest.py fails one that does
# unmarked) and runs no whole packing simulation
check: $(STAMP)
	$(BIN)/python -m pytest -m "not e2e and not server and not slow and not gpu" -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check nomad_gpu tests benchmarks plugins
	$(BIN)/mypy --strict
	$(BIN)/mypy tests --check-untyped-defs

demo: $(STAMP)
	$(BIN)/nomad-gpu demo

bench: $(STAMP)
	$(BIN)/nomad-gpu bench --nodes 1000 --gpus-per-node 8 --queued 10000

api-docs: $(STAMP)
	$(BIN)/python -m nomad_gpu.service.http.openapi > docs/api.md

spec-docs: $(STAMP)
	$(BIN)/python -m nomad_gpu.render.specdocs > docs/spec.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
