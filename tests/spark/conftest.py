"""Spark test fixtures: one Spark session at a time, local or on a standalone cluster.

Starting Spark costs seconds, so tests share sessions: ``spark`` is a ``local[2]``
session (UI off, two shuffle partitions) with the ``liftbridge`` source registered;
``spark_cluster`` is a session whose executors run on ``spark_standalone``, a Spark
standalone master and two one-core workers started once per test session as
separate processes. A Python process holds one SparkContext at a time, so the tests
that use the cluster (marked ``spark_cluster``) run after all the others and the
session is switched once. Data goes to the session-wide 1-node LocalCluster of the
harness; tests use unique stream names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from liftbridge_nats.testing import SparkStandalone


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests on the standalone cluster last (one switch of the Spark session)."""
    items.sort(key=lambda item: item.get_closest_marker("spark_cluster") is not None)


class Sessions:
    """The one SparkSession of this process, created for a master on demand."""

    def __init__(self) -> None:
        self._session: Any = None
        self._master = ""

    def get(self, master: str, **conf: str) -> Any:
        """The session for ``master``, stopping a session for another master first."""
        if self._session is not None and self._master == master:
            return self._session
        self.stop()
        # Python workers must run this interpreter (the venv with liftbridge_nats in it).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from liftbridge_nats.spark import LiftbridgeDataSource

        builder = (
            SparkSession.builder.master(master)
            .appName("liftbridge-nats-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.pyspark.python", sys.executable)
            # A failed write task is retried once, as on a cluster (local mode's default
            # is no retry at all).
            .config("spark.task.maxFailures", "2")
        )
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        session.dataSource.register(LiftbridgeDataSource)
        self._session, self._master = session, master
        return session

    def stop(self) -> None:
        """Stop the current session, if any (its executors leave the cluster)."""
        session, self._session, self._master = self._session, None, ""
        if session is not None:
            session.stop()


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[Sessions]:
    """The process's Spark session holder; stops the last session at the end."""
    sessions = Sessions()
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture
def spark(spark_sessions: Sessions) -> Any:
    """The shared local[2] SparkSession with ``liftbridge`` registered."""
    return spark_sessions.get("local[2]")


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[SparkStandalone]:
    """A Spark standalone master and two workers (one core, 1 GiB each), per session."""
    with SparkStandalone(workers=2, cores=1, memory="1g") as cluster:
        yield cluster


# Each executor takes one worker's only core: two executors, one per worker.
CLUSTER_CONF = {
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
}


@pytest.fixture
def spark_cluster(spark_sessions: Sessions, spark_standalone: SparkStandalone) -> Any:
    """A SparkSession whose executors run on ``spark_standalone``'s two workers."""
    return spark_sessions.get(spark_standalone.master_url, **CLUSTER_CONF)
