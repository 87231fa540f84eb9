"""The services' pattern against a real node: many concurrent ``await publish()`` calls.
A burst bigger than nats-py's outgoing buffer is waited out on the fast path, never
handed to nats-py's public publish, and starts reaching the server before the calls end;
every message is acked once and stored once, in the order of the calls."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from _publisher_helpers import acked, read_all, socket_writes, user_headers

from liftbridge_nats import AckPolicy, Client, Publisher

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "key-and-headers"])
async def test_a_20k_burst_is_served_entirely_by_the_fast_path(
    liftbridge_cluster: Any, unique_name: Any, keyed: bool
) -> None:
    name = unique_name("burst")
    n = 20_000
    # A small pending buffer (256 KiB, the burst is about 3 MiB) makes sure the burst
    # runs into nats-py's limit many times over.
    nc = await nats.connect(liftbridge_cluster.nats_url, pending_size=256 * 1024)
    try:
        async with Client(liftbridge_cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=60, fast_path=True) as pub:
                assert pub.fast_path, pub.fast_path.reason
                extra: dict[str, Any] = {"key": b"k", "headers": {"h": b"v"}} if keyed else {}
                with socket_writes(nc) as handed:
                    calls = [
                        pub.publish(name, b"v%d" % i, ack_policy=AckPolicy.ALL, **extra)
                        for i in range(n)
                    ]
                acks = acked(await asyncio.gather(*calls))
                stats = pub.stats
            assert stats.fast_path_sent == n and stats.public_api_sent == 0
            assert stats.acked == n and stats.acks_unmatched == 0 and stats.timed_out == 0
            assert sorted(a.offset for a in acks) == list(range(n))  # nothing acked twice
            stored = await read_all(client, name)
    finally:
        await nc.close()
    assert handed, "the burst sent nothing before the event loop ran"
    assert len(stored) == n
    assert [m.value for m in stored] == [b"v%d" % i for i in range(n)]  # in call order
    by_offset = {a.offset: a.correlation_id for a in acks}
    assert len(set(by_offset.values())) == n
    if keyed:
        assert all(m.key == b"k" and user_headers(m) == {"h": b"v"} for m in stored)


async def test_a_thousand_tasks_looping_on_publish(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("tasks")
    tasks, each = 1000, 20
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client, ack_timeout=60) as pub:

            async def worker(w: int) -> list[int]:
                return [
                    (await pub.publish(name, b"%d-%d" % (w, i))).offset  # type: ignore[union-attr]
                    for i in range(each)
                ]

            offsets = await asyncio.gather(*(worker(w) for w in range(tasks)))
        stored = await read_all(client, name)
    flat = sorted(o for per_task in offsets for o in per_task)
    assert flat == list(range(tasks * each))
    # Each task's messages were stored in the order it published them.
    for per_task in offsets:
        assert per_task == sorted(per_task)
    assert len(stored) == tasks * each
