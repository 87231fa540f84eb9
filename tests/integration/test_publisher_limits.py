"""Private clusters: the server's too-large ack, publishing through a NATS outage, and
the deadlines of publishes queued behind a paused node."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import pytest
from _publisher_helpers import eventually, read_all

from liftbridge_nats import (
    Ack,
    AckTimeoutError,
    Client,
    LiftbridgeError,
    LocalError,
    MaxBytesExceededError,
    MaxPayloadExceededError,
    MessageTooLargeError,
    Publisher,
    PublisherClosedError,
    PublishRejectedError,
    RemoteError,
)

# On containers, tests that keep a nats-py client connected across a NATS kill use host
# networking: through a published port docker-proxy accepts and then drops reconnect
# attempts around the kill, and nats-py (2.x) leaves each such transport unclosed.
NATS_FAULT_NETWORK = "host"


async def test_too_large_for_the_server_or_for_nats(liftbridge_cluster_factory: Any) -> None:
    config = {"clustering.replication.max.bytes": 4096}
    async with liftbridge_cluster_factory(1, liftbridge_config=config) as cluster:
        nc = await nats.connect(cluster.nats_url)
        try:
            async with Client(cluster.brokers) as client, Publisher(nc) as pub:
                await client.create_stream("big", "big")
                assert await pub.publish("big", b"x" * 1000) is not None
                # Both limits are caught as MessageTooLargeError; the server's is its
                # answer (an ack error), NATS's is found here before sending.
                with pytest.raises(MessageTooLargeError) as server_side:
                    await pub.publish("big", b"x" * 8000)
                assert "clustering.replication.max.bytes" in str(server_side.value)
                assert type(server_side.value) is MaxBytesExceededError
                assert isinstance(server_side.value, PublishRejectedError | RemoteError)
                with pytest.raises(MessageTooLargeError) as client_side:
                    await pub.publish("big", b"x" * (nc.max_payload + 1))
                assert type(client_side.value) is MaxPayloadExceededError
                assert isinstance(client_side.value, LocalError)
                assert not server_side.value.maybe_stored and not client_side.value.maybe_stored
                assert pub.stats.rejected == 1
                assert [m.value for m in await read_all(client, "big")] == [b"x" * 1000]
        finally:
            await nc.close()


@pytest.mark.slow
async def test_publishes_during_a_nats_outage_never_hang_nor_lie(
    liftbridge_cluster_factory: Any,
) -> None:
    async with liftbridge_cluster_factory(1, container_network=NATS_FAULT_NETWORK) as cluster:
        nc = await nats.connect(
            cluster.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
        )
        try:
            async with Client(cluster.brokers) as client:
                await client.create_stream("out", "out")
                # retry=True: re-send after 503s and after 2 s without an ack, for 30 s.
                async with Publisher(nc, ack_timeout=2, retry=True, retry_deadline=30) as pub:
                    assert await pub.publish("out", b"before") is not None
                    await cluster.kill_nats()
                    futures = []
                    for i in range(200):
                        futures.append(await pub.publish_async("out", b"m%d" % i))
                        await asyncio.sleep(0.005)  # spread over the 1.5 s outage
                    await asyncio.sleep(0.5)
                    await cluster.restart_nats()
                    results = await asyncio.gather(*futures, return_exceptions=True)
                    acks = [r for r in results if isinstance(r, Ack)]
                    errors = [r for r in results if not isinstance(r, Ack)]
                    # Every publish ended: acked, or a typed error (never a hang).
                    assert all(isinstance(e, LiftbridgeError) for e in errors), errors[:3]
                    assert len(acks) >= 198, (len(acks), errors[:3], pub.stats)
                    assert pub.pending == 0
                stored = {m.value for m in await read_all(client, "out")}
                # Success was reported only for messages that are really stored.
                for value, result in zip((b"m%d" % i for i in range(200)), results, strict=True):
                    if isinstance(result, Ack):
                        assert value in stored
        finally:
            await nc.close()


async def test_publish_while_nats_is_down_ends_by_its_deadline(
    liftbridge_cluster_factory: Any,
) -> None:
    async with liftbridge_cluster_factory(1, container_network=NATS_FAULT_NETWORK) as cluster:
        nc = await nats.connect(
            cluster.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.2
        )
        try:
            async with Client(cluster.brokers) as client:
                await client.create_stream("down", "down")
            pub = Publisher(nc, ack_timeout=1.0)
            await pub.start()
            assert await pub.publish("down", b"before") is not None
            await cluster.kill_nats()
            for _ in range(100):
                if not nc.is_connected:
                    break
                await asyncio.sleep(0.05)
            assert not nc.is_connected
            started = time.monotonic()
            with pytest.raises(AckTimeoutError):
                await pub.publish("down", b"during")
            assert time.monotonic() - started < 2.5  # its own deadline, not NATS's
            buffered = await pub.publish_async("down", b"kept", timeout=30)
            assert pub.stats.buffered == 1
            await pub.close(timeout=0.2)
            with pytest.raises(PublisherClosedError):
                await buffered
            assert pub.pending == 0 and pub.stats.buffered == 0
        finally:
            await nc.close()


async def test_queued_publishes_end_by_the_deadline_of_their_call_on_a_paused_node(
    liftbridge_cluster_factory: Any,
) -> None:
    # Two messages to a paused node fill max_inflight for 2 s (their own timeout). The
    # publishes queued behind them end by their own deadlines, counted from their calls:
    # those due before room frees were never sent (and are never stored); the one sent
    # once room freed keeps only the rest of its time.
    async with liftbridge_cluster_factory(1) as cluster:
        nc = await nats.connect(cluster.nats_url)
        try:
            async with (
                Client(cluster.brokers) as client,
                Publisher(nc, max_inflight=2, ack_timeout=5) as pub,
            ):
                await client.create_stream("held", "held")
                assert await pub.publish("held", b"before") is not None
                await cluster.pause_node(0)
                try:
                    started = time.monotonic()
                    holding = [
                        await pub.publish_async("held", b"hold-%d" % i, timeout=2) for i in range(2)
                    ]
                    queued = pub.publish("held", b"queued", timeout=0.5)
                    late = pub.publish("held", b"late", timeout=2.5)
                    waiting = asyncio.ensure_future(
                        pub.publish_async("held", b"waiting", timeout=0.5)
                    )
                    with pytest.raises(AckTimeoutError) as never_sent:
                        await queued
                    assert time.monotonic() - started < 1.5  # not 2 s + 0.5 s
                    assert not never_sent.value.maybe_stored
                    assert "never sent" in str(never_sent.value)
                    failed = await asyncio.wait_for(waiting, 1.5)  # returns a failed future
                    with pytest.raises(AckTimeoutError) as never_sent_async:
                        await failed
                    assert not never_sent_async.value.maybe_stored
                    for future in holding:
                        with pytest.raises(AckTimeoutError):
                            await future
                    # Sent at 2 s, when the held messages timed out; its deadline stays at
                    # 2.5 s after its call (it used to get another 2.5 s from the send).
                    with pytest.raises(AckTimeoutError) as sent_late:
                        await late
                    assert time.monotonic() - started < 3.5
                    assert sent_late.value.maybe_stored
                finally:
                    await cluster.resume_node(0)
                assert pub.stats.timed_out == 5
                # The node stores what was sent once it runs again, and nothing else.
                sent = [b"before", b"hold-0", b"hold-1", b"late"]

                async def all_stored() -> bool:
                    return len(await read_all(client, "held")) >= len(sent)

                await eventually(all_stored)
                assert [m.value for m in await read_all(client, "held")] == sent
        finally:
            await nc.close()
