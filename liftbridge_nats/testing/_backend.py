"""Which servers the harness runs: local processes (the default) or Docker containers.

``LIFTBRIDGE_NATS_BACKEND`` picks for a whole test run; :func:`new_cluster` gives a
cluster of the picked kind, so one test runs on either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeAlias

from liftbridge_nats.testing._cluster import LocalCluster
from liftbridge_nats.testing._containers import ContainerCluster
from liftbridge_nats.testing._install import DEFAULT_LIFTBRIDGE_VERSION

Cluster: TypeAlias = LocalCluster | ContainerCluster
"""Either kind of test cluster; both offer the same addresses, faults and logs."""

BACKEND_ENV = "LIFTBRIDGE_NATS_BACKEND"
PROCESSES = "processes"
CONTAINERS = "containers"
_NAMES = {
    "": PROCESSES,
    "processes": PROCESSES,
    "process": PROCESSES,
    "local": PROCESSES,
    "containers": CONTAINERS,
    "container": CONTAINERS,
    "docker": CONTAINERS,
}


def selected_backend(name: str | None = None) -> str:
    """``"processes"`` or ``"containers"``: ``name`` if given, else ``LIFTBRIDGE_NATS_BACKEND``.

    Raises ValueError for any other value.
    """
    raw = os.environ.get(BACKEND_ENV, "") if name is None else name
    try:
        return _NAMES[raw.strip().lower()]
    except KeyError:
        source = "backend" if name is not None else BACKEND_ENV
        raise ValueError(
            f"{source}={raw!r} is unknown; use 'processes' (the default) or 'containers'."
        ) from None


def new_cluster(
    nodes: int = 1,
    *,
    backend: str | None = None,
    liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION,
    liftbridge_config: Mapping[str, Any] | None = None,
    start_timeout: float | None = None,
    log_level: str = "info",
    container_network: str = "bridge",
) -> Cluster:
    """A not yet started cluster of ``nodes`` Liftbridge servers plus NATS, on the backend
    that ``backend`` (or ``LIFTBRIDGE_NATS_BACKEND``) selects. Start it with ``async with``
    or ``with``; both kinds offer the same addresses, faults and logs.

    ``start_timeout`` defaults to each kind's own (60 s for processes, 90 s for containers).
    ``container_network`` is ContainerCluster's ``network`` (processes always listen on
    127.0.0.1). Other options only one kind has (``nats_config``, ``grpc_tls``,
    ``image``...) are given to that class directly.
    """
    options: dict[str, Any] = {
        "liftbridge_version": liftbridge_version,
        "liftbridge_config": liftbridge_config,
        "log_level": log_level,
    }
    if start_timeout is not None:
        options["start_timeout"] = start_timeout
    if selected_backend(backend) == CONTAINERS:
        return ContainerCluster(nodes, network=container_network, **options)
    return LocalCluster(nodes, **options)
