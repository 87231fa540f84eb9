"""Spark test fixtures: one local SparkSession for the whole session, plus helpers.

Starting Spark costs seconds, so every Spark test shares one ``local[2]`` session
(UI off, two shuffle partitions) with the ``liftbridge`` source registered. Data goes
to the session-wide 1-node LocalCluster of the harness; tests use unique stream names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A shared local[2] SparkSession with ``liftbridge`` registered."""
    # Python workers must run this interpreter (the venv with liftbridge_nats in it).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from liftbridge_nats.spark import LiftbridgeDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("liftbridge-nats-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # A failed write task is retried once, as on a cluster (local mode's default is
        # no retry at all).
        .config("spark.task.maxFailures", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(LiftbridgeDataSource)
    try:
        yield session
    finally:
        session.stop()
