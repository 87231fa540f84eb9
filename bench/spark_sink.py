"""Spark sink throughput beside one Python Publisher, on the same data in the same run.

``run(cluster, rows)`` publishes ``rows`` values of 100 bytes twice, each time to a
fresh stream of two partitions with ALL acks: once with ``df.write.format("liftbridge")``
from a ``local[2]`` session (two tasks, each with its own Publisher), once with a single
Python Publisher pipelining ``publish_nowait`` in this process. It returns both rates
in rows per second. The DataFrame is cached and counted first and a small warm-up
write starts Spark's Python workers, so the timed write measures the sink, not Spark's
start-up. ``python -m bench.spark_sink`` runs it on its own LocalCluster, prints the
figures and writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from liftbridge_nats.testing import LocalCluster

VALUE_BYTES = 100
PARTITIONS = 2


class Figures(TypedDict):
    """What :func:`run` measured, and under which conditions (written as JSON)."""

    rows: int
    value_bytes: int
    partitions: int
    ack_policy: str
    spark_master: str
    spark_tasks: int
    spark_sink_seconds: float
    spark_sink_rows_per_s: int
    publisher_seconds: float
    publisher_rows_per_s: int
    spark_to_publisher_ratio: float
    pyspark: str
    python: str
    cpus: int | None


def _value(i: int) -> bytes:
    return str(i).rjust(VALUE_BYTES, "x").encode()


async def _create(brokers: list[str], *names: str) -> None:
    from liftbridge_nats.client import Client

    async with Client(brokers) as client:
        for name in names:
            await client.create_stream(name, name, partitions=PARTITIONS)


async def _publisher_rate(nats_url: str, stream: str, rows: int) -> float:
    """Seconds for one Publisher to get ``rows`` ALL acks, round-robin over partitions."""
    import nats

    from liftbridge_nats.messages import AckPolicy
    from liftbridge_nats.partitioning import partition_subject
    from liftbridge_nats.publisher import Publisher

    subjects = [partition_subject(stream, p) for p in range(PARTITIONS)]
    values = [_value(i) for i in range(rows)]
    nc = await nats.connect(nats_url)
    try:
        async with Publisher(nc, ack_timeout=30.0) as pub:
            started = time.perf_counter()
            futures = [
                await pub.publish_nowait(subjects[i % PARTITIONS], v, ack_policy=AckPolicy.ALL)
                for i, v in enumerate(values)
            ]
            await asyncio.gather(*futures)
            return time.perf_counter() - started
    finally:
        await nc.close()


def _session() -> tuple[SparkSession, bool]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from liftbridge_nats.spark import LiftbridgeDataSource

    active = SparkSession.getActiveSession()
    if active is not None:
        active.dataSource.register(LiftbridgeDataSource)
        return active, False
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("liftbridge-bench-spark-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LiftbridgeDataSource)
    return spark, True


def _write(df: DataFrame, cluster: LocalCluster, stream: str) -> None:
    (
        df.write.format("liftbridge")
        .mode("append")
        .option("nats_url", cluster.nats_url)
        .option("brokers", ",".join(cluster.brokers))
        .option("stream", stream)
        .option("ack_policy", "ALL")
        .option("ack_timeout", "30")
        .save()
    )


def run(cluster: LocalCluster, rows: int) -> Figures:
    """Measure the Spark sink and a single Publisher on ``rows`` rows; return the figures."""
    import pyspark

    tag = uuid.uuid4().hex[:6]
    warm, sink, direct = f"spark-warm-{tag}", f"spark-sink-{tag}", f"spark-pub-{tag}"
    brokers = list(cluster.brokers)
    asyncio.run(_create(brokers, warm, sink, direct))

    spark, owned = _session()
    try:
        df = spark.range(rows, numPartitions=2).selectExpr(
            f"cast(lpad(cast(id as string), {VALUE_BYTES}, 'x') as binary) AS value"
        )
        df = df.cache()
        df.count()
        _write(df.limit(200), cluster, warm)
        started = time.perf_counter()
        _write(df, cluster, sink)
        spark_seconds = time.perf_counter() - started
        df.unpersist()
    finally:
        if owned:
            spark.stop()

    publisher_seconds = asyncio.run(_publisher_rate(cluster.nats_url, direct, rows))
    spark_rate = rows / spark_seconds
    publisher_rate = rows / publisher_seconds
    return {
        "rows": rows,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "ack_policy": "ALL",
        "spark_master": "local[2]",
        "spark_tasks": 2,
        "spark_sink_seconds": round(spark_seconds, 3),
        "spark_sink_rows_per_s": round(spark_rate),
        "publisher_seconds": round(publisher_seconds, 3),
        "publisher_rows_per_s": round(publisher_rate),
        "spark_to_publisher_ratio": round(spark_rate / publisher_rate, 3),
        "pyspark": pyspark.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run on a private LocalCluster, print both rates, write JSON."""
    parser = argparse.ArgumentParser(description="Spark sink rows/s vs one Python Publisher")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=Path("spark_sink.json"))
    args = parser.parse_args(argv)

    from liftbridge_nats.testing import LocalCluster

    with LocalCluster() as cluster:
        result = run(cluster, args.rows)
    print(
        f"spark sink (local[2], ALL acks): {result['spark_sink_rows_per_s']:>9,} rows/s "
        f"({result['spark_sink_seconds']} s)"
    )
    print(
        f"single Python Publisher (ALL):   {result['publisher_rows_per_s']:>9,} rows/s "
        f"({result['publisher_seconds']} s)"
    )
    print(f"ratio spark/publisher: {result['spark_to_publisher_ratio']}")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
