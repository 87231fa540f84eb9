"""Subscriptions read by a thread each (see liftbridge_nats._stream_reader), against a
real server: no reader thread outlives its subscription or the client, a cancelled
wait loses nothing, and many readers at once each see the whole partition."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from liftbridge_nats.client import Client
from liftbridge_nats.errors import ClientClosedError
from liftbridge_nats.messages import AckPolicy, StartPosition, StopPosition
from liftbridge_nats.publisher import Publisher


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("liftbridge-subscribe ")]


async def until_no_reader_thread(within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while reader_threads():
        assert time.monotonic() < deadline, f"reader threads left: {reader_threads()}"
        await asyncio.sleep(0.01)


async def fill(nats_client: Any, name: str, count: int) -> None:
    async with Publisher(nats_client) as pub:
        futures = [
            await pub.publish_nowait(name, b"%d" % i, ack_policy=AckPolicy.LEADER)
            for i in range(count)
        ]
        await asyncio.gather(*futures)


async def test_no_reader_thread_outlives_aclose_or_the_client(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("threads")
    assert reader_threads() == []
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        for i in range(5):
            await client.publish(name, b"%d" % i)

        # Closed by `async with` in the middle of the stream.
        async with client.subscribe(name, start_position=StartPosition.EARLIEST) as sub:
            assert (await anext(sub)).offset == 0
            assert len(reader_threads()) == 1
        assert reader_threads() == []

        # Ended by its stop offset: the thread is stopped then, and joined by aclose().
        sub = client.subscribe(name, start_offset=0, stop_offset=4)
        async with asyncio.timeout(10):
            assert [m.offset async for m in sub] == [0, 1, 2, 3, 4]
        assert sub.closed
        await sub.aclose()
        assert reader_threads() == []

        # Nothing to read (the server answers with an error status): no thread either.
        async with asyncio.timeout(10):
            sub = client.subscribe(
                name, start_position=StartPosition.EARLIEST, stop_time=time.time_ns() - 10**12
            )
            assert [m.offset async for m in sub] == []
        assert reader_threads() == []

        # Never closed: the client's close stops and joins it.
        left_open = client.subscribe(name, start_position=StartPosition.EARLIEST)
        assert (await asyncio.wait_for(anext(left_open), 10)).offset == 0
        assert len(reader_threads()) == 1
    assert reader_threads() == []
    async with asyncio.timeout(5):
        rest = [m.offset async for m in left_open]  # what was read ahead, then the end
    assert rest == list(range(1, 1 + len(rest)))
    assert left_open.closed

    # The metadata is still cached, but a closed client starts no new reader.
    with pytest.raises(ClientClosedError):
        await client.subscribe(name, start_position=StartPosition.EARLIEST).start()
    assert reader_threads() == []


async def test_closing_ends_a_waiting_iteration(liftbridge_cluster: Any, unique_name: Any) -> None:
    name = unique_name("waiting")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        sub = client.subscribe(name)
        await sub.start()
        waiting = asyncio.ensure_future(anext(sub, None))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await sub.aclose()  # from another task than the waiting one
        assert await asyncio.wait_for(waiting, 5) is None

        sub = client.subscribe(name)
        await sub.start()
        waiting = asyncio.ensure_future(anext(sub, None))
        await asyncio.sleep(0.1)
        assert not waiting.done()
    assert await asyncio.wait_for(waiting, 5) is None  # ended by the client's close
    assert sub.closed
    assert reader_threads() == []


async def test_aclose_during_start_leaves_no_thread(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("racing")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.fetch_metadata([name])
        for i in range(30):
            sub = client.subscribe(name)
            starting = asyncio.ensure_future(sub.start())
            await asyncio.sleep(0.0002 * i)  # close before, during and after the open
            await asyncio.wait_for(sub.aclose(), 5)
            await asyncio.wait_for(starting, 5)
            assert sub.closed
            assert await anext(sub, None) is None
            assert reader_threads() == []


async def test_a_dropped_subscription_stops_its_thread(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("dropped")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.publish(name, b"x")
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
        assert (await asyncio.wait_for(anext(sub), 10)).value == b"x"
        assert len(reader_threads()) == 1
        del sub
        gc.collect()
        await until_no_reader_thread()


async def test_timed_out_waits_lose_no_message(
    liftbridge_cluster: Any, unique_name: Any, nats_client: Any
) -> None:
    name = unique_name("waits")
    count = 3000
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with client.subscribe(name) as sub:
            producer = asyncio.ensure_future(fill(nats_client, name, count))
            got: list[int] = []
            timeouts = 0
            deadline = time.monotonic() + 30
            while len(got) < count and time.monotonic() < deadline:
                try:
                    msg = await asyncio.wait_for(anext(sub), 0.0005)
                except TimeoutError:
                    timeouts += 1
                    continue
                got.append(msg.offset)
            await producer
        assert got == list(range(count))
        assert timeouts > 0  # the waits really were cut short
        assert sub.resubscribes == 0


async def test_concurrent_readers_each_see_the_whole_partition(
    liftbridge_cluster: Any, unique_name: Any, nats_client: Any
) -> None:
    name = unique_name("many")
    count, readers = 20_000, 6
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await fill(nats_client, name, count)

        async def read_all() -> list[int]:
            sub = client.subscribe(
                name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
            )
            async with sub:
                return [m.offset async for m in sub]

        async with asyncio.timeout(60):
            results = await asyncio.gather(*(read_all() for _ in range(readers)))
        for offsets in results:
            assert offsets == list(range(count))
    assert reader_threads() == []
