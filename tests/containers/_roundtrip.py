"""The smoke test every container set-up gets: create a stream, publish with ALL acks,
read everything back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import nats

from liftbridge_nats import AckPolicy, Client, Publisher, StartPosition, StopPosition


@dataclass(frozen=True)
class RoundTrip:
    """What a round trip sent, had acked (offsets) and read back (values)."""

    sent: list[bytes]
    acked_offsets: list[int]
    read_back: list[bytes]

    def check(self) -> None:
        """Every message acked at its own offset and read back in order, nothing more."""
        assert self.acked_offsets == list(range(len(self.sent)))
        assert self.read_back == self.sent

    def summary(self) -> str:
        """``sent=N acked=N read back=N``."""
        return (
            f"sent={len(self.sent)} acked(ALL)={len(self.acked_offsets)} "
            f"read back={len(self.read_back)}"
        )


async def round_trip(
    nats_url: str, brokers: Sequence[str], stream: str, *, count: int = 200, replication: int = 1
) -> RoundTrip:
    """Create ``stream`` (replication factor ``replication``), publish ``count`` messages
    with ALL acks over NATS, and read the partition back from the earliest offset."""
    sent = [b"smoke-%d" % i for i in range(count)]
    nc = await nats.connect(nats_url, connect_timeout=5)
    try:
        async with Client(list(brokers), timeout=30) as client:
            await client.create_stream(stream, stream, replication_factor=replication)
            async with Publisher(nc, ack_timeout=30) as pub:
                acks = await pub.publish_batch(stream, sent, ack_policy=AckPolicy.ALL)
            read_back = []
            async with client.subscribe(
                stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
            ) as sub:
                async for message in sub:
                    read_back.append(message.value)
    finally:
        await nc.close()
    return RoundTrip(sent, [ack.offset for ack in acks], read_back)
