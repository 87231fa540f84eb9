"""The read-ahead bound against a real broker, measured where the messages wait.

A subscription reads ahead at most ``read_ahead_bytes`` of messages (as sent),
except that a message larger than that is let through whole: while it waits to be
taken, the read-ahead is that message and nothing more, and once it is taken the
read-ahead narrows back (see liftbridge_nats._stream_reader). The unit tests check
the same against an independent HTTP/2 server; here the server is Liftbridge.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import pytest

from liftbridge_nats import AckPolicy, Client, Message, Publisher, StartPosition
from liftbridge_nats._stream_reader import StreamReader

pytestmark = pytest.mark.timeout(120)

READ_AHEAD = 64 * 1024
SMALL = 1000
BIG = 600_000  # under NATS's 1 MiB max_payload, ten times the read-ahead


async def settled(reader: StreamReader, within: float = 10.0) -> int:
    """What the reader holds (bytes as sent) once the broker has sent all the reader
    let it send: the same for 300 ms."""
    deadline = time.monotonic() + within
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = reader.buffered_bytes
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 0.3:
            return now
        await asyncio.sleep(0.02)
    raise AssertionError(f"the read-ahead never settled (last {last} bytes)")


async def test_a_message_larger_than_the_read_ahead_is_read_ahead_alone(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("ahead")
    sizes = [SMALL] * 200 + [BIG] + [SMALL] * 200
    async with Client(
        liftbridge_cluster.brokers, read_ahead_bytes=READ_AHEAD, metrics=False
    ) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client) as pub:
            acks = [
                await pub.publish_async(name, b"v" * size, ack_policy=AckPolicy.LEADER)
                for size in sizes
            ]
            await asyncio.gather(*acks)

        async with client.subscribe(name, start_position=StartPosition.EARLIEST) as sub:
            offsets: list[int] = []

            async def take(count: int) -> Message:
                for _ in range(count):
                    message = await asyncio.wait_for(anext(sub), 10)
                    offsets.append(message.offset)
                return message

            await take(1)
            reader = sub._reader
            assert reader is not None
            # Small messages only ahead: the window's worth, no more.
            held = await settled(reader)
            assert READ_AHEAD // 2 < held <= READ_AHEAD
            assert reader.read_ahead_limit <= READ_AHEAD

            # The large message next: it arrives whole, alone, beyond read_ahead_bytes.
            tracemalloc.start()
            try:
                await take(199)
                held = await settled(reader)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert BIG < held < BIG + 1024  # its value, its fields and its prefix
            assert reader.read_ahead_limit <= held
            # What receiving it cost in memory: the read-ahead of small messages before
            # it, and the large one's pieces gathered in one buffer, then copied out
            # (about three times its size at the peak, for a moment).
            assert peak < READ_AHEAD + 4 * held, f"{peak} bytes at the peak for {held}"

            big = await take(1)
            assert len(big.value) == BIG
            # Taken: the read-ahead is back within read_ahead_bytes.
            held = await settled(reader)
            assert held <= READ_AHEAD and reader.read_ahead_limit <= READ_AHEAD
            await take(200)
    assert offsets == list(range(len(sizes)))
