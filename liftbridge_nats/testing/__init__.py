"""Test doubles and a real-server test harness for applications that use liftbridge-nats.

Without any server: ``MemoryTransport`` stands in for a NATS connection and a Liftbridge
server, so that ``Publisher(transport=MemoryTransport())`` publishes in memory; every
message is stored and acked and recorded in ``transport.published`` (``RecordedMessage``),
and ``transport.fail(...)`` makes publishes fail (an ``AckError`` or a ``Failure``).
Importing it needs only the SDK's runtime dependencies.

With real servers: ``LocalCluster`` starts a nats-server and N Liftbridge nodes as
processes on free loopback ports; ``ContainerCluster`` does the same in Docker containers
through testcontainers (ports published on 127.0.0.1, image built from local binaries,
no registry needed); ``new_cluster`` gives one or the other as
``LIFTBRIDGE_NATS_BACKEND`` says. ``ensure_liftbridge`` builds (once, into a per-user
cache) the Liftbridge binary both run. The pytest plugin
(``liftbridge_nats.testing.pytest_plugin``, loaded automatically) provides the
``liftbridge_cluster``, ``liftbridge_cluster3``, ``liftbridge_cluster_factory``,
``liftbridge_container_cluster``, ``nats_client`` and ``unique_name`` fixtures;
``generate_certificates`` makes a throw-away CA with server and client certificates for
testing TLS set-ups; ``SparkStandalone`` starts a Spark standalone master and workers as
processes (it needs the ``spark`` extra and Java). The server harness is imported on
first use of one of its names. Nothing here is needed at run time by the SDK itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from liftbridge_nats.testing._memory import (
    Failure,
    MemoryTransport,
    RecordedMessage,
    Sent,
)

# The server harness, by module: loaded when one of its names is first used, so that a
# unit test importing MemoryTransport loads no process, Docker or Spark machinery.
_HARNESS = {
    "Cluster": "._backend",
    "new_cluster": "._backend",
    "TestCertificates": "._certs",
    "generate_certificates": "._certs",
    "LocalCluster": "._cluster",
    "ContainerCluster": "._containers",
    "DEFAULT_LIFTBRIDGE_VERSION": "._install",
    "cache_dir": "._install",
    "ensure_liftbridge": "._install",
    "find_nats_server": "._install",
    "SparkStandalone": "._spark_cluster",
}

if TYPE_CHECKING:
    from liftbridge_nats.testing._backend import Cluster, new_cluster
    from liftbridge_nats.testing._certs import TestCertificates, generate_certificates
    from liftbridge_nats.testing._cluster import LocalCluster
    from liftbridge_nats.testing._containers import ContainerCluster
    from liftbridge_nats.testing._install import (
        DEFAULT_LIFTBRIDGE_VERSION,
        cache_dir,
        ensure_liftbridge,
        find_nats_server,
    )
    from liftbridge_nats.testing._spark_cluster import SparkStandalone
else:  # type checkers see the imports above, and no catch-all

    def __getattr__(name: str) -> Any:
        module = _HARNESS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HARNESS))


__all__ = [
    "DEFAULT_LIFTBRIDGE_VERSION",
    "Cluster",
    "ContainerCluster",
    "Failure",
    "LocalCluster",
    "MemoryTransport",
    "RecordedMessage",
    "Sent",
    "SparkStandalone",
    "TestCertificates",
    "cache_dir",
    "ensure_liftbridge",
    "find_nats_server",
    "generate_certificates",
    "new_cluster",
]
