"""A CQRS-style pipeline: commands in Liftbridge, a Spark projection, results back in Liftbridge.

1. Order commands (JSON) are published with the NATS-native Publisher, keyed by
   customer: ``PlaceOrder`` to the ``orders`` stream (3 partitions), ``CancelOrder``
   to the ``cancellations`` stream (2 partitions).
2. Spark reads both streams at once with the ``liftbridge`` source (``streams``).

Batch (the default): Spark keeps the orders that were not cancelled and aggregates
a total and a count per customer (the read model), writes it to ``order-totals``
with the ``liftbridge`` sink (ALL acks, keyed by customer), reads it back and checks
it against totals computed here in plain Python from the same commands.

Streaming (``--streaming``): a Structured Streaming query turns every command into a
ledger entry (an order adds its amount, a cancellation takes it back) and writes the
entries to ``order-ledger``. Its offsets live in a checkpoint (``--checkpoint``, a
temporary directory by default), so the query can be stopped and started again and
carries on where it stopped: the example publishes half of the commands, runs the
query until it has read everything (``Trigger.AvailableNow``), publishes the rest,
runs the query again from the checkpoint, and checks that the ledger adds up to the
same totals. The sink delivers at least once (a retried task publishes its rows
again), so the check counts each command once, by its id.

Run it as ``python examples/spark_pipeline.py [--streaming]``: it starts its own NATS
+ Liftbridge (LocalCluster) unless ``--nats URL --brokers H:P[,H:P]`` point at a
running cluster (then the stream names get a unique suffix). Exit status 0 means the
check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, TypedDict

import nats

from liftbridge_nats import AckPolicy, Client, KeyPartitioner, Publisher

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CUSTOMERS = [f"customer-{i:02d}" for i in range(12)]


class PlaceOrder(TypedDict):
    type: Literal["PlaceOrder"]
    order_id: str
    customer: str
    amount_cents: int


class CancelOrder(TypedDict):
    type: Literal["CancelOrder"]
    order_id: str
    customer: str
    amount_cents: int


Command = PlaceOrder | CancelOrder


class CustomerTotal(TypedDict):
    """A row of the read model, as JSON in ``order-totals``."""

    customer: str
    total_cents: int
    orders: int


class LedgerEntry(TypedDict):
    """A row of the streaming projection, as JSON in ``order-ledger``."""

    order_id: str
    type: str
    customer: str
    delta_cents: int
    delta_orders: int


class Streams(TypedDict):
    """The names of the example's streams (with the run's suffix)."""

    orders: str
    cancellations: str
    totals: str
    ledger: str


def stream_names(suffix: str) -> Streams:
    """The example's streams, each name followed by ``suffix``."""
    return {
        "orders": "orders" + suffix,
        "cancellations": "cancellations" + suffix,
        "totals": "order-totals" + suffix,
        "ledger": "order-ledger" + suffix,
    }


def make_commands(n: int, seed: int = 7) -> list[Command]:
    """``n`` PlaceOrder commands, and a CancelOrder for about one order in eight."""
    rng = random.Random(seed)
    commands: list[Command] = []
    for i in range(n):
        order: PlaceOrder = {
            "type": "PlaceOrder",
            "order_id": f"o-{i}",
            "customer": rng.choice(CUSTOMERS),
            "amount_cents": rng.randrange(100, 50_000),
        }
        commands.append(order)
        if rng.random() < 0.125:
            commands.append(
                {
                    "type": "CancelOrder",
                    "order_id": order["order_id"],
                    "customer": order["customer"],
                    "amount_cents": order["amount_cents"],
                }
            )
    return commands


def expected_totals(commands: list[Command]) -> dict[str, tuple[int, int]]:
    """The read model computed without Spark: customer -> (total cents, orders)."""
    cancelled = {c["order_id"] for c in commands if c["type"] == "CancelOrder"}
    totals: dict[str, tuple[int, int]] = {}
    for c in commands:
        if c["type"] == "PlaceOrder" and c["order_id"] not in cancelled:
            total, count = totals.get(c["customer"], (0, 0))
            totals[c["customer"]] = (total + c["amount_cents"], count + 1)
    return totals


async def create_streams(brokers: list[str], names: Streams) -> None:
    """Create the command streams and the two output streams."""
    async with Client(brokers) as client:
        await client.create_stream(names["orders"], names["orders"], partitions=3)
        await client.create_stream(names["cancellations"], names["cancellations"], partitions=2)
        await client.create_stream(names["totals"], names["totals"], partitions=1)
        await client.create_stream(names["ledger"], names["ledger"], partitions=2)


async def publish_commands(
    nats_url: str, brokers: list[str], names: Streams, commands: list[Command]
) -> None:
    """Publish orders and cancellations to their streams, keyed by customer, ALL acks."""
    async with Client(brokers) as client:
        nc = await nats.connect(nats_url)
        try:
            async with Publisher(nc, client=client) as pub:
                # Same key, same partition: a customer's commands stay in one partition.
                by_customer = KeyPartitioner()
                await asyncio.gather(
                    *(
                        pub.publish_to_stream(
                            names["orders" if c["type"] == "PlaceOrder" else "cancellations"],
                            json.dumps(c).encode(),
                            key=c["customer"].encode(),
                            partitioner=by_customer,
                            headers={"command": c["type"].encode()},
                            ack_policy=AckPolicy.ALL,
                        )
                        for c in commands
                    )
                )
        finally:
            await nc.close()


@contextmanager
def servers(args: argparse.Namespace) -> Iterator[tuple[str, list[str], str]]:
    """The cluster to use: the one given on the command line, or a LocalCluster."""
    if args.nats and args.brokers:
        yield args.nats, args.brokers.split(","), "-" + uuid.uuid4().hex[:6]
        return
    from liftbridge_nats.testing import LocalCluster

    with LocalCluster() as cluster:
        yield cluster.nats_url, list(cluster.brokers), ""


COMMAND_SCHEMA = "type string, order_id string, customer string, amount_cents long"


def run_pipeline(
    spark: SparkSession, nats_url: str, brokers: list[str], names: Streams
) -> DataFrame:
    """Batch: read both command streams, project totals per customer, write them."""
    from pyspark.sql import functions as F

    commands = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(brokers))
        .option("streams", f"{names['orders']},{names['cancellations']}")
        .load()
        .select(F.from_json(F.col("value").cast("string"), COMMAND_SCHEMA).alias("c"))
        .select("c.*")
    )
    cancelled = commands.where("type = 'CancelOrder'").select("order_id")
    read_model = (
        commands.where("type = 'PlaceOrder'")
        .join(cancelled, "order_id", "left_anti")
        .groupBy("customer")
        .agg(F.sum("amount_cents").alias("total_cents"), F.count("*").alias("orders"))
    )
    (
        read_model.select(
            F.col("customer").cast("binary").alias("key"),
            F.to_json(F.struct("customer", "total_cents", "orders")).alias("value"),
        )
        .write.format("liftbridge")
        .mode("append")
        .option("nats_url", nats_url)
        .option("brokers", ",".join(brokers))
        .option("stream", names["totals"])
        .option("ack_policy", "ALL")
        .save()
    )
    return read_model


def run_streaming(
    spark: SparkSession, nats_url: str, brokers: list[str], names: Streams, checkpoint: str
) -> int:
    """Streaming: every command read since the checkpoint becomes a ledger entry.

    Runs until everything stored when it starts is read (``Trigger.AvailableNow``),
    then stops; the next run goes on from the checkpoint. Returns how many commands
    this run read.
    """
    from pyspark.sql import functions as F

    commands = (
        spark.readStream.format("liftbridge")
        .option("brokers", ",".join(brokers))
        .option("streams", f"{names['orders']},{names['cancellations']}")
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), COMMAND_SCHEMA).alias("c"))
        .select("c.*")
    )
    placed = F.col("type") == "PlaceOrder"
    entries = commands.select(
        F.col("customer").cast("binary").alias("key"),
        F.to_json(
            F.struct(
                "order_id",
                "type",
                "customer",
                F.when(placed, F.col("amount_cents"))
                .otherwise(-F.col("amount_cents"))
                .alias("delta_cents"),
                F.when(placed, 1).otherwise(-1).alias("delta_orders"),
            )
        ).alias("value"),
    )
    query = (
        entries.writeStream.format("liftbridge")
        .option("nats_url", nats_url)
        .option("brokers", ",".join(brokers))
        .option("stream", names["ledger"])
        .option("ack_policy", "ALL")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


def stored_values(spark: SparkSession, brokers: list[str], stream: str) -> list[bytes]:
    """Every value stored in ``stream``, read with the ``liftbridge`` source."""
    rows = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(brokers))
        .option("stream", stream)
        .load()
        .select("value")
        .collect()
    )
    return [bytes(row.value) for row in rows]


def read_ledger(spark: SparkSession, brokers: list[str], ledger: str) -> dict[str, tuple[int, int]]:
    """Totals per customer from the ledger, each command counted once (by its id)."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, tuple[int, int]] = {}
    for value in stored_values(spark, brokers, ledger):
        entry: LedgerEntry = json.loads(value)
        command = (entry["order_id"], entry["type"])
        if command in seen:
            continue  # delivered again by a retried task: at-least-once
        seen.add(command)
        total, count = out.get(entry["customer"], (0, 0))
        out[entry["customer"]] = (total + entry["delta_cents"], count + entry["delta_orders"])
    return {c: t for c, t in out.items() if t[1]}


def read_totals(spark: SparkSession, brokers: list[str], totals: str) -> dict[str, tuple[int, int]]:
    """The read model as stored in Liftbridge."""
    out: dict[str, tuple[int, int]] = {}
    for value in stored_values(spark, brokers, totals):
        doc: CustomerTotal = json.loads(value)
        out[doc["customer"]] = (doc["total_cents"], doc["orders"])
    return out


def spark_session() -> SparkSession:
    """A small local Spark session with the ``liftbridge`` source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from liftbridge_nats.spark import LiftbridgeDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("liftbridge-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LiftbridgeDataSource)
    return spark


def main(argv: list[str] | None = None, *, spark: SparkSession | None = None) -> int:
    """Run the pipeline end to end; 0 when the stored results match the commands.

    ``spark``: an existing session to use (and leave running), e.g. a test's.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", help="NATS URL of a running cluster (with --brokers)")
    parser.add_argument("--brokers", help="Liftbridge gRPC addresses, host:port[,host:port]")
    parser.add_argument("--orders", type=int, default=500, help="PlaceOrder commands to publish")
    parser.add_argument(
        "--streaming", action="store_true", help="the streaming ledger, stopped and restarted"
    )
    parser.add_argument("--checkpoint", help="the streaming query's checkpoint directory")
    args = parser.parse_args(argv)
    if bool(args.nats) != bool(args.brokers):
        parser.error("give both --nats and --brokers, or neither")

    commands = make_commands(args.orders)
    with servers(args) as (nats_url, brokers, suffix):
        names = stream_names(suffix)
        started = time.monotonic()
        asyncio.run(create_streams(brokers, names))
        session = spark or spark_session()
        try:
            if args.streaming:
                stored = _streaming(session, nats_url, brokers, names, commands, args.checkpoint)
                where = names["ledger"]
            else:
                asyncio.run(publish_commands(nats_url, brokers, names, commands))
                print(
                    f"published {len(commands)} commands to {names['orders']!r} and "
                    f"{names['cancellations']!r}"
                )
                run_pipeline(session, nats_url, brokers, names)
                stored = read_totals(session, brokers, names["totals"])
                where = names["totals"]
        finally:
            if spark is None:
                session.stop()
        want = expected_totals(commands)
        for customer in sorted(stored):
            total, count = stored[customer]
            print(f"  {customer}: {count:4d} orders, total {total / 100:12.2f}")
        ok = stored == want
        print(
            f"{len(stored)} totals from {where!r}, "
            f"{'match' if ok else 'DO NOT MATCH'} the commands "
            f"({time.monotonic() - started:.1f} s)"
        )
        return 0 if ok else 1


def _streaming(
    spark: SparkSession,
    nats_url: str,
    brokers: list[str],
    names: Streams,
    commands: list[Command],
    checkpoint: str | None,
) -> dict[str, tuple[int, int]]:
    """Publish half, run the query, publish the rest, run it again from its checkpoint."""
    half = len(commands) // 2
    with tempfile.TemporaryDirectory(prefix="spark-pipeline-") as scratch:
        where = checkpoint or os.path.join(scratch, "checkpoint")
        for part, batch in enumerate((commands[:half], commands[half:]), 1):
            asyncio.run(publish_commands(nats_url, brokers, names, batch))
            read = run_streaming(spark, nats_url, brokers, names, where)
            print(
                f"run {part}: published {len(batch)} commands, the query read {read} "
                f"and stopped (checkpoint {where})"
            )
    return read_ledger(spark, brokers, names["ledger"])


if __name__ == "__main__":
    sys.exit(main())
