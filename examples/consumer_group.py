"""Two members of a consumer group share a 4-partition stream; positions go to cursors.

python examples/consumer_group.py                 # starts a throw-away local cluster
python examples/consumer_group.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import nats
from _example_cli import run_example

from liftbridge_nats import Client, Consumer, group_cursor_id

PARTITIONS = 4
MESSAGES = 20


def shared(members: list[Consumer]) -> bool:
    """True once every partition has exactly one owner and every member owns some."""
    held = [key for m in members for key in m.assignments]
    return len(held) == len(set(held)) == PARTITIONS and all(m.assignments for m in members)


async def main(brokers: list[str], nats_url: str) -> None:
    stream, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream, partitions=PARTITIONS)
            # A short assignment interval makes the demo settle fast; the server's
            # consumer timeout decides the default.
            alice = client.consumer(group, [stream], consumer_id="alice", assignment_interval=0.3)
            bob = client.consumer(group, [stream], consumer_id="bob", assignment_interval=0.3)
            async with alice, bob:
                # The coordinator rebalances as members join; wait until it settles.
                while not shared([alice, bob]):  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
                for name, member in (("alice", alice), ("bob", bob)):
                    print(name, "reads partitions", sorted(p for _, p in member.assignments))

                for i in range(MESSAGES):  # partition N of stream "s" listens on "s.N"
                    subject = stream if i % PARTITIONS == 0 else f"{stream}.{i % PARTITIONS}"
                    await nc.publish(subject, b"order-%d" % i)
                await nc.flush()

                seen: Counter[tuple[int, int]] = Counter()
                per_member: Counter[str] = Counter()
                done = asyncio.Event()

                async def consume(name: str, member: Consumer) -> None:
                    async for msg in member:
                        seen[(msg.partition, msg.offset)] += 1
                        per_member[name] += 1
                        if sum(seen.values()) == MESSAGES:
                            done.set()

                tasks = [
                    asyncio.create_task(consume(n, m)) for n, m in (("alice", alice), ("bob", bob))
                ]
                await done.wait()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                print(
                    "consumed",
                    sum(seen.values()),
                    "unique",
                    len(seen),
                    dict(sorted(per_member.items())),
                )
                await alice.checkpoint()
                await bob.checkpoint()
            cursors = [
                await client.fetch_cursor(group_cursor_id(group), stream, p)
                for p in range(PARTITIONS)
            ]
            print("committed positions", cursors)
            await client.delete_stream(stream)
    finally:
        await nc.close()


if __name__ == "__main__":
    run_example(main, __doc__)
