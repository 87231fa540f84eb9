"""The Publisher's ways of publishing: one message, pipelined, a batch, by stream and key.

python examples/publish.py                     # starts a throw-away local cluster
python examples/publish.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222
"""

from __future__ import annotations

import asyncio
import uuid
import zlib

import nats
from _example_cli import run_example

from liftbridge_nats import (
    AckPolicy,
    Client,
    KeyPartitioner,
    NoRespondersError,
    Publisher,
    PublishRecord,
    RoundRobinPartitioner,
)


async def main(brokers: list[str], nats_url: str) -> None:
    stream = f"orders-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream, partitions=3)
            async with Publisher(nc, client=client) as pub:
                # One message, waiting for the partition leader's ack.
                ack = await pub.publish(stream, b"first", key=b"order-1", headers={"v": b"1"})
                assert ack is not None
                print(f"publish       offset={ack.offset} stream={ack.stream}")

                # Pipelined: futures now, acks later (max_inflight bounds what is pending).
                futures = [await pub.publish_async(stream, b"n%d" % i) for i in range(5)]
                async_acks = await asyncio.gather(*futures)
                print("publish_async", [a.offset for a in async_acks if a is not None])

                # A batch, acked by every in-sync replica; records carry keys and headers.
                acks = await pub.publish_batch(
                    stream,
                    [b"plain", PublishRecord(b"with key", key=b"order-2")],
                    ack_policy=AckPolicy.ALL,
                )
                print("publish_batch ", [a.offset for a in acks])

                # Fire and forget.
                print(
                    "AckPolicy.NONE",
                    await pub.publish(stream, b"no ack", ack_policy=AckPolicy.NONE),
                )

                # By stream and key: the partition the Go client would pick for the key.
                for key in (b"a", b"user-2", b"user-1"):
                    ack = await pub.publish_to_stream(
                        stream, b"hi " + key, key=key, partitioner=KeyPartitioner()
                    )
                    assert ack is not None
                    print(
                        f"by key        {key.decode():6s} -> partition {ack.partition} on "
                        f"{ack.message_subject} (crc32 % 3 = {zlib.crc32(key) % 3})"
                    )

                # By stream, pipelined: the route is looked up once, then cached.
                rr = RoundRobinPartitioner()
                futures = [
                    await pub.publish_to_stream_async(stream, b"rr%d" % i, partitioner=rr)
                    for i in range(6)
                ]
                placed = [(a.partition, a.offset) for a in await asyncio.gather(*futures) if a]
                print("by stream     (partition, offset)", placed)

                # Nobody records this subject: NATS says so at once, nothing was stored.
                try:
                    await pub.publish(f"{stream}-nobody", b"lost?")
                except NoRespondersError as exc:
                    print("no stream     NoRespondersError, retriable =", exc.retriable)
                print("stats         acked =", pub.stats.acked)
            await client.delete_stream(stream)
    finally:
        await nc.close()


if __name__ == "__main__":
    run_example(main, __doc__)
