"""Consumer groups against a real server: members share partitions, positions are
committed to cursors, and membership changes hand partitions over without loss or
duplicates."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest
from _waiting import wait_for

from liftbridge_nats import (
    Client,
    Consumer,
    InvalidArgumentError,
    NoStoredPositionError,
    StartPosition,
    group_cursor_id,
)

PARTITIONS = 6


def covers(stream: str, members: list[Consumer]) -> bool:
    """The members hold every partition, each exactly once, and each holds some."""
    held = [key for m in members for key in m.assignments]
    return sorted(held) == [(stream, p) for p in range(PARTITIONS)] and all(
        m.assignments for m in members
    )


async def test_group_exactly_once_across_leave_and_join(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream, group = unique_name("grp"), unique_name("g")
    delivered: defaultdict[tuple[int, int], list[str]] = defaultdict(list)

    async def pump(consumer: Consumer, label: str) -> None:
        async for msg in consumer:
            delivered[(msg.partition, msg.offset)].append(label)

    async def publish_round(client: Client, round_no: int) -> None:
        for i in range(10 * PARTITIONS):
            await client.publish_to_stream(
                stream, b"r%d-%d" % (round_no, i), partition=i % PARTITIONS
            )

    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(stream, stream, partitions=PARTITIONS)

        def member(label: str) -> Consumer:
            return client.consumer(
                group,
                [stream],
                consumer_id=label,
                assignment_interval=0.3,
                auto_checkpoint_interval=0.5,
                start_position=StartPosition.EARLIEST,
            )

        a, b, c = member("a"), member("b"), member("c")
        members = {"a": a, "b": b, "c": c}
        tasks: dict[str, asyncio.Task[None]] = {}
        try:
            for label, consumer in members.items():
                await consumer.start()
                tasks[label] = asyncio.create_task(pump(consumer, label))
            await wait_for(
                lambda: covers(stream, [a, b, c]), "three members to share six partitions"
            )

            await publish_round(client, 1)
            await wait_for(lambda: len(delivered) == 60, "round 1")

            # b leaves midway: close() checkpoints what it delivered, then leaves. The
            # others commit too: Liftbridge has no hand-over step, so a partition that
            # moves resumes at its last committed position (at-least-once otherwise).
            await a.checkpoint()
            await c.checkpoint()
            tasks.pop("b").cancel()
            await members.pop("b").close()
            await wait_for(lambda: covers(stream, [a, c]), "a and c to take b's partitions")
            await publish_round(client, 2)
            await wait_for(lambda: len(delivered) == 120, "round 2")

            # Likewise before d joins: whatever d takes over resumes right after the
            # last delivered message.
            await a.checkpoint()
            await c.checkpoint()
            d = member("d")
            members["d"] = d
            await d.start()
            tasks["d"] = asyncio.create_task(pump(d, "d"))
            await wait_for(lambda: covers(stream, [a, c, d]), "d to get partitions")
            await publish_round(client, 3)
            await wait_for(lambda: len(delivered) == 180, "round 3")
            await asyncio.sleep(0.5)  # room for a duplicate to show up
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            for consumer in members.values():
                await consumer.close()

        assert sorted(delivered) == [(p, o) for p in range(PARTITIONS) for o in range(30)]
        duplicates = {key: who for key, who in delivered.items() if len(who) != 1}
        assert duplicates == {}
        assert {who[0] for who in delivered.values()} == {"a", "b", "c", "d"}
        # Every member closed with a checkpoint: the group's cursors point at the end.
        cursor_id = group_cursor_id(group)
        assert [await client.fetch_cursor(cursor_id, stream, p) for p in range(PARTITIONS)] == [
            29
        ] * PARTITIONS


async def test_group_resumes_from_cursor_and_start_positions(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream, group = unique_name("gcur"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(stream, stream)
        for i in range(5):
            await client.publish_to_stream(stream, b"%d" % i)
        # A stored group position wins over the start position.
        await client.set_cursor(group_cursor_id(group), stream, 0, 2)
        async with client.consumer(group, stream, assignment_interval=0.3) as consumer:
            got = []
            async with asyncio.timeout(10):
                async for msg in consumer:
                    got.append(msg.offset)
                    if msg.offset == 4:
                        break
            assert got == [3, 4]
            await consumer.checkpoint()
            assert consumer.positions == {(stream, 0): 4}
        assert await client.fetch_cursor(group_cursor_id(group), stream, 0) == 4

        # LATEST for a partition without a position: starts at the newest message.
        other = unique_name("g")
        async with client.consumer(
            other, [stream], start_position=StartPosition.LATEST, assignment_interval=0.3
        ) as consumer:
            async with asyncio.timeout(10):
                assert (await consumer.__anext__()).offset == 4


async def test_group_without_position_and_no_start_reports_error(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    stream, group = unique_name("gnone"), unique_name("g")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(stream, stream)
        async with client.consumer(group, [stream], start_position=None) as consumer:
            with pytest.raises(NoStoredPositionError, match="no stored position"):
                async with asyncio.timeout(10):
                    await consumer.__anext__()


def test_consumer_arguments() -> None:
    client = Client("127.0.0.1:1")
    with pytest.raises(InvalidArgumentError):
        client.consumer("", ["s"])
    with pytest.raises(InvalidArgumentError):
        client.consumer("g", [])
    with pytest.raises(InvalidArgumentError):
        client.consumer("g", ["s"], start_position=StartPosition.OFFSET)
    with pytest.raises(InvalidArgumentError):
        client.consumer("g", ["s"], auto_checkpoint_interval=0)
