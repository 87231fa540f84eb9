"""Configuration files for test servers: Liftbridge YAML and nats-server conf.

Liftbridge v1.9.0 rejects unknown keys, so the generated file uses only the key names
from its ``server/config.go``. Keys are nested mappings in the file (viper resolves
``a.b.c`` through nested maps, not through literal dotted keys). Values are written as
JSON scalars and flow lists, which YAML reads unchanged, so no YAML library is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

ConfigValue = str | int | float | bool | list[Any] | None

# Test-friendly defaults for every node. Cursors and consumer groups need the cursors
# stream; the activity stream is on so that its tests need no special cluster.
_COMMON_DEFAULTS: dict[str, ConfigValue] = {
    "cursors.stream.partitions": 1,
    "activity.stream.enabled": True,
    # Consumer-group timeouts default to 15 s; tests want rebalances in seconds.
    "groups.consumer.timeout": "5s",
    "groups.coordinator.timeout": "5s",
    # FetchMetadata caches its broker list for 2 min by default; a list taken while a
    # node was down would hide the restarted node from clients for that long.
    "metadata.cache.max.age": "5s",
}

# Server defaults make followers idle 10 s and report a dead leader after 15 s, which
# makes ALL acks and fail-over tests slow: the first ALL acks on a new replicated
# stream wait for idle followers, and a fail-over starts only after those 15 s.
_MULTI_NODE_DEFAULTS: dict[str, ConfigValue] = {
    "clustering.replica.max.idle.wait": "500ms",
    "clustering.replica.max.leader.timeout": "3s",
    "clustering.replica.max.lag.time": "5s",
}


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, ConfigValue]:
    """Flatten nested mappings into dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    flat: dict[str, ConfigValue] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def node_config(
    *,
    node_id: str,
    port: int,
    data_dir: str,
    nats_url: str,
    namespace: str,
    node_ids: list[str],
    log_level: str,
    overrides: Mapping[str, Any] | None,
) -> dict[str, ConfigValue]:
    """Return the flat (dotted-key) configuration of one Liftbridge test node."""
    flat: dict[str, ConfigValue] = {
        "listen": f"127.0.0.1:{port}",
        "host": "127.0.0.1",
        "port": port,
        "data.dir": data_dir,
        "logging.level": log_level,
        "nats.servers": [nats_url],
        "clustering.server.id": node_id,
        "clustering.namespace": namespace,
    }
    if len(node_ids) == 1:
        flat["clustering.raft.bootstrap.seed"] = True
    else:
        # Every node gets the full peer list, so any two of three elect a leader.
        flat["clustering.raft.bootstrap.peers"] = list(node_ids)
        flat.update(_MULTI_NODE_DEFAULTS)
    flat.update(_COMMON_DEFAULTS)
    if overrides:
        for key, value in flatten(overrides).items():
            if value is None:
                flat.pop(key, None)  # None removes a default
            else:
                flat[key] = value
    return flat


def _nest(flat: Mapping[str, ConfigValue]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for dotted, value in sorted(flat.items()):
        node = tree
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"config key {dotted!r} conflicts with a value at {part!r}")
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise ValueError(f"config key {dotted!r} conflicts with nested keys below it")
        node[parts[-1]] = value
    return tree


def render_yaml(flat: Mapping[str, ConfigValue]) -> str:
    """Render dotted keys as a nested YAML document."""
    lines: list[str] = []

    def emit(tree: Mapping[str, Any], indent: int) -> None:
        for key, value in tree.items():
            pad = "  " * indent
            if isinstance(value, dict):
                lines.append(f"{pad}{key}:")
                emit(value, indent + 1)
            else:
                lines.append(f"{pad}{key}: {json.dumps(value)}")

    emit(_nest(flat), 0)
    return "\n".join(lines) + "\n"


def nats_conf(*, port: int, monitor_port: int, extra: str | Mapping[str, Any] | None) -> str:
    """Return a nats-server configuration: loopback listener, monitoring, extras.

    ``extra`` is raw nats-server config text, or a mapping whose values are written as
    JSON (which the nats-server config format accepts).
    """
    lines = [
        f"listen: 127.0.0.1:{port}",
        f"http: 127.0.0.1:{monitor_port}",
    ]
    if isinstance(extra, str):
        lines.append(extra)
    elif extra:
        lines.extend(f"{key}: {json.dumps(value)}" for key, value in extra.items())
    return "\n".join(lines) + "\n"
