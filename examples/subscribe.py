"""Read a stream with every kind of start and stop position.

    python examples/subscribe.py                      # starts a throw-away local cluster
    python examples/subscribe.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222

Messages go in through plain NATS publishes (Liftbridge stores a NATS message without
the envelope as a plain value) and come out through the gRPC Subscribe.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import nats
from _example_cli import run_example

from liftbridge_nats import Client, StartPosition, StopPosition


async def main(brokers: list[str], nats_url: str) -> None:
    stream = f"greetings-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream)  # subject and name alike

            # Follow new messages: subscribe first, then publish.
            live = client.subscribe(stream)  # NEW_ONLY by default
            await live.start()
            for i in range(5):
                await nc.publish(stream, b"hello-%d" % i)
            await nc.flush()
            async with live:
                async for msg in live:
                    print(f"live offset={msg.offset} value={msg.value.decode()}")
                    if msg.offset == 4:
                        break

            # Replay history: everything, a range, the newest, the last minute.
            everything = client.subscribe(
                stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
            )
            print("all", [m.offset async for m in everything])
            print(
                "range",
                [m.offset async for m in client.subscribe(stream, start_offset=1, stop_offset=3)],
            )
            newest = client.subscribe(
                stream, start_position=StartPosition.LATEST, stop_position=StopPosition.LATEST
            )
            print("latest", [m.value.decode() async for m in newest])
            recent = client.subscribe(
                stream, start_time=timedelta(minutes=1), stop_position=StopPosition.LATEST
            )
            print("last minute", len([m async for m in recent]))
            await client.delete_stream(stream)
    finally:
        await nc.close()


if __name__ == "__main__":
    run_example(main, __doc__)
