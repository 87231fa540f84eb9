#!/bin/sh
# Entry point of the Liftbridge images (docker/Dockerfile, and the local image that
# `python -m liftbridge_nats.testing image` builds). Runs liftbridge:
# - LBN_CONFIG_YAML set (compose files, ContainerCluster): that document is written to a
#   file and used as the configuration; arguments are passed on.
# - no configuration and no arguments: a single node that bootstraps itself, with its
#   data in /data, connected to ${NATS_URL:-nats://nats:4222}.
# - otherwise: the arguments are passed to liftbridge as they are.
set -eu
if [ -n "${LBN_CONFIG_YAML:-}" ]; then
    printf '%s\n' "$LBN_CONFIG_YAML" > /etc/liftbridge/liftbridge.yaml
    exec liftbridge --config /etc/liftbridge/liftbridge.yaml "$@"
fi
if [ "$#" -eq 0 ]; then
    exec liftbridge --raft-bootstrap-seed --data-dir /data \
        --nats-servers "${NATS_URL:-nats://nats:4222}"
fi
exec liftbridge "$@"
