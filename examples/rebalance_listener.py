"""A rebalance listener that flushes per-partition state when partitions move away.

python examples/rebalance_listener.py             # starts a throw-away local cluster
python examples/rebalance_listener.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222

Alice counts orders per partition in memory. When Bob joins, the coordinator moves
some partitions to him: Alice's listener writes their counts to a store before she
lets go, and writes the rest when she closes. The store ends up complete.
"""

from __future__ import annotations

import asyncio
import uuid

from _example_cli import run_example

from liftbridge_nats import Client, Consumer, ConsumerRebalanceListener, StreamPartition

PARTITIONS = 4
ORDERS = 40


class FlushOnRevoke(ConsumerRebalanceListener):
    """Keeps a running count per partition; writes it to ``store`` on revocation."""

    def __init__(self, store: dict[int, int]) -> None:
        self.counts: dict[StreamPartition, int] = {}
        self.store = store
        self.flushes: list[int] = []

    def on_partitions_assigned(self, assigned: set[StreamPartition]) -> None:
        for tp in assigned:
            self.counts[tp] = 0

    async def on_partitions_revoked(self, revoked: set[StreamPartition]) -> None:
        for tp in revoked:
            self.store[tp.partition] = self.store.get(tp.partition, 0) + self.counts.pop(tp, 0)
        self.flushes.append(len(revoked))


async def count(consumer: Consumer, listener: FlushOnRevoke, orders: int) -> None:
    seen = 0
    while seen < orders:
        for tp, messages in (await consumer.getmany(timeout=5.0)).items():
            listener.counts[tp] += len(messages)
            seen += len(messages)


async def main(brokers: list[str], nats_url: str) -> None:
    stream, group = f"orders-{uuid.uuid4().hex[:6]}", f"audit-{uuid.uuid4().hex[:6]}"
    store: dict[int, int] = {}
    async with Client(brokers) as client:
        await client.create_stream(stream, stream, partitions=PARTITIONS)
        for i in range(ORDERS):
            await client.publish_to_stream(stream, b"order-%d" % i, partition=i % PARTITIONS)

        listener = FlushOnRevoke(store)
        alice = client.consumer(group, [stream], assignment_interval=0.3, listener=listener)
        async with alice:
            await count(alice, listener, ORDERS)
            print("alice counted", sum(listener.counts.values()), "orders")
            async with client.consumer(group, [stream], assignment_interval=0.3) as bob:
                # Wait until the coordinator has moved partitions and Alice let them go.
                while not bob.assignments or sum(listener.flushes) != len(bob.assignments):  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
                print("bob took", len(bob.assignments), "partitions; alice flushed them first")
                print("store while both run", sorted(store.values()))
        print("store after alice closed", [store.get(p, 0) for p in range(PARTITIONS)])
        await client.delete_stream(stream)


if __name__ == "__main__":
    run_example(main, __doc__)
