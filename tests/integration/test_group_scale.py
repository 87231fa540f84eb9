"""A consumer group at scale against a real server: three members on a 64-partition
stream read every message exactly once while members leave and join and messages keep
coming, and the committed positions end at the newest offsets."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Consumer, Publisher, consumer_lag, partition_subject

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 64
ROUNDS = 8  # messages per partition, published in rounds while members change


async def test_three_members_sixty_four_partitions_exactly_once(
    liftbridge_cluster: Any, unique_name: Any, nats_client: Any
) -> None:
    stream, group = unique_name("scale"), unique_name("g")
    delivered: Counter[tuple[int, int]] = Counter()
    by_member: Counter[str] = Counter()

    async def pump(consumer: Consumer) -> None:
        # getmany in batches, as a real worker would.
        while True:
            batches = await consumer.getmany(timeout=0.5, max_records=200)
            for messages in batches.values():
                for msg in messages:
                    delivered[(msg.partition, msg.offset)] += 1
                    by_member[consumer.consumer_id] += 1

    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(stream, stream, partitions=PARTITIONS)

        def member(name: str) -> Consumer:
            return client.consumer(group, [stream], consumer_id=name, assignment_interval=0.3)

        members: dict[str, Consumer] = {}
        tasks: dict[str, asyncio.Task[None]] = {}

        async def join(name: str) -> None:
            members[name] = member(name)
            await members[name].start()
            tasks[name] = asyncio.create_task(pump(members[name]))

        async def leave(name: str) -> None:
            tasks.pop(name).cancel()
            await members.pop(name).close()

        async with Publisher(nats_client, ack_timeout=20) as pub:

            async def publish_round() -> None:
                futures = [
                    await pub.publish_async(
                        partition_subject(stream, p), b"m", ack_policy=AckPolicy.LEADER
                    )
                    for p in range(PARTITIONS)
                ]
                await asyncio.gather(*futures)

            try:
                for name in ("a", "b", "c"):
                    await join(name)
                # Membership changes between (and during) rounds of publishing.
                changes = [
                    lambda: leave("b"),
                    lambda: join("d"),
                    lambda: leave("a"),
                    lambda: join("e"),
                    lambda: join("b2"),
                    lambda: leave("c"),
                    lambda: join("f"),
                    lambda: leave("d"),
                ]
                for round_no in range(ROUNDS):
                    published = asyncio.ensure_future(publish_round())
                    await asyncio.sleep(0.4)
                    await changes[round_no]()
                    await published
                total = PARTITIONS * ROUNDS
                deadline = time.monotonic() + 60
                while len(delivered) < total:
                    assert time.monotonic() < deadline, f"{len(delivered)} of {total}"
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)  # room for a duplicate to show up
            finally:
                for name in list(members):
                    await leave(name)

        expected = {(p, o) for p in range(PARTITIONS) for o in range(ROUNDS)}
        assert set(delivered) == expected
        duplicates = {key: n for key, n in delivered.items() if n != 1}
        assert duplicates == {}, f"{len(duplicates)} delivered more than once"
        assert len([m for m in by_member if by_member[m]]) >= 5  # the work moved around
        # Every member committed on hand-over and on close: the group is at the end.
        lags = await consumer_lag(client, group, stream)
        assert [(x.committed, x.newest, x.lag) for x in lags] == [
            (ROUNDS - 1, ROUNDS - 1, 0)
        ] * PARTITIONS
