"""Subscriptions over the in-memory read transport (liftbridge_nats._memread): positions,
fail-over, the server's end statuses, stalls, hand-over and bounded read-ahead, without
a broker. The same behaviour against real brokers is in tests/integration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liftbridge_nats import (
    NoSuchStreamError,
    PartitionPausedError,
    RpcTimeoutError,
    StartPosition,
)
from liftbridge_nats._memread import (
    NOT_LEADER,
    PAUSED,
    READONLY_END,
    STREAM_DELETED,
    UNAVAILABLE,
    MemoryReads,
    ServerEnd,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._read_transport import PartitionFeed, ReadRoutes, ReadTransport
from liftbridge_nats._subscription import Subscription, subscription_options


def subscribe(reads: MemoryReads, stream: str = "s", **kwargs: Any) -> Subscription[Any, Any]:
    group = kwargs.pop("group", None)
    return Subscription(
        reads,
        subscription_options(stream, **kwargs),
        transport=reads,
        resubscribe_wait=1.0,
        group=group,
    )


async def take(sub: Subscription[Any, Any], count: int) -> list[int]:
    async with asyncio.timeout(2):
        return [(await anext(sub)).offset for _ in range(count)]


def test_the_memory_reads_are_a_read_transport_and_routes() -> None:
    # (mypy checks the assignments; the protocols are not runtime-checkable.)
    reads = MemoryReads()
    transport: ReadTransport = reads
    routes: ReadRoutes = reads
    assert [transport, routes] == [reads, reads]


async def test_reads_from_an_offset_and_stops_at_the_stop_offset() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"m%d" % i for i in range(10)])
    sub = subscribe(reads, start_offset=3, stop_offset=6)
    got = [(m.offset, m.value) async for m in sub]
    assert got == [(3, b"m3"), (4, b"m4"), (5, b"m5"), (6, b"m6")]
    assert sub.closed


async def test_new_only_sees_what_comes_after_start() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"old"] * 3)
    async with subscribe(reads) as sub:
        reads.append("s", b"new")
        message = await asyncio.wait_for(anext(sub), 2)
    assert (message.offset, message.value) == (3, b"new")
    assert reads.open_calls("s") == 0  # closing the subscription ended the call


@pytest.mark.parametrize("end", [NOT_LEADER, UNAVAILABLE], ids=["not-leader", "unavailable"])
@pytest.mark.parametrize("reading", ["messages", "protos"])
async def test_a_broken_stream_resubscribes_after_the_last_delivered(
    end: ServerEnd, reading: str
) -> None:
    # Iterating and take_protos (the Spark source's way) resubscribe alike.
    read = take if reading == "messages" else take_protos
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 5)
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        assert await read(sub, 3) == [0, 1, 2]
        reads.move_leader()
        assert reads.end_calls("s", end) == 1
        reads.extend("s", [b"y"] * 2)
        # 3 and 4 were read ahead before the break: they come first, then the new call.
        assert await read(sub, 4) == [3, 4, 5, 6]  # no gap, no duplicate
        assert sub.resubscribes == 1
    first, second = reads.calls
    assert first.request.startPosition == api_pb2.EARLIEST
    assert (second.request.startPosition, second.start_offset) == (api_pb2.OFFSET, 5)
    assert (first.address, second.address) == ("memory:0", "memory:1")


@pytest.mark.parametrize("reading", ["messages", "protos"])
async def test_a_resubscription_that_replays_delivered_messages_skips_them(
    reading: str,
) -> None:
    """A new leader may start below the requested offset: the reader drops what the
    subscription delivered before, iterated or taken as protobufs."""
    read = take if reading == "messages" else take_protos
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 4)
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        assert await read(sub, 3) == [0, 1, 2]
        reads.end_calls("s", NOT_LEADER)
        # Serve the next call from the beginning, as a lagging leader might.
        original = reads._range
        reads._range = lambda part, req: (0, None, None)  # type: ignore[method-assign]
        try:
            assert await read(sub, 1) == [3]
        finally:
            reads._range = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("end", "error"),
    [(STREAM_DELETED, NoSuchStreamError), (PAUSED, PartitionPausedError)],
    ids=["deleted", "paused"],
)
async def test_the_server_ending_a_stream_for_good_is_raised_after_its_messages(
    end: ServerEnd, error: type[Exception]
) -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    sub = subscribe(reads, start_position=StartPosition.EARLIEST)
    assert await take(sub, 2) == [0, 1]
    reads.end_calls("s", end)
    with pytest.raises(error):
        await asyncio.wait_for(anext(sub), 2)
    assert sub.closed
    assert len(reads.calls) == 1  # no resubscription


async def test_the_end_of_a_readonly_partition_ends_the_iteration() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    sub = subscribe(reads, start_position=StartPosition.EARLIEST)
    assert await take(sub, 2) == [0, 1]
    reads.end_calls("s", READONLY_END)
    assert [m async for m in sub] == []
    assert sub.closed


async def test_a_refused_resubscription_is_tried_again() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 3)
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        assert await take(sub, 1) == [0]
        reads.refuse("s", NOT_LEADER)
        reads.end_calls("s", UNAVAILABLE)
        reads.extend("s", [b"y"] * 2)
        assert await take(sub, 4) == [1, 2, 3, 4]
    assert [c.start_offset for c in reads.calls[1:]] == [3, 3]
    assert reads.refreshes >= 1


async def test_a_stalled_partition_times_the_first_subscribe_out() -> None:
    reads = MemoryReads(timeout=0.05)
    reads.stall("s")
    with pytest.raises(RpcTimeoutError):
        await subscribe(reads).start()
    assert reads.open_calls("s") == 0  # the timed-out calls were cancelled


async def test_a_stalled_stream_delivers_once_released() -> None:
    reads = MemoryReads()
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        reads.stall("s")
        reads.append("s", b"late")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(sub), 0.02)
        reads.stall("s", stalled=False)
        assert await take(sub, 1) == [0]


async def test_reconnect_drops_a_silent_stream_and_resubscribes_after_what_was_taken() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    sub = subscribe(reads, start_offset=0)
    assert await take(sub, 2) == [0, 1]
    reads.stall("s")
    reads.move_leader()
    feed: PartitionFeed = sub
    feed.reconnect("another broker leads the partition now")
    assert not feed.streaming and reads.open_calls("s") == 0
    reads.stall("s", stalled=False)
    reads.append("s", b"y")
    assert await take(sub, 1) == [2]
    assert (feed.address, reads.calls[-1].start_offset) == ("memory:1", 2)
    await sub.aclose()


async def test_a_group_member_subscribing_ends_the_previous_members_stream() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    first = subscribe(
        reads,
        start_offset=0,
        group=api_pb2.Consumer(groupId="g", consumerId="a", groupEpoch=1),
    )
    second = subscribe(
        reads,
        start_offset=0,
        group=api_pb2.Consumer(groupId="g", consumerId="b", groupEpoch=2),
    )
    feed: PartitionFeed = first
    await first.start()
    await second.start()
    await asyncio.sleep(0)
    assert feed.handed_over
    feed.take_many(10)  # what it read ahead, then the end: the iteration is over
    assert feed.closed
    assert not await feed.ensure_open()  # no resubscription
    assert await take(second, 2) == [0, 1]
    older = subscribe(
        reads,
        start_offset=0,
        group=api_pb2.Consumer(groupId="g", consumerId="c", groupEpoch=1),
    )
    await older.start()  # refused as not assigned: the subscription just ends
    assert older.closed
    assert older.refused and not feed.refused  # a refusal is not a hand-over
    await second.aclose()


async def test_read_ahead_stays_within_its_bytes_bound() -> None:
    """Nobody reads: the transport sends what the reader granted, and no more."""
    reads = MemoryReads(max_bytes=16 * 1024)
    reads.extend("s", [b"v" * 1000] * 100)
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        await sub.start()
        for _ in range(20):
            await asyncio.sleep(0)
        reader = sub._reader
        assert reader is not None
        assert 0 < reader.buffered_bytes <= 16 * 1024
        assert reader.read_ahead_limit <= 16 * 1024
        got = await take(sub, 100)  # taking reopens the window
    assert got == list(range(100))


async def test_a_message_larger_than_the_read_ahead_gets_through_whole() -> None:
    reads = MemoryReads(max_bytes=16 * 1024)
    reads.append("s", b"b" * 40_000)
    reads.append("s", b"small")
    sub = subscribe(reads, start_position=StartPosition.EARLIEST, stop_offset=1)
    assert [len(m.value) async for m in sub] == [40_000, 5]


async def test_take_many_hands_over_what_is_buffered_without_waiting() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 10)
    async with subscribe(reads, start_position=StartPosition.EARLIEST) as sub:
        feed: PartitionFeed = sub
        for _ in range(5):
            await asyncio.sleep(0)
        assert feed.buffered
        assert feed.peek_offset() == 0
        assert [m.offset for m in feed.take_many(4)] == [0, 1, 2, 3]
        assert [m.offset for m in feed.take_many(100)] == list(range(4, 10))
        assert feed.take_many(1) == []
        assert feed.streaming
    assert not feed.streaming


# ------------------------------------------------------------------ parsed protobufs


async def take_protos(sub: Subscription[Any, Any], count: int, limit: int = 3) -> list[int]:
    """Offsets of ``count`` messages read with take_protos and wait_buffered, as the
    Spark source reads them (fewer if the iteration ends)."""
    out: list[int] = []
    async with asyncio.timeout(2):
        while len(out) < count:
            got = sub.take_protos(limit)
            assert len(got) <= limit
            if not got:
                if sub.closed:
                    break
                await sub.wait_buffered()
            out.extend(p.offset for p in got)
    return out


async def test_take_protos_stops_at_the_stop_offset() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"m%d" % i for i in range(10)])
    sub = subscribe(reads, start_offset=3, stop_offset=6)
    assert await take_protos(sub, 100, limit=100) == [3, 4, 5, 6]
    assert sub.closed and sub.last_offset == 6
    assert sub.take_protos(5) == []
    assert reads.open_calls("s") == 0


async def test_take_protos_cuts_a_batch_at_the_stop_offset() -> None:
    """Whatever the server sends past the stop offset is not delivered."""
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 10)
    sub = subscribe(reads, start_position=StartPosition.EARLIEST, stop_offset=4)
    original = reads._range
    reads._range = lambda part, req: (0, None, None)  # type: ignore[method-assign]
    try:
        await sub.start()
        assert await take_protos(sub, 100, limit=100) == [0, 1, 2, 3, 4]
    finally:
        reads._range = original  # type: ignore[method-assign]
    assert sub.closed and sub.last_offset == 4


async def test_take_protos_raises_the_end_for_good_after_the_messages() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    sub = subscribe(reads, start_position=StartPosition.EARLIEST)
    assert await take_protos(sub, 2) == [0, 1]
    reads.end_calls("s", STREAM_DELETED)
    with pytest.raises(NoSuchStreamError):
        await take_protos(sub, 1)
    assert sub.closed
    assert len(reads.calls) == 1


async def test_take_protos_ends_with_a_readonly_partition() -> None:
    reads = MemoryReads()
    reads.extend("s", [b"x"] * 2)
    sub = subscribe(reads, start_position=StartPosition.EARLIEST)
    assert await take_protos(sub, 2) == [0, 1]
    reads.end_calls("s", READONLY_END)
    assert await take_protos(sub, 5) == []
    assert sub.closed
