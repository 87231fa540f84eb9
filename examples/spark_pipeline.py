"""A CQRS-style pipeline: commands in Liftbridge, a Spark projection, totals back in Liftbridge.

1. Order commands (JSON ``PlaceOrder`` / ``CancelOrder``) are published with the
   NATS-native Publisher to the ``orders`` stream (3 partitions, keyed by customer).
2. Spark reads the stream with the ``liftbridge`` source, keeps the orders that were
   not cancelled, and aggregates a total and a count per customer: the read model.
3. Spark writes the read model to the ``order-totals`` stream with the ``liftbridge``
   sink (ALL acks, keyed by customer).
4. The example reads ``order-totals`` back with Spark and checks it against totals
   computed here in plain Python from the same commands.

Run it as ``python examples/spark_pipeline.py``: it starts its own NATS + Liftbridge
(LocalCluster) unless ``--nats URL --brokers H:P[,H:P]`` point at a running cluster
(then the stream names get a unique suffix). Exit status 0 means the check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, TypedDict

import nats

from liftbridge_nats.client import Client
from liftbridge_nats.messages import AckPolicy
from liftbridge_nats.partitioning import KeyPartitioner
from liftbridge_nats.publisher import Publisher

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


Command = PlaceOrder | CancelOrder


class CustomerTotal(TypedDict):
    """A row of the read model, as JSON in ``order-totals``."""

    customer: str
    total_cents: int
    orders: int


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


async def setup_and_publish(
    nats_url: str, brokers: list[str], orders: str, totals: str, commands: list[Command]
) -> None:
    """Create both streams and publish the commands, keyed by customer, with ALL acks."""
    async with Client(brokers) as client:
        await client.create_stream(orders, orders, partitions=3)
        await client.create_stream(totals, totals, partitions=1)
        nc = await nats.connect(nats_url)
        try:
            async with Publisher(nc, client=client) as pub:
                # Same key, same partition: a customer's commands stay in one partition.
                by_customer = KeyPartitioner()
                await asyncio.gather(
                    *(
                        pub.publish_to_stream(
                            orders,
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


def run_pipeline(
    spark: SparkSession, nats_url: str, brokers: list[str], orders: str, totals: str
) -> DataFrame:
    """Steps 2 and 3: read commands, project totals per customer, write them."""
    from pyspark.sql import functions as F

    command = "type string, order_id string, customer string, amount_cents long"
    commands = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(brokers))
        .option("stream", orders)
        .load()
        .select(F.from_json(F.col("value").cast("string"), command).alias("c"))
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
        .option("stream", totals)
        .option("ack_policy", "ALL")
        .save()
    )
    return read_model


def read_totals(spark: SparkSession, brokers: list[str], totals: str) -> dict[str, tuple[int, int]]:
    """Step 4: the read model as stored in Liftbridge."""
    rows = (
        spark.read.format("liftbridge")
        .option("brokers", ",".join(brokers))
        .option("stream", totals)
        .load()
        .select("value")
        .collect()
    )
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        doc: CustomerTotal = json.loads(row.value)
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
    """Run the pipeline end to end; 0 when the stored totals match the commands.

    ``spark``: an existing session to use (and leave running), e.g. a test's.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", help="NATS URL of a running cluster (with --brokers)")
    parser.add_argument("--brokers", help="Liftbridge gRPC addresses, host:port[,host:port]")
    parser.add_argument("--orders", type=int, default=500, help="PlaceOrder commands to publish")
    args = parser.parse_args(argv)
    if bool(args.nats) != bool(args.brokers):
        parser.error("give both --nats and --brokers, or neither")

    commands = make_commands(args.orders)
    with servers(args) as (nats_url, brokers, suffix):
        orders, totals = "orders" + suffix, "order-totals" + suffix
        started = time.monotonic()
        asyncio.run(setup_and_publish(nats_url, brokers, orders, totals, commands))
        print(f"published {len(commands)} commands to {orders!r} (3 partitions)")
        session = spark or spark_session()
        try:
            run_pipeline(session, nats_url, brokers, orders, totals)
            stored = read_totals(session, brokers, totals)
        finally:
            if spark is None:
                session.stop()
        want = expected_totals(commands)
        for customer in sorted(stored):
            total, count = stored[customer]
            print(f"  {customer}: {count:4d} orders, total {total / 100:12.2f}")
        ok = stored == want
        print(
            f"{len(stored)} totals in {totals!r}, "
            f"{'match' if ok else 'DO NOT MATCH'} the commands "
            f"({time.monotonic() - started:.1f} s)"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
