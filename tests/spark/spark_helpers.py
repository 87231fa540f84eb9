"""Helpers of the Spark tests: streams, test data and reading back with the SDK alone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from liftbridge_nats import Ack, AckPolicy, Client, Message, StartPosition, StopPosition

T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """A message to publish in a test, and what it must read back as."""

    partition: int
    value: bytes
    key: bytes | None = None
    headers: Mapping[str, bytes] = field(default_factory=dict)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from a synchronous Spark test."""
    return asyncio.run(coro)


async def _create(brokers: Sequence[str], stream: str, partitions: int, **options: Any) -> None:
    async with Client(list(brokers)) as client:
        await client.create_stream(stream, stream, partitions=partitions, **options)


def create_stream(cluster: Any, stream: str, partitions: int = 3, **options: Any) -> None:
    """Create ``stream`` (subject = name) with ``partitions`` partitions and stream options."""
    run(_create(cluster.brokers, stream, partitions, **options))


async def _delete(brokers: Sequence[str], stream: str) -> None:
    async with Client(list(brokers)) as client:
        await client.delete_stream(stream)


def delete_stream(cluster: Any, stream: str) -> None:
    """Delete ``stream``."""
    run(_delete(cluster.brokers, stream))


async def _publish(brokers: Sequence[str], stream: str, records: Sequence[Record]) -> list[Ack]:
    async with Client(list(brokers)) as client:
        futs = [
            await client.publish_to_stream_async(
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


async def _stored(brokers: Sequence[str], stream: str, wait: float) -> list[int]:
    async with Client(list(brokers)) as client:
        hw = (await client.fetch_partition_metadata(stream, 0)).high_watermark
        if hw < 0:
            return []
        out: list[int] = []
        sub = client.subscribe(
            stream,
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.OFFSET,
            stop_offset=hw,
        )
        # A partition whose messages were all removed answers by waiting for the next.
        with contextlib.suppress(TimeoutError):
            async with sub, asyncio.timeout(wait):
                out.extend([m.offset async for m in sub])
        return out


def stored_offsets(cluster: Any, stream: str, wait: float = 3.0) -> list[int]:
    """The offsets partition 0 of ``stream`` still holds, read with the SDK alone."""
    return run(_stored(cluster.brokers, stream, wait))


def wait_until_removed(
    cluster: Any, stream: str, fewer_than: int, timeout: float = 30.0
) -> list[int]:
    """Wait until retention or compaction left fewer than ``fewer_than`` messages in
    partition 0 of ``stream`` and the count is stable; return the offsets still stored."""
    deadline = time.monotonic() + timeout
    last: list[int] | None = None
    while True:
        offsets = stored_offsets(cluster, stream)
        if len(offsets) < fewer_than and offsets == last:
            return offsets
        if time.monotonic() > deadline:
            raise AssertionError(f"{stream}: {len(offsets)} messages after {timeout} s")
        last = offsets
        time.sleep(1.0)


def reader(spark: Any, cluster: Any, stream: str, **options: str) -> Any:
    """``spark.read.format("liftbridge")`` with brokers and stream set."""
    r = spark.read.format("liftbridge").option("brokers", ",".join(cluster.brokers))
    r = r.option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r
