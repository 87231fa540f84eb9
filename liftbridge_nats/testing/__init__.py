"""Real-server test harness: NATS + Liftbridge as local processes or Docker containers.

``LocalCluster`` starts a nats-server and N Liftbridge nodes as processes on free
loopback ports; ``ContainerCluster`` does the same in Docker containers through
testcontainers (ports published on 127.0.0.1, image built from local binaries, no
registry needed); ``new_cluster``
gives one or the other as ``LIFTBRIDGE_NATS_BACKEND`` says. ``ensure_liftbridge`` builds
(once, into a per-user cache) the Liftbridge binary both run. The pytest plugin
(``liftbridge_nats.testing.pytest_plugin``, loaded automatically) provides the
``liftbridge_cluster``, ``liftbridge_cluster3``, ``liftbridge_cluster_factory``,
``liftbridge_container_cluster``, ``nats_client`` and ``unique_name`` fixtures;
``generate_certificates`` makes a throw-away CA with server and client certificates for
testing TLS set-ups; ``SparkStandalone`` starts a Spark standalone master and workers as
processes (it needs the ``spark`` extra and Java). Nothing here is needed at run time by the SDK itself.
"""

from __future__ import annotations

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

__all__ = [
    "DEFAULT_LIFTBRIDGE_VERSION",
    "Cluster",
    "ContainerCluster",
    "LocalCluster",
    "SparkStandalone",
    "TestCertificates",
    "cache_dir",
    "ensure_liftbridge",
    "find_nats_server",
    "generate_certificates",
    "new_cluster",
]
