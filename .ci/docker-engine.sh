#!/usr/bin/env bash
# Makes a Docker engine answer for the container suite, and stops it again afterwards.
#
#   .ci/docker-engine.sh start   # nothing to do when `docker info` answers; otherwise (as
#                                # root) installs Debian's docker.io, docker-compose and
#                                # busybox-static when missing and starts dockerd
#   .ci/docker-engine.sh stop    # stops the dockerd that `start` started, if any
#
# The engine runs with --iptables=false (the machines give no iptables rights; ports
# published on 127.0.0.1 still work through docker-proxy) and the vfs storage driver
# (no overlay filesystem in these machines). Safe to run any number of times.
set -euo pipefail

CACHE="${LIFTBRIDGE_NATS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/liftbridge-nats}"
STATE="$CACHE/dockerd"
PIDFILE="$STATE/started-by-ci.pid"

say() { printf '[docker-engine] %s\n' "$*" >&2; }

answers() { timeout 15 docker info >/dev/null 2>&1; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

install_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
    installed busybox-static || missing+=(busybox-static)
    [ "${#missing[@]}" -eq 0 ] && return 0
    say "installing ${missing[*]} (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
        apt-get update -q >&2
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
}

start() {
    if [ "$(id -u)" = 0 ]; then
        # docker-compose and busybox-static are needed even when an engine already runs.
        install_packages
    fi
    if answers; then
        say "a Docker engine answers already: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        say "no Docker engine answers and this is not root: start Docker (or run as root)"
        return 1
    fi
    mkdir -p "$STATE"
    say "starting dockerd (log: $STATE/dockerd.log)"
    # setsid + closed descriptors: the engine outlives this script without holding its
    # caller's pipes open; `stop` ends it.
    setsid dockerd --iptables=false --ip6tables=false --storage-driver=vfs \
        </dev/null >"$STATE/dockerd.log" 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 120); do
        if answers; then
            say "Docker engine $(docker version --format '{{.Server.Version}}') answers"
            return 0
        fi
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            say "dockerd exited; its log:"
            tail -n 30 "$STATE/dockerd.log" >&2
            rm -f "$PIDFILE"
            return 1
        fi
        sleep 0.5
    done
    say "dockerd started but does not answer after 60 s; its log:"
    tail -n 30 "$STATE/dockerd.log" >&2
    return 1
}

stop() {
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
        say "stopping dockerd (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$PIDFILE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
