"""Subscriptions read on the event loop over one HTTP/2 connection per broker (see
liftbridge_nats._read_pool), against a real server: no thread per subscription, no
call outlives its subscription or the client, a cancelled wait loses nothing, and
many readers at once each see the whole partition."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from liftbridge_nats import (
    AckPolicy,
    Client,
    ClientClosedError,
    Publisher,
    StartPosition,
    StopPosition,
)


def open_calls(client: Client) -> int:
    return client._router.pool.reads.open_calls


async def until_no_open_call(client: Client, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while open_calls(client):
        assert time.monotonic() < deadline, f"calls left open: {open_calls(client)}"
        await asyncio.sleep(0.01)


async def fill(nats_client: Any, name: str, count: int) -> None:
    async with Publisher(nats_client) as pub:
        futures = [
            await pub.publish_async(name, b"%d" % i, ack_policy=AckPolicy.LEADER)
            for i in range(count)
        ]
        await asyncio.gather(*futures)


async def test_no_call_outlives_aclose_or_the_client(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("calls")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        for i in range(5):
            await client.publish_to_stream(name, b"%d" % i)
        threads = threading.active_count()

        # Closed by `async with` in the middle of the stream.
        async with client.subscribe(name, start_position=StartPosition.EARLIEST) as sub:
            assert (await anext(sub)).offset == 0
            assert open_calls(client) == 1
        assert open_calls(client) == 0

        # Ended by its stop offset: the call is over then.
        sub = client.subscribe(name, start_offset=0, stop_offset=4)
        async with asyncio.timeout(10):
            assert [m.offset async for m in sub] == [0, 1, 2, 3, 4]
        assert sub.closed
        await sub.aclose()
        assert open_calls(client) == 0

        # Nothing to read (the server answers with an error status): no call left.
        async with asyncio.timeout(10):
            sub = client.subscribe(
                name, start_position=StartPosition.EARLIEST, stop_time=time.time_ns() - 10**12
            )
            assert [m.offset async for m in sub] == []
        assert open_calls(client) == 0

        # Many at once: one connection, and not one thread more.
        subs = [client.subscribe(name, start_position=StartPosition.EARLIEST) for _ in range(50)]
        for each in subs:
            await each.start()
        assert open_calls(client) == 50
        assert client._router.pool.reads.connections == 1
        assert threading.active_count() <= threads
        for each in subs:
            await each.aclose()
        assert open_calls(client) == 0

        # Never closed: the client's close cancels it.
        left_open = client.subscribe(name, start_position=StartPosition.EARLIEST)
        assert (await asyncio.wait_for(anext(left_open), 10)).offset == 0
        assert open_calls(client) == 1
    assert open_calls(client) == 0
    async with asyncio.timeout(5):
        rest = [m.offset async for m in left_open]  # what was read ahead, then the end
    assert rest == list(range(1, 1 + len(rest)))
    assert left_open.closed

    # The metadata is still cached, but a closed client starts no new reader.
    with pytest.raises(ClientClosedError):
        await client.subscribe(name, start_position=StartPosition.EARLIEST).start()
    assert open_calls(client) == 0


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
    assert open_calls(client) == 0


async def test_aclose_during_start_leaves_no_call(
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
            assert open_calls(client) == 0


async def test_a_dropped_subscription_cancels_its_call(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    name = unique_name("dropped")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.publish_to_stream(name, b"x")
        sub = client.subscribe(name, start_position=StartPosition.EARLIEST)
        assert (await asyncio.wait_for(anext(sub), 10)).value == b"x"
        assert open_calls(client) == 1
        del sub
        gc.collect()
        await until_no_open_call(client)


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
        assert open_calls(client) == 0
