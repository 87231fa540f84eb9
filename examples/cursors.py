"""Remember how far a reader got with a cursor, and carry on from there later.

python examples/cursors.py                        # starts a throw-away local cluster
python examples/cursors.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222
"""

from __future__ import annotations

import asyncio
import uuid

import nats
from _example_cli import run_example

from liftbridge_nats import Client, StartPosition, StopPosition

CURSOR = "report-job"


async def read_batch(client: Client, stream: str, size: int) -> list[int]:
    """Read up to ``size`` messages after the stored cursor, then store the new position."""
    last = await client.fetch_cursor(CURSOR, stream, 0)  # -1: never stored
    start = {"start_offset": last + 1} if last >= 0 else {"start_position": StartPosition.EARLIEST}
    offsets = []
    async with client.subscribe(stream, stop_position=StopPosition.LATEST, **start) as sub:
        async for msg in sub:
            offsets.append(msg.offset)
            if len(offsets) == size:
                break
    if offsets:
        await client.set_cursor(CURSOR, stream, 0, offsets[-1])
    return offsets


async def main(brokers: list[str], nats_url: str) -> None:
    stream = f"events-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream)
            for i in range(10):
                await nc.publish(stream, b"event-%d" % i)
            await nc.flush()
            # Plain NATS publishes get no ack: wait until the partition has all ten.
            while (await client.fetch_partition_metadata(stream, 0)).high_watermark < 9:  # noqa: ASYNC110
                await asyncio.sleep(0.05)

            print("first run read", await read_batch(client, stream, 4))
        # A new client (think: the job restarted) resumes after the stored position.
        async with Client(brokers) as client:
            print("cursor at", await client.fetch_cursor(CURSOR, stream, 0))
            print("second run read", await read_batch(client, stream, 100))
            print("cursor at", await client.fetch_cursor(CURSOR, stream, 0))
            await client.delete_stream(stream)
    finally:
        await nc.close()


if __name__ == "__main__":
    run_example(main, __doc__)
