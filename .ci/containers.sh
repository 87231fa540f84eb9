#!/usr/bin/env bash
# Container part of CI, called by .ci/run after `make test`:
# 1. make a Docker engine answer (.ci/docker-engine.sh: as root, installs Debian's
#    docker.io, docker-compose and busybox-static when missing, starts dockerd);
# 2. `make test-containers`: the local server image (built from the static binaries, no
#    registry), tests/containers (ContainerCluster, its clean-up, the compose files
#    smoke-tested with docker-compose) and the integration and fault suites on containers,
#    then a short seeded randomized fault run (`make chaos`) whose checker must pass;
# 3. whatever happened (failure, Ctrl-C): check that no container, network or volume of
#    the run is left (removing any), and stop the engine if step 1 started it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"

finish() {
    local status=$?
    trap - EXIT INT TERM
    if docker info >/dev/null 2>&1; then
        # Containers and networks of ContainerClusters whose test process is gone.
        if ! .venv/bin/python -m liftbridge_nats.testing clean --check; then
            status=1
        fi
        # The compose smoke tests' projects (lbn-smoke-1node, lbn-smoke-3node).
        local left
        left="$(docker ps -aq --filter label=com.docker.compose.project)$(
            docker volume ls -q --filter label=com.docker.compose.project)"
        if [ -n "$left" ]; then
            echo "error: compose containers or volumes were left behind:" >&2
            docker ps -a --filter label=com.docker.compose.project >&2
            docker volume ls --filter label=com.docker.compose.project >&2
            for file in docker/compose-1node.yml docker/compose-3node.yml; do
                project="lbn-smoke-$(basename "$file" .yml | sed 's/compose-//')"
                docker-compose -f "$file" -p "$project" down --volumes --remove-orphans || true
            done
            status=1
        fi
    fi
    .ci/docker-engine.sh stop || true
    exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

.ci/docker-engine.sh start
make test-containers
# A short seeded randomized fault run (bench/chaos, about 2 minutes); its checker must pass.
CHAOS_DURATION=90 CHAOS_SEED=11 make chaos
