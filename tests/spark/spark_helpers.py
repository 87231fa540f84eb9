"""Helpers of the Spark tests: streams, test data and reading back with the SDK alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from liftbridge_nats.client import Client
from liftbridge_nats.messages import Ack, AckPolicy, Message, StartPosition, StopPosition


@dataclass(frozen=True)
class Record:
    """A message to publish in a test, and what it must read back as."""

    partition: int
    value: bytes
    key: bytes | None = None
    headers: Mapping[str, bytes] = field(default_factory=dict)


def run(coro: Any) -> Any:
    """Run a coroutine from a synchronous Spark test."""
    return asyncio.run(coro)


async def _create(brokers: Sequence[str], stream: str, partitions: int) -> None:
    async with Client(list(brokers)) as client:
        await client.create_stream(stream, stream, partitions=partitions)


def create_stream(cluster: Any, stream: str, partitions: int = 3) -> None:
    """Create ``stream`` (subject = name) with ``partitions`` partitions."""
    run(_create(cluster.brokers, stream, partitions))


async def _publish(brokers: Sequence[str], stream: str, records: Sequence[Record]) -> list[Ack]:
    async with Client(list(brokers)) as client:
        futs = [
            await client.publish_async(
                stream,
                r.value,
                key=r.key,
                partition=r.partition,
                headers=r.headers,
                ack_policy=AckPolicy.ALL,
            )
            for r in records
        ]
        acks = await asyncio.gather(*futs)
    out = [a for a in acks if a is not None]
    assert len(out) == len(records)
    return out


def publish(cluster: Any, stream: str, records: Sequence[Record]) -> list[Ack]:
    """Publish test records over gRPC (independent of the sink under test)."""
    return run(_publish(cluster.brokers, stream, records))


async def _read_all(brokers: Sequence[str], stream: str) -> list[Message]:
    out: list[Message] = []
    async with Client(list(brokers)) as client:
        info = await client.stream_info(stream, refresh=True)
        for p in sorted(info.partitions):
            hw = (await client.fetch_partition_metadata(stream, p)).high_watermark
            if hw < 0:
                continue
            async with client.subscribe(
                stream,
                partition=p,
                start_position=StartPosition.EARLIEST,
                stop_position=StopPosition.OFFSET,
                stop_offset=hw,
            ) as sub:
                out.extend([m async for m in sub])
    return out


def read_all(cluster: Any, stream: str) -> list[Message]:
    """Every message of every partition, read with the SDK alone (no Spark)."""
    return run(_read_all(cluster.brokers, stream))


def reader(spark: Any, cluster: Any, stream: str, **options: str) -> Any:
    """``spark.read.format("liftbridge")`` with brokers and stream set."""
    r = spark.read.format("liftbridge").option("brokers", ",".join(cluster.brokers))
    r = r.option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r
