"""The Publisher on a 3-node cluster with replication factor 3: LEADER, ALL and NONE."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import nats
import pytest
from _publisher_helpers import read_all

from liftbridge_nats import Ack, AckPolicy, Client, Message, Publisher
from liftbridge_nats.testing import LocalCluster

pytestmark = pytest.mark.cluster


async def test_policies_on_three_replicas(
    liftbridge_cluster3: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("rf3")
    nc = await nats.connect(liftbridge_cluster3.nats_url)
    try:
        async with Client(liftbridge_cluster3.brokers) as client:
            await client.create_stream(name, name, replication_factor=3)
            md = await client.fetch_metadata([name])
            assert len(md.streams[name].partitions[0].replicas) == 3
            # The first ALL ack waits for idle followers; allow for it.
            async with Publisher(nc, ack_timeout=20) as pub:
                acked: dict[int, bytes] = {}
                last = -1
                for round_ in range(3):
                    futures = []
                    for policy in (AckPolicy.ALL, AckPolicy.LEADER, AckPolicy.NONE):
                        for i in range(50):
                            value = b"%s-%d-%d" % (policy.name.encode(), round_, i)
                            futures.append(
                                (value, await pub.publish_async(name, value, ack_policy=policy))
                            )
                    for value, fut in futures:
                        ack = await fut
                        if ack is None:
                            continue
                        assert isinstance(ack, Ack) and ack.stream == name
                        # One partition, pipelined: offsets follow publishing order.
                        assert ack.offset > last
                        last = ack.offset
                        acked[ack.offset] = value
                offsets = sorted(acked)
                assert len(offsets) == 300 and len(set(offsets)) == 300

            # Read from the leader after the ISR caught up with everything (450 messages).
            async def all_stored() -> list[Message]:
                return await read_all(client, name)

            stored = await all_stored()
            for _ in range(50):
                if len(stored) == 450:
                    break
                await asyncio.sleep(0.1)
                stored = await all_stored()
        assert [m.offset for m in stored] == list(range(450))
        for offset, value in acked.items():
            assert stored[offset].value == value
    finally:
        await nc.close()
