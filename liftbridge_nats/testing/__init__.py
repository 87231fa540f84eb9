"""Real-server test harness: local NATS + Liftbridge processes and pytest fixtures.

``LocalCluster`` starts a nats-server and N Liftbridge nodes on free loopback ports;
``ensure_liftbridge`` builds (once, into a per-user cache) the Liftbridge binary it
runs; the pytest plugin (``liftbridge_nats.testing.pytest_plugin``, loaded
automatically) provides the ``liftbridge_cluster``, ``liftbridge_cluster3``,
``nats_client`` and ``unique_name`` fixtures; ``generate_certificates`` makes a
throw-away CA with server and client certificates for testing TLS set-ups;
``SparkStandalone`` starts a Spark standalone master and workers as processes (it needs
the ``spark`` extra and Java). Nothing here is needed at run time by the SDK itself.
"""

from __future__ import annotations

from liftbridge_nats.testing._certs import TestCertificates, generate_certificates
from liftbridge_nats.testing._cluster import LocalCluster
from liftbridge_nats.testing._install import (
    DEFAULT_LIFTBRIDGE_VERSION,
    cache_dir,
    ensure_liftbridge,
    find_nats_server,
)
from liftbridge_nats.testing._spark_cluster import SparkStandalone

__all__ = [
    "DEFAULT_LIFTBRIDGE_VERSION",
    "LocalCluster",
    "SparkStandalone",
    "TestCertificates",
    "cache_dir",
    "ensure_liftbridge",
    "find_nats_server",
    "generate_certificates",
]
