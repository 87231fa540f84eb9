"""Acks taken straight from nats-py's parser: shared by publishers on one connection,
undone when the last one closes, and invisible to the application's own subscriptions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _publisher_helpers import acked

from liftbridge_nats import AckPolicy, Client, NoRespondersError, Publisher
from liftbridge_nats._natscompat import is_installed, reads_frames


async def test_two_publishers_share_one_dispatcher_and_leave_no_trace(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("dacks")
    own_method = type(nats_client)._process_msg
    assert "_process_msg" not in vars(nats_client)
    # The application's own subscription on the recorded subject, before and after.
    seen: list[bytes] = []

    async def on_plain(msg: Any) -> None:
        seen.append(msg.data)

    app_sub = await nats_client.subscribe(name, cb=on_plain)
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with (
            Publisher(nats_client, fast_path=True) as first,
            Publisher(nats_client, fast_path=True) as second,
        ):
            assert first.fast_path and second.fast_path
            assert first._live().listener.direct and second._live().listener.direct
            assert is_installed(nats_client) and reads_frames(nats_client)
            acks = await asyncio.gather(
                *(pub.publish(name, b"v%d" % i) for i, pub in enumerate((first, second) * 50))
            )
            assert sorted(a.offset for a in acked(acks)) == list(range(100))
            assert first.stats.acked == 50 and second.stats.acked == 50
            assert first.stats.acks_unmatched == 0 and second.stats.acks_unmatched == 0
            # Status messages still take the subscription path.
            with pytest.raises(NoRespondersError):
                await first.publish(unique_name("nobody"), b"x", timeout=2)
            await second.close()
            assert is_installed(nats_client)  # the first still uses it
            ack = await first.publish(name, b"after", ack_policy=AckPolicy.ALL)
            assert ack is not None and ack.offset == 100
        assert not is_installed(nats_client) and not reads_frames(nats_client)
        assert "_process_msg" not in vars(nats_client) and "parse" not in vars(nats_client._ps)
        assert type(nats_client)._process_msg is own_method
        # The connection still works the ordinary way for everybody else.
        await nats_client.publish(name, b"plain")
        await nats_client.flush()
        for _ in range(100):
            if b"plain" in seen:
                break
            await asyncio.sleep(0.02)
    await app_sub.unsubscribe()
    assert b"plain" in seen
    # The application's subscriber saw every enveloped message too (101 + 1 plain).
    assert len(seen) == 102
