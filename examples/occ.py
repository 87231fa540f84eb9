"""Optimistic concurrency control: append only if nobody else appended first.

    python examples/occ.py                         # starts a throw-away local cluster
    python examples/occ.py --brokers 127.0.0.1:9292 --nats nats://127.0.0.1:4222

On a stream created with optimistic_concurrency_control=True, a message published with
``expected_offset=N`` is stored only if N is the partition's next offset; otherwise the
ack carries INCORRECT_OFFSET and the Publisher raises IncorrectOffsetError. Two writers
race for the same slot here; the loser re-reads the next offset and tries again.
"""

from __future__ import annotations

import asyncio
import uuid

import nats
from _example_cli import run_example

from liftbridge_nats import Client, IncorrectOffsetError, Publisher, StartPosition, StopPosition


async def next_offset(client: Client, stream: str) -> int:
    """The offset the next message of partition 0 gets (newest offset + 1)."""
    return (await client.fetch_partition_metadata(stream, 0)).newest_offset + 1


async def append(pub: Publisher, client: Client, stream: str, value: bytes) -> int:
    """Append ``value`` at the end of the log, retrying when another writer won."""
    attempts = 0
    while True:
        attempts += 1
        expected = await next_offset(client, stream)
        try:
            ack = await pub.publish(stream, value, expected_offset=expected)
        except IncorrectOffsetError:
            print(f"{value.decode()}: offset {expected} taken, retrying")
            continue
        assert ack is not None
        print(f"{value.decode()}: stored at offset {ack.offset} (attempt {attempts})")
        return ack.offset


async def main(brokers: list[str], nats_url: str) -> None:
    stream = f"ledger-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(nats_url)
    try:
        async with Client(brokers) as client:
            await client.create_stream(stream, stream, optimistic_concurrency_control=True)
            async with Publisher(nc) as pub:
                await append(pub, client, stream, b"opening balance")
                # Two writers read the same next offset; exactly one of them wins it.
                slot = await next_offset(client, stream)
                results = await asyncio.gather(
                    pub.publish(stream, b"writer A", expected_offset=slot),
                    pub.publish(stream, b"writer B", expected_offset=slot),
                    return_exceptions=True,
                )
                winners = [r for r in results if not isinstance(r, BaseException)]
                losers = [r for r in results if isinstance(r, IncorrectOffsetError)]
                print(f"race for offset {slot}: {len(winners)} winner, {len(losers)} refused")
                if losers:
                    loser = b"writer B" if isinstance(results[1], BaseException) else b"writer A"
                    await append(pub, client, stream, loser)
            values = [
                m.value.decode()
                async for m in client.subscribe(
                    stream,
                    start_position=StartPosition.EARLIEST,
                    stop_position=StopPosition.LATEST,
                )
            ]
            print("log:", values)
            await client.delete_stream(stream)
    finally:
        await nc.close()


if __name__ == "__main__":
    run_example(main, __doc__)
