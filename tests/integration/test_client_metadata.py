"""Metadata, routing, cursors and gRPC publishing against real servers."""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

import grpc
import pytest
from _publisher_helpers import read_all

from liftbridge_nats import (
    Ack,
    AckLostError,
    AckPolicy,
    AckTimeoutError,
    BrokerUnavailableError,
    Client,
    CursorsDisabledError,
    IncorrectOffsetError,
    InvalidArgumentError,
    KeyPartitioner,
    NoSuchStreamError,
    ReadonlyPartitionError,
    RoundRobinPartitioner,
    StartPosition,
    StopPosition,
)
from liftbridge_nats._cursors import cursor_partition
from liftbridge_nats._proto import api_pb2, api_pb2_grpc


def test_broker_addresses_parsed() -> None:
    assert Client("127.0.0.1:1, 127.0.0.1:2").brokers == ("127.0.0.1:1", "127.0.0.1:2")
    with pytest.raises(InvalidArgumentError):
        Client("no-port")
    with pytest.raises(InvalidArgumentError):
        Client([])


async def test_unreachable_broker_fails_within_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="reachable"):
        async with Client(["127.0.0.1:1"], timeout=1.5):
            pass
    assert time.monotonic() - started < 5


async def test_metadata_partition_metadata_and_groups(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name, group = unique_name("md"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        for i in range(3):
            await client.publish_to_stream(name, b"%d" % i, partition=1)
        part = await client.fetch_partition_metadata(name, 1)
        assert (part.id, part.leader, part.isr) == (1, "n0", ("n0",))
        assert (part.high_watermark, part.newest_offset) == (2, 2)
        assert part.messages_received.first > 0 and part.messages_received.latest_time is not None
        assert part.pause_changed.first_time is None
        empty = await client.fetch_partition_metadata(name, 0)
        assert (empty.high_watermark, empty.newest_offset) == (-1, -1)
        with pytest.raises(NoSuchStreamError):
            await client.fetch_partition_metadata(name, 7, timeout=2)

        async with client.consumer(group, [name]) as consumer:
            md = await client.fetch_metadata(groups=[group])
            info = md.groups[group]
            assert info.coordinator == "n0" and info.epoch == consumer.epoch
        assert md.streams[name].partition_count == 2
        assert md.broker("n0") is not None and md.partition(name, 1) is not None


async def test_cursors_roundtrip_and_arguments(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("cur")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        assert await client.fetch_cursor("c", name, 0) == -1
        await client.set_cursor("c", name, 0, 5)
        await client.set_cursor("c", name, 1, 7)
        await client.set_cursor("c", name, 0, 6)
        assert await client.fetch_cursor("c", name, 0) == 6
        assert await client.fetch_cursor("c", name, 1) == 7
        assert await client.fetch_cursor("d", name, 1) == -1
        with pytest.raises(InvalidArgumentError):
            await client.set_cursor("", name, 0, 1)
        with pytest.raises(InvalidArgumentError):
            await client.fetch_cursor("c", name, -1)


@pytest.mark.slow
async def test_cursors_land_in_the_hashed_cursors_partition(
    unique_name: Any, liftbridge_cluster_factory: Any
) -> None:
    # With six __cursors partitions, each stored cursor must sit in the partition the
    # client computed (CRC-32 of "<id>,<stream>,<partition>"), which is where the
    # server looks for it too.
    name = unique_name("route")
    async with (
        liftbridge_cluster_factory(
            1, liftbridge_config={"cursors.stream.partitions": 6}
        ) as cluster,
        Client(cluster.brokers) as client,
    ):
        await client.create_stream(name, name, partitions=4)
        expected: dict[int, set[bytes]] = {p: set() for p in range(6)}
        for i in range(6):
            for partition in range(4):
                cursor_id = f"cursor-{i}"
                await client.set_cursor(cursor_id, name, partition, i * 10 + partition)
                where = cursor_partition(cursor_id, name, partition, 6)
                expected[where].add(f"{cursor_id},{name},{partition}".encode())
        for i in range(6):
            got = [await client.fetch_cursor(f"cursor-{i}", name, p) for p in range(4)]
            assert got == [i * 10 + p for p in range(4)]
        assert sum(1 for keys in expected.values() if keys) > 1
        for where, keys in expected.items():
            sub = client.subscribe(
                "__cursors",
                partition=where,
                start_position=StartPosition.EARLIEST,
                stop_position=StopPosition.LATEST,
                resume=True,
            )
            async with sub:
                stored = {m.key async for m in sub}
            assert stored == keys


@pytest.mark.slow
async def test_cursors_disabled_is_explained(
    unique_name: Any, liftbridge_cluster_factory: Any
) -> None:
    async with (
        liftbridge_cluster_factory(
            1, liftbridge_config={"cursors.stream.partitions": None}
        ) as cluster,
        Client(cluster.brokers) as client,
    ):
        name = unique_name("nocur")
        await client.create_stream(name, name)
        with pytest.raises(CursorsDisabledError, match=r"cursors\.stream\.partitions"):
            await client.set_cursor("c", name, 0, 1)


async def test_grpc_publish_variants(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("pub")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        ack = await client.publish_to_stream(
            name, b"v", key=b"k", partition=1, headers={"h": b"1"}, correlation_id="cid-1"
        )
        assert ack is not None
        assert (ack.stream, ack.partition, ack.offset) == (name, 1, 0)
        assert ack.correlation_id == "cid-1"
        assert await client.publish_to_stream(name, b"none", ack_policy=AckPolicy.NONE) is None
        ack = await client.publish(name, b"by-subject", ack_policy=AckPolicy.ALL)
        assert ack is not None and ack.stream == name and ack.partition == 0
        ack = await client.publish(f"{name}.1", b"by-subject-1")
        assert ack is not None and (ack.partition, ack.offset) == (1, 1)

        futures = [
            await client.publish_to_stream_async(name, b"a%d" % i, partition=1) for i in range(50)
        ]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert [a.offset for a in acks if a is not None] == list(range(2, 52))
        assert {a.partition for a in acks if a is not None} == {1}

        with pytest.raises(NoSuchStreamError):
            await client.publish_to_stream(unique_name("missing"), b"x")
        await client.set_stream_readonly(name, partitions=[1])
        with pytest.raises(ReadonlyPartitionError):
            await client.publish_to_stream(name, b"x", partition=1)
        fut = await client.publish_to_stream_async(name, b"x", partition=1)
        with pytest.raises(ReadonlyPartitionError):
            await asyncio.wait_for(fut, 10)

        sub = client.subscribe(
            name,
            partition=1,
            start_position=StartPosition.EARLIEST,
            stop_position=StopPosition.LATEST,
        )
        async with sub:
            msgs = [m async for m in sub]
        assert msgs[0].key == b"k" and msgs[0].headers["h"] == b"1" and len(msgs) == 52


async def test_grpc_publish_to_stream_takes_the_publishers_partitioners(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("gpart")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        keys = [b"k%d" % i for i in range(12)]
        for key in keys:
            ack = await client.publish_to_stream(name, key, key=key, partitioner=KeyPartitioner())
            assert ack is not None and ack.partition == zlib.crc32(key) % 3
        rr = RoundRobinPartitioner()
        futures = [
            await client.publish_to_stream_async(name, b"rr", partitioner=rr) for _ in range(6)
        ]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert [a.partition for a in acks if a is not None] == [0, 1, 2, 0, 1, 2]
        # An explicit partition wins over the partitioner.
        ack = await client.publish_to_stream(name, b"p", partition=2, partitioner=rr)
        assert ack is not None and ack.partition == 2
        with pytest.raises(InvalidArgumentError, match="partitioner chose partition 5"):
            await client.publish_to_stream(name, b"x", partitioner=lambda k, v, n: 5)


async def test_grpc_publish_async_times_out_when_no_ack_comes(
    liftbridge_cluster_factory: Any, unique_name: Any
) -> None:
    cluster = liftbridge_cluster_factory(1)
    await cluster.start()
    name = unique_name("gtimeout")
    async with Client(cluster.brokers) as client:
        await client.create_stream(name, name)
        first = await client.publish_to_stream_async(name, b"first", timeout=10)
        assert await first is not None
        # Alive, sockets open, answering nothing; and silent before the message is
        # written: pause_node returns once every thread of the node is stopped (a node
        # still running acks the message: see the test below).
        await cluster.pause_node(0)
        try:
            started = time.monotonic()
            fut = await client.publish_to_stream_async(name, b"unanswered", timeout=0.5)
            with pytest.raises(AckTimeoutError, match="may or may not have been stored") as caught:
                await asyncio.wait_for(fut, 10)
            assert caught.value.maybe_stored
            assert 0.4 < time.monotonic() - started < 5
        finally:
            await cluster.resume_node(0)
        # The stream itself is still usable: the late ack is dropped, new ones match.
        after = await client.publish_to_stream_async(name, b"after", timeout=10)
        ack = await after
        assert ack is not None and ack.offset == 2
        # "May or may not": it was written, and the node stored it once it ran again.
        stored = [m.value for m in await read_all(client, name)]
        assert stored == [b"first", b"unanswered", b"after"]


def _wait_stored(broker: str, stream: str, offset: int, within: float = 10.0) -> None:
    """Block (the event loop too) until ``offset`` of partition 0 is written."""
    deadline = time.monotonic() + within
    with grpc.insecure_channel(broker) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=0)
        while stub.FetchPartitionMetadata(request, timeout=5).metadata.newestOffset < offset:
            if time.monotonic() > deadline:
                raise AssertionError(f"offset {offset} of {stream!r} not written in {within} s")
            time.sleep(0.005)


async def test_grpc_publish_async_acked_before_the_pause_took_effect_is_that_ack(
    liftbridge_cluster_factory: Any, unique_name: Any
) -> None:
    # What the test above met on a busy machine when pause_node returned on the signal
    # alone: the node, not yet stopped, stored and acked the message, and the future
    # gave that ack (the SDK's promise kept: an Ack means stored). Here the
    # same interleaving is arranged: the node acks before it stops, and the client
    # reads the ack only once the node is paused.
    cluster = liftbridge_cluster_factory(1)
    await cluster.start()
    name = unique_name("gacked")
    async with Client(cluster.brokers) as client:
        await client.create_stream(name, name)
        first = await client.publish_to_stream_async(name, b"first", timeout=10)
        assert await first is not None
        fut = await client.publish_to_stream_async(
            name, b"acked", timeout=0.5, correlation_id="acked-before-the-pause"
        )
        # Held meanwhile, the event loop reads no ack: the node stores the message, sends
        # its ack (well within the 0.2 s after it is stored), and only then stops.
        _wait_stored(cluster.brokers[0], name, 1)
        time.sleep(0.2)  # noqa: ASYNC251  # the loop held on purpose, as a busy machine does
        await cluster.pause_node(0)
        try:
            result = await asyncio.wait_for(fut, 10)
        finally:
            await cluster.resume_node(0)
        assert isinstance(result, Ack), result
        assert result.offset == 1 and result.stream == name
        assert result.correlation_id == "acked-before-the-pause"
        assert [m.value for m in await read_all(client, name)] == [b"first", b"acked"]


async def test_publish_async_occ_error(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("occa")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, optimistic_concurrency_control=True)
        first = await client.publish_to_stream_async(name, b"a", expected_offset=0)
        assert (await asyncio.wait_for(first, 10)) is not None
        stale = await client.publish_to_stream_async(name, b"b", expected_offset=0)
        with pytest.raises(IncorrectOffsetError):
            await asyncio.wait_for(stale, 10)


async def test_grpc_publish_async_to_a_node_that_stopped_reading_ends_by_each_deadline(
    liftbridge_cluster_factory: Any, unique_name: Any
) -> None:
    # A paused node stops reading the PublishAsync stream: once HTTP/2's window is full
    # a write waits for it forever. Every publish still ends by its deadline, with a
    # typed error, and the call itself returns by then.
    cluster = liftbridge_cluster_factory(1)
    await cluster.start()
    name = unique_name("gstall")
    async with Client(cluster.brokers) as client:
        await client.create_stream(name, name)
        assert await (await client.publish_to_stream_async(name, b"first", timeout=10))
        await cluster.pause_node(0)
        try:
            started = time.monotonic()
            calls = [  # 40 x 16 KiB at once: well over the stream's window
                client.publish_to_stream_async(name, b"%d" % i * 16384, timeout=0.5)
                for i in range(40)
            ]
            futures = await asyncio.wait_for(asyncio.gather(*calls), 5)
            returned = time.monotonic() - started
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            await cluster.resume_node(0)
        assert returned < 1.5, returned  # every call returned by its deadline
        assert all(isinstance(r, AckTimeoutError | AckLostError) for r in results), results
        # Those that waited behind the stalled write were never written, and say so.
        assert any(isinstance(r, AckTimeoutError) and not r.maybe_stored for r in results)
        # Once the node reads again, so does the stream.
        ack = await (await client.publish_to_stream_async(name, b"after", timeout=10))
        assert isinstance(ack, Ack)
