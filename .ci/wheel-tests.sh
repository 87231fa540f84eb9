#!/usr/bin/env bash
# The release checks, on what a user installs: `make dist` has built the sdist and the
# wheel into dist/ (and twine has checked them); here the wheel, not the checkout, is
# installed into a fresh venv per interpreter and tested against real servers.
#
#   .ci/wheel-tests.sh floors 3.12 3.13    # the default: all three
#
# floors  CPython 3.11 with every runtime dependency (and the otel and msgspec extras) at
#         its lowest declared version (.ci/floors.py reads them from pyproject.toml): the
#         unit tests, the publisher and client integration tests, the README's example, and
#         the publisher's integration and NATS fault tests both ways (the fast path on,
#         and off: nats-py's public API), as on the oldest nats-py allowed.
# 3.12, 3.13   the newest dependencies: the unit tests, the publisher, client and consumer
#         integration tests, and the README's example; on 3.13 also the publisher's
#         integration and NATS fault tests with the fast path off (`make test-nats-py`).
#
# The venvs live outside the clone and are made anew each run; pip's own cache keeps the
# downloads. The tests import the installed package: LIFTBRIDGE_NATS_TEST_INSTALLED=1
# makes tests/conftest.py fail the run if `liftbridge_nats` comes from the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${LIFTBRIDGE_NATS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/liftbridge-nats}"
EXTRAS=(otel msgspec)
# Tests of development tools (the benchmark report's chart, protoc regeneration), not of
# the package: they need the dev extra, which a user's install does not have.
UNIT=(tests/unit --ignore=tests/unit/test_bench_report.py
      --ignore=tests/unit/test_proto_generated.py)
PUBLISHER=(tests/integration/test_publisher_*.py)
# What `make test-nats-py` runs: with the NATS fault tests, the fast path's own risks.
PUBLISHER_FAULTS=("${PUBLISHER[@]}" tests/faults/test_nats_restart.py
                  tests/faults/test_inbox_flood.py tests/faults/test_occ_retry.py)
# Not the node-kill fail-over tests: they test the server's fail-over timing more than
# the interpreter or the dependency versions, and `make test` and the container suite
# run them.
CLIENT=(tests/integration/test_client_*.py --deselect tests/integration/test_client_failover.py)
CONSUMER=(tests/integration/test_consumer_*.py)
README=(tests/integration/test_readme.py)
NEWEST=3.13

say() { printf '[wheel-tests] %s\n' "$*" >&2; }

# A working CPython of version $1 (3.12): on PATH, or in pyenv's versions folder.
find_python() {
    local version=$1 candidate root
    root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
    for candidate in "$(command -v "python$version" || true)" \
        "$root"/versions/"$version".*/bin/python"$version"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] &&
            "$candidate" -c 'import sys' >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    say "error: no CPython $version found on PATH or under $root/versions; install it"
    return 1
}

wheel="$(ls dist/liftbridge_nats-*-py3-none-any.whl 2>/dev/null | tail -n 1)"
if [ -z "$wheel" ]; then
    say "error: no wheel in dist/: run \`make dist\` first"
    exit 1
fi
wheel="$PWD/$wheel"

# new_venv NAME PYTHON: a fresh venv at $CACHE/wheel-NAME; prints its path.
new_venv() {
    local venv="$CACHE/wheel-$1"
    rm -rf "$venv"
    "$2" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    echo "$venv"
}

# run_pytest VENV ARGS...: pytest of the venv (its script, so that the checkout is not
# put on sys.path ahead of the installed package).
run_pytest() {
    local venv=$1
    shift
    LIFTBRIDGE_NATS_TEST_INSTALLED=1 "$venv/bin/pytest" -q -W error -p no:cacheprovider "$@"
}

test_floors() {
    local python venv constraints
    python="$(find_python 3.11)"
    venv="$(new_venv floors "$python")"
    constraints="$venv/floors.txt"
    "$venv/bin/python" .ci/floors.py "${EXTRAS[@]}" >"$constraints"
    say "floors on $("$python" --version): $(paste -sd' ' "$constraints")"
    "$venv/bin/python" -m pip install --quiet -c "$constraints" "$wheel[testing]" hypothesis h2
    "$venv/bin/python" .ci/floors.py --verify "${EXTRAS[@]}"
    run_pytest "$venv" "${UNIT[@]}" "${PUBLISHER_FAULTS[@]}" "${CLIENT[@]}" "${README[@]}"
    LIFTBRIDGE_NATS_FAST_PATH=0 run_pytest "$venv" "${PUBLISHER_FAULTS[@]}"
}

test_python() {
    local version=$1 python venv
    python="$(find_python "$version")"
    venv="$(new_venv "py$version" "$python")"
    say "newest dependencies on $("$python" --version)"
    "$venv/bin/python" -m pip install --quiet "$wheel[testing]" hypothesis h2
    run_pytest "$venv" "${UNIT[@]}" "${PUBLISHER[@]}" "${CLIENT[@]}" "${CONSUMER[@]}" \
        "${README[@]}"
    if [ "$version" = "$NEWEST" ]; then
        # What `make test-nats-py` runs, on the newest nats-py: nats-py's public API.
        LIFTBRIDGE_NATS_FAST_PATH=0 run_pytest "$venv" "${PUBLISHER_FAULTS[@]}"
    fi
}

run_job() {
    case "$1" in
        floors) test_floors ;;
        3.*) test_python "$1" ;;
        *) say "error: unknown job $1 (floors, 3.12, 3.13)"; return 2 ;;
    esac
}

[ "$#" -gt 0 ] || set -- floors 3.12 3.13
# The jobs are independent (a venv and servers of their own, ports from the OS) and
# mostly wait on the servers, so they run side by side; each one's output is printed
# whole when it ends.
mkdir -p "$CACHE"
logs="$(mktemp -d "$CACHE/wheel-tests-logs.XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT
declare -A pids
for job in "$@"; do
    (
        # (not `run_job && echo`: a function called in an && list runs without set -e)
        start=$SECONDS
        run_job "$job"
        echo "[wheel-tests] $job passed in $((SECONDS - start)) s"
    ) >"$logs/$job.log" 2>&1 &
    pids[$job]=$!
done
failed=()
for job in "$@"; do
    if ! wait "${pids[$job]}"; then
        failed+=("$job")
    fi
    printf '\n[wheel-tests] ---- %s ----\n' "$job"
    cat "$logs/$job.log"
done
if [ "${#failed[@]}" -gt 0 ]; then
    say "error: failed: ${failed[*]}"
    exit 1
fi
