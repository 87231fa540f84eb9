"""Stream-addressed publishing: partition subjects, partitioners like the Go client's,
and paused partitions resumed instead of silently losing messages."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import pytest
from _publisher_helpers import acked, eventually, read_all, wait_paused
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    Client,
    IncorrectOffsetError,
    InvalidArgumentError,
    KeyPartitioner,
    NoRespondersError,
    NoSuchStreamError,
    Publisher,
    RoundRobinPartitioner,
    partition_subject,
)
from liftbridge_nats.testing import LocalCluster


async def test_key_partitioning_on_three_partitions(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("keys")
    subject = unique_name("subj")
    keys = [b"user-%d" % i for i in range(40)] + [b""]
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(subject, name, partitions=3)
        async with Publisher(nats_client, client=client) as pub:
            for key in keys:
                ack = await pub.publish_to_stream(
                    name, b"v-" + key, key=key, partitioner=KeyPartitioner()
                )
                expected = zlib.crc32(key) % 3  # CRC-32 IEEE, as go-liftbridge picks
                assert ack is not None
                # v1.9.0 puts the stream's subject in partition_subject for every
                # partition; message_subject is the NATS subject the message went to.
                assert ack.partition_subject == subject
                assert ack.message_subject == partition_subject(subject, expected)
                assert ack.partition == expected
            # The same key always lands on the same partition.
            again = await pub.publish_to_stream(
                name, b"again", key=b"user-7", partitioner=KeyPartitioner()
            )
            assert again is not None
            assert again.message_subject == partition_subject(subject, zlib.crc32(b"user-7") % 3)
        placed = {p: await read_all(client, name, p) for p in range(3)}
    for partition, messages in placed.items():
        for msg in messages:
            assert zlib.crc32(msg.key or b"") % 3 == partition
            assert msg.partition == partition and msg.stream == name
    assert sum(len(m) for m in placed.values()) == len(keys) + 1
    assert all(placed.values())  # 41 keys spread over all three partitions


async def test_round_robin_explicit_and_default_partitions(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("rr")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        async with Publisher(nats_client, client=client) as pub:
            rr = RoundRobinPartitioner()
            subjects = []
            for i in range(6):
                ack = await pub.publish_to_stream(name, b"%d" % i, partitioner=rr)
                assert ack is not None
                subjects.append(ack.message_subject)
                assert ack.partition == i % 3
            assert subjects == [name, f"{name}.1", f"{name}.2"] * 2
            explicit = await pub.publish_to_stream(name, b"p2", partition=2)
            assert explicit is not None and explicit.message_subject == f"{name}.2"
            # Neither a partition nor a partitioner: partition 0, as in the Go client.
            default = await pub.publish_to_stream(name, b"p0", key=b"anything")
            assert default is not None and default.message_subject == name
            assert default.partition == 0
            chosen = await pub.publish_to_stream(name, b"fn", partitioner=lambda k, v, n: n - 1)
            assert chosen is not None and chosen.message_subject == f"{name}.2"
            with pytest.raises(InvalidArgumentError, match="partition 3"):
                await pub.publish_to_stream(name, b"x", partition=3)
            with pytest.raises(NoSuchStreamError):
                await pub.publish_to_stream(unique_name("missing"), b"x")
        async with Publisher(nats_client) as no_client:
            with pytest.raises(InvalidArgumentError, match="client"):
                await no_client.publish_to_stream(name, b"x")
            with pytest.raises(InvalidArgumentError, match="client"):
                await no_client.publish_to_stream_async(name, b"x")


async def test_publish_to_stream_async_pipelines_by_stream(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("sasync")
    subject = unique_name("subj")
    keys = [b"k%d" % i for i in range(60)]
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(subject, name, partitions=3)
        async with Publisher(nats_client, client=client) as pub:
            part = KeyPartitioner()
            futures = [
                await pub.publish_to_stream_async(name, b"v-" + key, key=key, partitioner=part)
                for key in keys
            ]
            acks = acked(await asyncio.gather(*futures))
            for key, ack in zip(keys, acks, strict=True):
                assert ack.stream == name and ack.partition == zlib.crc32(key) % 3
                assert ack.message_subject == partition_subject(subject, ack.partition)
            explicit = await pub.publish_to_stream_async(name, b"p2", partition=2)
            last = await explicit
            assert last is not None and last.partition == 2
            with pytest.raises(InvalidArgumentError, match="partition 3"):
                await pub.publish_to_stream_async(name, b"x", partition=3)
            with pytest.raises(NoSuchStreamError):
                await pub.publish_to_stream_async(unique_name("missing"), b"x")
        placed = {p: await read_all(client, name, p) for p in range(3)}
    for partition, messages in placed.items():
        offsets = sorted(a.offset for a in [*acks, last] if a.partition == partition)
        assert [m.offset for m in messages] == offsets
        assert all(m.partition == partition for m in messages)
    assert sum(len(m) for m in placed.values()) == len(keys) + 1


async def test_auto_paused_partition_is_resumed_and_nothing_is_lost(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("pause")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, auto_pause_time=1.0)
        async with Publisher(nats_client, client=client) as pub:
            assert await pub.publish_to_stream(name, b"first") is not None
            await wait_paused(client, liftbridge_cluster, name)
            # A paused partition has no NATS subscriber: a plain publish is not stored,
            # and NATS says so at once instead of the message vanishing silently.
            with pytest.raises(NoRespondersError):
                await pub.publish(name, b"dropped")
            # publish_to_stream resumes the partition and sends the message again.
            ack = await pub.publish_to_stream(name, b"second", timeout=15)
            assert ack is not None and ack.offset == 1
            assert pub.stats.resent >= 1
            third = await pub.publish_to_stream(name, b"third")
            assert third is not None and third.offset == 2
        stored = await read_all(client, name)
    assert [m.value for m in stored] == [b"first", b"second", b"third"]


async def test_publish_to_stream_async_resumes_a_paused_partition_in_the_background(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("apause")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        async with Publisher(nats_client, client=client) as pub:
            assert await (await pub.publish_to_stream_async(name, b"first")) is not None
            await client.pause_stream(name, [0])
            await wait_paused(client, liftbridge_cluster, name, 0)
            # Sent once: the future says "not stored" and the partition is resumed
            # behind it, so that later messages get through.
            with pytest.raises(NoRespondersError):
                await (await pub.publish_to_stream_async(name, b"dropped"))

            async def accepted() -> bool:
                try:
                    await pub.publish(name, b"probe")
                except NoRespondersError:
                    return False
                return True

            await eventually(accepted, within=15)
        # With retry=True the message itself is sent again until the resume lets it in.
        async with Publisher(nats_client, client=client, retry=True) as pub:
            await client.pause_stream(name, [1])
            await wait_paused(client, liftbridge_cluster, name, 1)
            ack = await (await pub.publish_to_stream_async(name, b"second", partition=1))
            assert ack is not None and ack.partition == 1 and ack.offset == 0
            assert pub.stats.no_responders >= 1
        assert [m.value for m in await read_all(client, name, 0)] == [b"first", b"probe"]
        assert [m.value for m in await read_all(client, name, 1)] == [b"second"]


async def test_publish_to_stream_sends_a_refused_message_once(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    # Only "not stored, retry after fresh metadata" (nobody listened) is sent again;
    # a rejection is the server's answer and goes to the caller at once.
    name = unique_name("occ")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, optimistic_concurrency_control=True)
        async with Publisher(nats_client, client=client) as pub:
            ack = await pub.publish_to_stream(name, b"a", expected_offset=0)
            assert ack is not None and ack.offset == 0
            with pytest.raises(IncorrectOffsetError) as info:
                await pub.publish_to_stream(name, b"b", expected_offset=0, timeout=10)
            assert not info.value.retriable and not info.value.maybe_stored
            assert pub.stats.resent == 0 and pub.stats.rejected == 1
        assert [m.value for m in await read_all(client, name)] == [b"a"]


async def test_concurrent_stream_publishes_keep_order_per_key(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("conc")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        async with Publisher(nats_client, client=client) as pub:
            part = KeyPartitioner()

            async def send(key: bytes) -> None:
                for i in range(20):
                    await pub.publish_to_stream(name, b"%d" % i, key=key, partitioner=part)

            await asyncio.gather(*(send(b"k%d" % k) for k in range(6)))
        for p in range(3):
            per_key: dict[bytes, list[int]] = {}
            for msg in await read_all(client, name, p):
                per_key.setdefault(msg.key or b"", []).append(int(msg.value))
            assert all(v == list(range(20)) for v in per_key.values())
