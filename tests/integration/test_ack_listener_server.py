"""AckListener on a real server, used as an application that builds its own envelopes
would: ``wire.encode_publish`` with the listener's inbox, sent with ``nc.publish``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nats.aio.client import Client as NATS

from liftbridge_nats import Ack, AckError, AckListener, AckPolicy, Client, wire
from liftbridge_nats.testing import LocalCluster


async def test_every_ack_arrives_decoded_and_junk_on_the_inbox_is_skipped(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("acklistener")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        async with AckListener(nats_client) as acks:
            # Sent first on this connection: NATS delivers it before any ack exists.
            await nats_client.publish(acks.inbox, b"not an envelope")
            sent: dict[str, tuple[int, int]] = {}  # correlation id: (partition, offset)
            policies: dict[str, AckPolicy] = {}
            for i in range(12):
                partition = i % 2
                cid = f"order-{i}"
                policies[cid] = AckPolicy.ALL if i % 3 else AckPolicy.LEADER
                data = wire.encode_publish(
                    b"value %d" % i,
                    key=b"k",
                    ack_inbox=acks.inbox,
                    correlation_id=cid,
                    ack_policy=policies[cid],
                    crc=i == 5,
                )
                subject = name if partition == 0 else f"{name}.1"
                await nats_client.publish(subject, data)
                sent[cid] = (partition, i // 2)
            await nats_client.flush()

            received: list[Ack] = []
            async with asyncio.timeout(20):
                async for ack in acks:
                    received.append(ack)
                    if len(received) == len(sent):
                        break
            assert acks.malformed == 1 and acks.received == len(sent)

    assert {a.correlation_id: (a.partition, a.offset) for a in received} == sent
    for ack in received:
        assert type(ack) is Ack and ack.error is AckError.OK
        assert ack.stream == name and ack.ack_inbox == acks.inbox
        assert ack.ack_policy is policies[ack.correlation_id]
