"""examples/spark_pipeline.py runs end to end and its check passes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from liftbridge_nats.testing import LocalCluster

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def test_spark_pipeline_example(
    spark: SparkSession, liftbridge_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # The example's own main(), on the session's cluster and Spark session: a second
    # JVM would cost more than the rest of the Spark tests together. Run by hand
    # (python examples/spark_pipeline.py) it starts both itself.
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    argv = [
        "--nats",
        liftbridge_cluster.nats_url,
        "--brokers",
        ",".join(liftbridge_cluster.brokers),
        "--orders",
        "200",
    ]
    assert example.main(argv, spark=spark) == 0
    out = capsys.readouterr().out
    assert "match the commands" in out and "DO NOT MATCH" not in out
    # Every customer that placed an order has a line with its total.
    assert out.count("orders, total") == len(example.expected_totals(example.make_commands(200)))
