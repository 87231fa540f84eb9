"""A consumer-group member that commits by hand, after each batch it has processed.

python examples/group_manual_commit.py            # starts a throw-away local cluster
python examples/group_manual_commit.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222

With ``auto_checkpoint_interval=None`` nothing is committed behind your back: not on a
timer, not on close. A batch that fails before ``commit()`` is read again by whoever
reads the partition next (at least once).
"""

from __future__ import annotations

import uuid

from _example_cli import run_example

from liftbridge_nats import Client, Consumer, consumer_lag

PARTITIONS = 2


async def process_until(consumer: Consumer, count: int, totals: dict[int, int]) -> int:
    """Sum the amounts of ``count`` orders, committing after every batch."""
    done = 0
    while done < count:
        batches = await consumer.getmany(timeout=5.0, max_records=4)
        for tp, messages in batches.items():
            for msg in messages:
                totals[tp.partition] = totals.get(tp.partition, 0) + int(msg.value)
            done += len(messages)
        await consumer.commit()  # the batch is processed: store the positions
    return done


async def main(brokers: list[str], nats_url: str) -> None:
    stream, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    async with Client(brokers) as client:
        await client.create_stream(stream, stream, partitions=PARTITIONS)
        for i in range(20):  # amounts 0..19, alternating partitions
            await client.publish_to_stream(stream, b"%d" % i, partition=i % PARTITIONS)

        totals: dict[int, int] = {}
        consumer = client.consumer(group, [stream], auto_checkpoint_interval=None)
        async with consumer:
            print("processed", await process_until(consumer, 20, totals))
            committed = [await consumer.committed((stream, p)) for p in range(PARTITIONS)]
            print("committed (next offset to read)", committed)
            print("lag", [row.lag for row in await consumer.lag()])

        # New orders while no member runs; a new member resumes after the commits.
        for i in range(20, 23):
            await client.publish_to_stream(stream, b"%d" % i, partition=i % PARTITIONS)
        lags = await consumer_lag(client, group, stream)
        print("lag while stopped", [row.lag for row in lags])
        async with client.consumer(group, [stream], auto_checkpoint_interval=None) as consumer:
            print("second run processed", await process_until(consumer, 3, totals))
        print("totals per partition", [totals[p] for p in range(PARTITIONS)])
        await client.delete_stream(stream)


if __name__ == "__main__":
    run_example(main, __doc__)
