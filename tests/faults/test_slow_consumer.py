"""A slow consumer: subscriptions do not buffer the backlog in memory.

80 MB of messages wait in one partition, then in 32 partitions read by one group
member; the reader takes a few slowly and then stalls. The process's resident memory
must grow by the read-ahead bound, a small fraction of the backlog (HTTP/2 flow
control keeps the rest on the server), and every message must still arrive, in order,
once the consumer speeds up.

The backlog is written by a child process: publishing 80 MB here would leave the
allocator holding memory that the reader could then fill unseen.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from liftbridge_nats import Client, StartPosition, StopPosition
from liftbridge_nats.testing import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

_PAGE = os.sysconf("SC_PAGE_SIZE")
SIZE = 1024

# Publishes `per` messages to each partition; message i of a partition carries i in
# each of its 4-byte words.
_FILL = """
import asyncio, sys
import nats
from liftbridge_nats import AckPolicy, Publisher, partition_subject

async def main(url, name, partitions, per, size):
    nc = await nats.connect(url)
    async with Publisher(nc, ack_timeout=30) as pub:
        for p in range(partitions):
            subject = partition_subject(name, p)
            futures = [
                await pub.publish_async(
                    subject, i.to_bytes(4, "big") * (size // 4), ack_policy=AckPolicy.LEADER
                )
                for i in range(per)
            ]
            await asyncio.gather(*futures)
    await nc.close()

asyncio.run(main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])))
"""


def _rss() -> int:
    """Resident set size of this process, in bytes (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


async def fill(cluster: Cluster, name: str, partitions: int, per: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _FILL,
        cluster.nats_url,
        name,
        str(partitions),
        str(per),
        str(SIZE),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


@pytest.fixture
async def cluster(
    liftbridge_cluster_factory: Callable[..., Cluster],
) -> AsyncIterator[Cluster]:
    # On containers: host networking. Through docker-proxy this test's memory readings
    # spread wider (peak growth up to 30 MiB, growth while stalled up to 29 MiB, in 14
    # runs; at most 11 MiB with host networking or with processes), and the bound is
    # about the subscription's own buffering, not about the relay in front of the server.
    async with liftbridge_cluster_factory(1, container_network="host") as c:
        yield c


async def test_slow_consumer_memory_stays_bounded(
    cluster: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    name = unique_name("slow")
    count = 80_000
    backlog = count * SIZE
    async with Client(cluster.brokers) as client:
        await client.create_stream(name, name)
        await fill(cluster, name, 1, count)
        gc.collect()
        baseline = _rss()
        peak = baseline
        got = 0
        expected_next = 0
        async with client.subscribe(
            name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        ) as sub:
            # Slow: 200 messages at 200 msg/s, then a 2 s stall.
            async for message in sub:
                assert message.offset == expected_next
                assert message.value[:4] == message.offset.to_bytes(4, "big")
                expected_next += 1
                got += 1
                peak = max(peak, _rss())
                if got < 200:
                    await asyncio.sleep(0.005)
                elif got == 200:
                    for _ in range(20):
                        await asyncio.sleep(0.1)
                        peak = max(peak, _rss())
                    stalled_growth = _rss() - baseline
                # Then fast, to the end.
        assert got == count
    growth = peak - baseline
    fault_report(
        f"backlog={backlog // 2**20} MiB in {count} messages; consumer read 200 at 200 msg/s "
        f"then stalled 2 s; RSS growth while stalled {stalled_growth / 2**20:.1f} MiB, peak "
        f"growth over the whole read {growth / 2**20:.1f} MiB; all {got} delivered in order"
    )
    # The read-ahead holds at most 4 MiB of messages; the rest waits on the server.
    assert stalled_growth < 16 * 2**20, "the subscription buffered the backlog in memory"
    assert growth < 24 * 2**20


async def test_slow_consumer_of_many_partitions_memory_stays_bounded(
    cluster: Cluster, unique_name: Callable[[str], str], fault_report: Any
) -> None:
    # One group member reads 32 partitions with a small read-ahead each (256 KiB). It
    # reads 40% fast, so that every partition's window has opened up, then stalls:
    # memory may grow by the read-ahead of every partition, not by the backlog.
    name, group = unique_name("slowmany"), unique_name("g")
    partitions, per = 32, 2_500
    read_ahead = 256 * 1024
    backlog = partitions * per * SIZE
    async with Client(
        cluster.brokers, read_ahead_bytes=read_ahead, read_ahead_messages=256
    ) as client:
        await client.create_stream(name, name, partitions=partitions)
        await fill(cluster, name, partitions, per)
        gc.collect()
        baseline = _rss()
        peak = baseline
        next_offset = [0] * partitions
        got = 0
        async with client.consumer(group, [name], handover_wait=0.0) as consumer:
            async for message in consumer:
                assert message.offset == next_offset[message.partition]
                assert message.value[:4] == message.offset.to_bytes(4, "big")
                next_offset[message.partition] += 1
                got += 1
                if got == partitions * per * 2 // 5:
                    assert min(next_offset) > 0, "a partition was not read yet"
                    for _ in range(20):
                        await asyncio.sleep(0.1)
                        peak = max(peak, _rss())
                    stalled_growth = _rss() - baseline
                elif got % 1000 == 0:
                    peak = max(peak, _rss())
                if got == partitions * per:
                    break
            assert len(consumer.assignments) == partitions
    growth = peak - baseline
    bound = partitions * read_ahead
    fault_report(
        f"backlog={backlog // 2**20} MiB in {partitions} partitions; read-ahead "
        f"{read_ahead // 1024} KiB per partition ({bound // 2**20} MiB in all); consumer read "
        f"40% then stalled 2 s; RSS growth while stalled "
        f"{stalled_growth / 2**20:.1f} MiB, peak growth {growth / 2**20:.1f} MiB; all {got} "
        "delivered in order"
    )
    assert next_offset == [per] * partitions
    # Buffered messages cost their wire size plus a bytes object each (3% at 1 KiB);
    # the rest of the backlog (48 MiB) stays on the server.
    assert stalled_growth < 1.5 * bound + 4 * 2**20, "the consumer buffered beyond its read-ahead"
    assert growth < 1.5 * bound + 8 * 2**20
