"""Client stream administration against real servers: every create_stream option shows
up in metadata or in behaviour; pause, resume and readonly; typed errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    REPLICATION_MAX,
    AckPolicy,
    BadRequestError,
    Client,
    IncorrectOffsetError,
    Message,
    NoSuchStreamError,
    ReadonlyPartitionError,
    RpcError,
    StartPosition,
    StopPosition,
    StreamExistsError,
    wire,
)
from liftbridge_nats.testing import LocalCluster


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 15.0) -> None:
    """Poll ``check`` until it holds; fail with a clear message otherwise."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.2)


async def read_all(client: Client, stream: str, partition: int = 0) -> list[Message]:
    """Every retained message of a partition, oldest first (empty when there are none)."""
    sub = client.subscribe(
        stream,
        partition=partition,
        start_position=StartPosition.EARLIEST,
        stop_position=StopPosition.LATEST,
    )
    async with sub:
        return [msg async for msg in sub]


async def test_create_stream_metadata_and_exists(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("s")
    before = time.time_ns()
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        md = await client.fetch_metadata()
        info = md.streams[name]
        assert info.subject == name
        assert sorted(info.partitions) == [0, 1, 2]
        assert before - 5_000_000_000 <= info.creation_timestamp <= time.time_ns()
        assert all(p.leader == "n0" and p.replicas == ("n0",) for p in info.partitions.values())
        assert await client.partition_count(name) == 3
        assert md.brokers[0].address.endswith(liftbridge_cluster.brokers[0].rsplit(":", 1)[1])
        with pytest.raises(StreamExistsError):
            await client.create_stream(name, name)
        only = await client.fetch_metadata([name, "no-such-stream-at-all"])
        assert set(only.streams) == {name}
        await client.delete_stream(name)
        with pytest.raises(NoSuchStreamError):
            await client.delete_stream(name)
        with pytest.raises(NoSuchStreamError):
            await client.stream_info(name, refresh=True)


async def test_invalid_create_arguments(liftbridge_cluster: LocalCluster) -> None:
    async with Client(liftbridge_cluster.brokers) as client:
        # Refused by the server (reserved name): a BadRequestError, a ValueError.
        with pytest.raises(BadRequestError, match="reserved"):
            await client.create_stream("anything", "__cursors")
        # Refused before sending.
        with pytest.raises(ValueError, match="subject"):
            await client.create_stream("bad subject", "bad-subject-stream")
        with pytest.raises(ValueError):
            await client.create_stream("x", "x", partitions=0)
        with pytest.raises(ValueError):
            await client.create_stream("x", "x", retention_max_age=-1)


async def test_retention_max_messages_trims(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("ret")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(
            name,
            name,
            retention_max_messages=5,
            segment_max_bytes=256,
            cleaner_interval=timedelta(milliseconds=300),
        )
        for i in range(40):
            await client.publish_to_stream(name, b"value-%03d" % i)

        async def trimmed() -> bool:
            msgs = await read_all(client, name)
            return bool(msgs) and msgs[0].offset > 0 and len(msgs) < 40

        await eventually(trimmed)
        msgs = await read_all(client, name)
        assert msgs[-1].offset == 39  # the newest are kept
        assert [m.offset for m in msgs] == list(range(msgs[0].offset, 40))


async def test_retention_max_bytes_trims(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("retb")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(
            name, name, retention_max_bytes=600, segment_max_bytes=200, cleaner_interval=0.3
        )
        for i in range(40):
            await client.publish_to_stream(name, b"x" * 40 + b"%03d" % i)

        async def trimmed() -> bool:
            msgs = await read_all(client, name)
            return bool(msgs) and msgs[0].offset > 0

        await eventually(trimmed)
        assert (await read_all(client, name))[-1].offset == 39


async def test_retention_max_age_trims(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("age")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(
            name,
            name,
            retention_max_age=timedelta(seconds=1),
            segment_max_age=0.5,
            cleaner_interval=0.3,
        )
        for i in range(5):
            await client.publish_to_stream(name, b"old-%d" % i)
        await asyncio.sleep(1.5)

        async def aged_out() -> bool:
            # A fresh message rolls the aged segment so that the cleaner can drop it.
            await client.publish_to_stream(name, b"new")
            msgs = await read_all(client, name)
            return all(not m.value.startswith(b"old") for m in msgs)

        await eventually(aged_out)


async def test_compaction_keeps_last_value_per_key(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("compact")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(
            name,
            name,
            compact_enabled=True,
            compact_max_goroutines=2,
            segment_max_bytes=256,
            cleaner_interval=0.3,
        )
        for i in range(60):
            await client.publish_to_stream(name, b"v%d" % i, key=b"k%d" % (i % 3))

        async def compacted() -> bool:
            return len(await read_all(client, name)) < 60

        await eventually(compacted)
        msgs = await read_all(client, name)
        last = {}
        for m in msgs:
            last[m.key] = m.value
        assert last == {b"k0": b"v57", b"k1": b"v58", b"k2": b"v59"}
        assert [m.offset for m in msgs] == sorted(m.offset for m in msgs)


async def test_pause_drops_nats_publishes_until_resume(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("pause")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        await client.pause_stream(name, partitions=[0])
        info = await client.stream_info(name, refresh=True)
        assert info.partitions[0].paused and not info.partitions[1].paused
        paused_at = info.partitions[0].pause_changed.latest
        assert paused_at > 0

        await nats_client.publish(name, wire.encode_publish(b"dropped", ack_policy=AckPolicy.NONE))
        await nats_client.flush()
        await asyncio.sleep(0.3)

        await client.resume_stream(name)
        info = await client.stream_info(name, refresh=True)
        assert info.partitions[0].pause_changed.latest > paused_at
        await nats_client.publish(name, wire.encode_publish(b"kept", ack_policy=AckPolicy.NONE))
        await nats_client.flush()

        async def stored() -> bool:
            return [m.value for m in await read_all(client, name)] == [b"kept"]

        await eventually(stored, within=5)


async def test_pause_resume_all(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("pall")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        await client.pause_stream(name, resume_all=True)
        before = await client.stream_info(name, refresh=True)
        # A gRPC publish to partition 0 resumes both partitions (resume_all).
        await client.publish_to_stream(name, b"wake", partition=0)
        after = await client.stream_info(name, refresh=True)
        for pid in (0, 1):
            assert (
                after.partitions[pid].pause_changed.latest
                > before.partitions[pid].pause_changed.latest
            )


async def test_readonly_rejects_and_ends_subscriptions(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("ro")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.publish_to_stream(name, b"a")
        await client.publish_to_stream(name, b"b")
        await client.set_stream_readonly(name)
        assert (await client.stream_info(name, refresh=True)).partitions[0].readonly
        with pytest.raises(ReadonlyPartitionError):
            await client.publish_to_stream(name, b"c")
        # A follow-forever subscription ends at the end of a readonly partition.
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
        async with asyncio.timeout(10), sub:
            assert [m.value async for m in sub] == [b"a", b"b"]
        await client.set_stream_readonly(name, readonly=False)
        ack = await client.publish_to_stream(name, b"c")
        assert ack is not None and ack.offset == 2


async def test_optimistic_concurrency_control(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("occ")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, optimistic_concurrency_control=True)
        ack = await client.publish_to_stream(name, b"first", expected_offset=0)
        assert ack is not None and ack.offset == 0
        with pytest.raises(IncorrectOffsetError):
            await client.publish_to_stream(name, b"stale", expected_offset=0)
        ack = await client.publish_to_stream(name, b"unchecked")  # -1: no check
        assert ack is not None and ack.offset == 1


async def test_min_isr_blocks_commits(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("minisr")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, min_isr=2)
        await client.publish_to_stream(name, b"never committed", ack_policy=AckPolicy.NONE)

        async def written() -> bool:
            return (await client.fetch_partition_metadata(name, 0)).newest_offset == 0

        await eventually(written, within=5)
        info = await client.fetch_partition_metadata(name, 0)
        assert info.high_watermark == -1  # one replica in the ISR, two required


async def test_auto_pause(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    idle, watched = unique_name("idle"), unique_name("watched")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(idle, idle, auto_pause_time=timedelta(milliseconds=500))
        await client.create_stream(
            watched, watched, auto_pause_time=0.5, auto_pause_disable_if_subscribers=True
        )
        async with client.subscribe(watched):

            async def idle_paused() -> bool:
                return (await client.stream_info(idle, refresh=True)).partitions[0].paused

            await eventually(idle_paused, within=10)
            await asyncio.sleep(1.0)
            assert not (await client.stream_info(watched, refresh=True)).partitions[0].paused


async def test_encryption_needs_server_key(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    # The test cluster runs without LIFTBRIDGE_ENCRYPTION_KEY: the option reaches the
    # server, which refuses it with a precondition error naming encryption.
    name = unique_name("enc")
    async with Client(liftbridge_cluster.brokers) as client:
        with pytest.raises(RpcError, match=r"(?i)encryption") as info:
            await client.create_stream(name, name, encryption=True)
        assert info.value.code == "FAILED_PRECONDITION"
        await client.create_stream(name, name, encryption=False)


async def test_queue_group_shares_subject(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    subject, a, b = unique_name("subj"), unique_name("ga"), unique_name("gb")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(subject, a, group="workers")
        await client.create_stream(subject, b, group="workers")
        for i in range(40):
            await nats_client.publish(subject, b"m%d" % i)
        await nats_client.flush()

        async def all_stored() -> bool:
            total = 0
            for name in (a, b):
                total += (await client.fetch_partition_metadata(name, 0)).newest_offset + 1
            return total == 40

        await eventually(all_stored, within=10)


@pytest.mark.cluster
async def test_replication_factor(
    liftbridge_cluster3: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    two, every = unique_name("rf2"), unique_name("rfmax")
    async with Client(liftbridge_cluster3.brokers) as client:
        await client.create_stream(two, two, replication_factor=2)
        await client.create_stream(every, every, replication_factor=REPLICATION_MAX)
        md = await client.fetch_metadata([two, every])
        assert len(md.streams[two].partitions[0].replicas) == 2
        assert sorted(md.streams[every].partitions[0].replicas) == ["n0", "n1", "n2"]
        assert len(md.brokers) == 3


async def test_wildcard_subject_stream(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    # Liftbridge streams may listen on wildcard subjects; the client lets them through.
    base = unique_name("wild")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(f"{base}.*", base)
        for token in ("a", "b"):
            await nats_client.publish(f"{base}.{token}", token.encode())
        await nats_client.flush()

        async def stored() -> bool:
            msgs = await read_all(client, base)
            return [(m.subject, m.value) for m in msgs] == [
                (f"{base}.a", b"a"),
                (f"{base}.b", b"b"),
            ]

        await eventually(stored, within=5)
