"""Subscribe against a real server: every start and stop position yields exactly the
expected offsets; arguments are checked before anything is sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeAlias, TypedDict

import pytest

from liftbridge_nats import (
    Client,
    InvalidArgumentError,
    NoSuchStreamError,
    PartitionPausedError,
    StartPosition,
    StopPosition,
    Subscription,
)
from liftbridge_nats.testing import LocalCluster


async def offsets(sub: Subscription, within: float = 10.0) -> list[int]:
    async with asyncio.timeout(within), sub:
        return [msg.offset async for msg in sub]


# A client, a stream name, and the ten times in ns that the stream's messages straddle.
Ten: TypeAlias = tuple[Client, str, list[int]]


@pytest.fixture
async def ten(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> AsyncIterator[Ten]:
    """A client and a stream holding offsets 0..9; ``marks[i]`` is a time between i-1 and i."""
    name = unique_name("sub")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        marks = []
        for i in range(10):
            await asyncio.sleep(0.02)
            marks.append(time.time_ns())
            await asyncio.sleep(0.02)
            await client.publish_to_stream(
                name, b"m%d" % i, key=b"k%d" % i, headers={"n": b"%d" % i}
            )
        yield client, name, marks


async def test_earliest_to_latest(ten: Ten) -> None:
    client, name, _ = ten
    sub = client.subscribe(
        name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
    )
    async with asyncio.timeout(10), sub:
        msgs = [m async for m in sub]
    assert [m.offset for m in msgs] == list(range(10))
    m = msgs[3]
    assert (m.stream, m.partition, m.value, m.key, m.headers["n"]) == (name, 0, b"m3", b"k3", b"3")
    assert m.subject == name and m.timestamp > 0


async def test_offset_range(ten: Ten) -> None:
    client, name, _ = ten
    assert await offsets(client.subscribe(name, start_offset=4, stop_offset=6)) == [4, 5, 6]
    assert await offsets(
        client.subscribe(
            name,
            start_position=StartPosition.OFFSET,
            start_offset=9,
            stop_position=StopPosition.LATEST,
        )
    ) == [9]
    assert await offsets(client.subscribe(name, start_offset=0, stop_offset=0)) == [0]


async def test_latest(ten: Ten) -> None:
    client, name, _ = ten
    sub = client.subscribe(
        name, start_position=StartPosition.LATEST, stop_position=StopPosition.LATEST
    )
    assert await offsets(sub) == [9]


async def test_timestamps(ten: Ten) -> None:
    client, name, marks = ten
    sub = client.subscribe(name, start_time=marks[5], stop_position=StopPosition.LATEST)
    assert await offsets(sub) == [5, 6, 7, 8, 9]
    when = datetime.fromtimestamp(marks[3] / 1e9, tz=UTC)
    sub = client.subscribe(name, start_position=StartPosition.EARLIEST, stop_time=marks[7])
    assert await offsets(sub) == [0, 1, 2, 3, 4, 5, 6]
    sub = client.subscribe(name, start_time=when, stop_time=marks[6])
    assert await offsets(sub) == [3, 4, 5]


async def test_start_time_as_timedelta(ten: Ten) -> None:
    client, name, _ = ten
    await asyncio.sleep(1.0)
    for i in range(3):
        await client.publish_to_stream(name, b"recent%d" % i)
    sub = client.subscribe(
        name, start_time=timedelta(seconds=0.5), stop_position=StopPosition.LATEST
    )
    assert await offsets(sub) == [10, 11, 12]


async def test_new_only_sees_only_later_messages(ten: Ten) -> None:
    client, name, _ = ten
    sub = client.subscribe(name)
    await sub.start()
    try:
        for i in range(3):
            await client.publish_to_stream(name, b"new%d" % i)
        got = []
        async with asyncio.timeout(10):
            async for msg in sub:
                got.append(msg.offset)
                if len(got) == 3:
                    break
        assert got == [10, 11, 12]
    finally:
        await sub.aclose()
    assert sub.closed


async def test_stop_offset_waits_for_future_messages(ten: Ten) -> None:
    client, name, _ = ten
    sub = client.subscribe(name, start_offset=8, stop_offset=11)
    await sub.start()

    async def later() -> None:
        await asyncio.sleep(0.3)
        for i in range(4):
            await client.publish_to_stream(name, b"late%d" % i)

    task = asyncio.create_task(later())
    assert await offsets(sub) == [8, 9, 10, 11]
    await task


async def test_on_cancel_follows_until_closed(ten: Ten) -> None:
    client, name, _ = ten
    async with client.subscribe(name, start_offset=7) as sub:
        got = []
        async with asyncio.timeout(10):
            async for msg in sub:
                got.append(msg.offset)
                if msg.offset == 9:
                    await client.publish_to_stream(name, b"more")
                if msg.offset == 10:
                    break
    assert got == [7, 8, 9, 10]


async def test_empty_stream_ranges(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("empty")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        sub = client.subscribe(
            name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        )
        assert await offsets(sub) == []
        await client.publish_to_stream(name, b"x")
        sub = client.subscribe(
            name, start_position=StartPosition.EARLIEST, stop_time=time.time_ns() - 10**12
        )
        assert await offsets(sub) == []


async def test_unknown_stream_and_partition(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("nope")
    async with Client(liftbridge_cluster.brokers, timeout=3) as client:
        with pytest.raises(NoSuchStreamError):
            await client.subscribe(name).start()
        await client.create_stream(name, name)
        with pytest.raises(NoSuchStreamError):
            await client.subscribe(name, partition=3).start()


async def test_resume_on_subscribe(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("res")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.publish_to_stream(name, b"before")
        await client.pause_stream(name)
        paused_at = (
            (await client.stream_info(name, refresh=True)).partitions[0].pause_changed.latest
        )
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST, resume=True)
        async with asyncio.timeout(10), sub:
            assert (await sub.__anext__()).value == b"before"
        info = await client.stream_info(name, refresh=True)
        assert info.partitions[0].pause_changed.latest > paused_at


class SubscribeOptions(TypedDict, total=False):
    """The subscribe() options the cases below combine."""

    partition: int
    start_position: StartPosition
    start_offset: int
    start_time: timedelta
    stop_position: StopPosition
    stop_offset: int


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"start_position": StartPosition.OFFSET}, "start_offset"),
        ({"start_offset": -1}, "start_offset must be between 0"),
        ({"start_position": StartPosition.EARLIEST, "start_offset": 3}, "only goes with"),
        ({"start_position": StartPosition.TIMESTAMP}, "start_time"),
        ({"start_offset": 1, "start_time": timedelta(seconds=1)}, "not both"),
        ({"start_time": timedelta(seconds=-1)}, "negative"),
        ({"stop_position": StopPosition.OFFSET}, "stop_offset"),
        ({"stop_offset": -2}, "stop_offset must be between 0"),
        ({"start_offset": 5, "stop_offset": 4}, "before"),
        ({"stop_position": StopPosition.TIMESTAMP}, "stop_time"),
        ({"stop_position": StopPosition.LATEST, "stop_offset": 3}, "only goes with"),
        ({"partition": -1}, "partition"),
    ],
)
def test_arguments_checked_before_sending(kwargs: SubscribeOptions, match: str) -> None:
    # The client never connects: validation happens in subscribe() itself.
    client = Client(["127.0.0.1:1"])
    with pytest.raises(InvalidArgumentError, match=match):
        client.subscribe("s", **kwargs)


@pytest.mark.cluster
async def test_read_isr_replica(
    liftbridge_cluster3: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("isr")
    async with Client(liftbridge_cluster3.brokers) as client:
        await client.create_stream(name, name, replication_factor=3)
        for i in range(5):
            await client.publish_to_stream(name, b"%d" % i)

        # Followers catch up asynchronously; read until each replica read returns all.
        deadline = time.monotonic() + 15
        for _ in range(6):
            while True:
                sub = client.subscribe(
                    name,
                    start_position=StartPosition.EARLIEST,
                    stop_offset=4,
                    read_isr_replica=True,
                )
                try:
                    async with asyncio.timeout(3):
                        got = await offsets(sub)
                except TimeoutError:
                    got = []
                if got == [0, 1, 2, 3, 4] or time.monotonic() > deadline:
                    break
            assert got == [0, 1, 2, 3, 4]


async def test_waiting_with_a_timeout_keeps_the_subscription(ten: Ten) -> None:
    # Cancelling a gRPC read cancels the whole call; the iterator must shield it so
    # that `wait_for(anext(sub), t)` can be retried after a timeout.
    client, name, _ = ten
    async with client.subscribe(name) as sub:
        for _ in range(2):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(sub), 0.3)
        assert not sub.closed
        await client.publish_to_stream(name, b"late")
        msg = await asyncio.wait_for(anext(sub), 5)
        assert (msg.offset, msg.value, sub.resubscribes) == (10, b"late", 0)


async def test_changes_under_a_live_subscription(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    paused, deleted, readonly = unique_name("p"), unique_name("d"), unique_name("r")
    async with Client(liftbridge_cluster.brokers) as client:
        for name in (paused, deleted, readonly):
            await client.create_stream(name, name)
            await client.publish_to_stream(name, b"first")

        async def first_then(name: str, change: Callable[[str], Awaitable[object]]) -> Subscription:
            sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
            await sub.start()
            assert (await asyncio.wait_for(anext(sub), 5)).value == b"first"
            await change(name)
            return sub

        sub = await first_then(paused, client.pause_stream)
        with pytest.raises(PartitionPausedError, match="resume"):
            await asyncio.wait_for(anext(sub), 10)

        sub = await first_then(deleted, client.delete_stream)
        with pytest.raises(NoSuchStreamError, match="deleted"):
            await asyncio.wait_for(anext(sub), 10)

        # Readonly: the partition has ended, and so does the iteration (cleanly).
        sub = await first_then(readonly, client.set_stream_readonly)
        async with asyncio.timeout(10):
            assert [m async for m in sub] == []
        assert sub.closed
