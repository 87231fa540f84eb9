"""A Spark driver program for the restart test: liftbridge streams to JSON files.

Run as its own process (``python streaming_driver.py --master spark://... ...``) so
that a test can kill it, driver JVM and all, in the middle of a micro-batch and then
start it again on the same checkpoint. ``--available-now`` reads what is stored and
exits (status 0 on success); otherwise it runs until killed. The JSON file sink is
exactly-once: a batch whose commit was not recorded is written again, and readers of
the output directory see each batch once.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the query; 0 when an ``--available-now`` run ends without error."""
    p = argparse.ArgumentParser()
    p.add_argument("--master", required=True)
    p.add_argument("--brokers", required=True)
    p.add_argument("--streams", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-offsets-per-trigger", default="40")
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from liftbridge_nats.spark import LiftbridgeDataSource

    spark = (
        SparkSession.builder.master(args.master)
        .appName("liftbridge-restart-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.cores.max", "2")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LiftbridgeDataSource)
    stream = (
        spark.readStream.format("liftbridge")
        .option("brokers", args.brokers)
        .option("streams", args.streams)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load()
        .selectExpr("stream", "partition", "offset", "CAST(value AS STRING) AS value")
    )
    writer = (
        stream.writeStream.format("json")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="0 seconds").start()
    print("query started", flush=True)
    query.awaitTermination()
    failed = query.exception()
    if failed is not None:
        print(f"query failed: {failed}", file=sys.stderr, flush=True)
    spark.stop()
    return 1 if failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
