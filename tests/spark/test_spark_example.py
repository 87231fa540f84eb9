"""examples/spark_pipeline.py runs end to end and its check passes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

from liftbridge_nats.testing import LocalCluster

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def _run(spark: SparkSession, cluster: LocalCluster, orders: int, *extra: str) -> ModuleType:
    """The example's own main(), on the session's cluster and Spark session: a second
    JVM would cost more than the rest of the Spark tests together. Run by hand (python
    examples/spark_pipeline.py) it starts both itself."""
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    argv = ["--nats", cluster.nats_url, "--brokers", ",".join(cluster.brokers)]
    assert example.main([*argv, "--orders", str(orders), *extra], spark=spark) == 0
    return example


def test_spark_pipeline_example(
    spark: SparkSession, liftbridge_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _run(spark, liftbridge_cluster, 200)
    out = capsys.readouterr().out
    assert "match the commands" in out and "DO NOT MATCH" not in out
    # Every customer that placed an order has a line with its total.
    assert out.count("orders, total") == len(example.expected_totals(example.make_commands(200)))


def test_spark_pipeline_example_streaming(
    spark: SparkSession, liftbridge_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # The streaming mode: two command streams read by one query, stopped after the
    # first half and restarted from its checkpoint for the second.
    example = _run(spark, liftbridge_cluster, 120, "--streaming")
    out = capsys.readouterr().out
    assert "match the commands" in out and "DO NOT MATCH" not in out
    commands = example.make_commands(120)
    half = len(commands) // 2
    # Each run read exactly what was published since the one before: nothing twice.
    assert f"run 1: published {half} commands, the query read {half} and" in out
    rest = len(commands) - half
    assert f"run 2: published {rest} commands, the query read {rest} and" in out
