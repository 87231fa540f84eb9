"""Resource hygiene of the public API: idempotent close, safe cancellation at every
await, nothing left pending, no warning (the suite runs with ``-W error``; these tests
also collect garbage and check for warnings themselves, so that an unclosed socket or
a never-retrieved exception fails the test that caused it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    Ack,
    AckPolicy,
    Client,
    LiftbridgeError,
    Message,
    Publisher,
    PublisherClosedError,
    StartPosition,
    StopPosition,
)
from liftbridge_nats.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")


@pytest.fixture
def no_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail on any warning, on asyncio's "never retrieved" / "destroyed" log lines, and
    on errors nats-py logs (e.g. its read loop failing after a cancelled flush)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with caplog.at_level(logging.ERROR):
            yield
            gc.collect()
    problems = [str(w.message) for w in caught]
    problems += [
        f"{r.name}: {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if r.levelno >= logging.ERROR and (r.name == "asyncio" or r.name.startswith("nats"))
    ]
    assert not problems, problems


def _other_tasks() -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def _settle() -> None:
    """Let callbacks of cancelled work run."""
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)


async def _cancel_after(
    rng: random.Random, awaitable: Awaitable[T]
) -> tuple[str, T | LiftbridgeError | None]:
    """Run ``awaitable`` as a task, cancel it after 0-7 loop iterations (or a short sleep)."""
    task = asyncio.ensure_future(awaitable)
    steps = rng.randrange(9)
    if steps == 8:
        await asyncio.sleep(rng.choice((0.0005, 0.002, 0.01)))
    else:
        for _ in range(steps):
            await asyncio.sleep(0)
    task.cancel()
    try:
        return "done", await task
    except asyncio.CancelledError:
        return "cancelled", None
    except LiftbridgeError as exc:
        return "error", exc


@pytest.fixture
async def stream(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> AsyncIterator[str]:
    name = unique_name("hyg")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        yield name
        await client.delete_stream(name)


# ------------------------------------------------------------------ close


async def test_publisher_close_is_idempotent_and_concurrent(
    nats_client: NATS, stream: str, no_warnings: None
) -> None:
    before = _other_tasks()
    subs_before = len(nats_client._subs)
    pub = Publisher(nats_client)
    await pub.close()  # never started: fine
    await pub.close()
    pub = Publisher(nats_client)
    await pub.start()
    futures = [await pub.publish_async(stream, b"x%d" % i) for i in range(100)]
    await asyncio.gather(pub.close(), pub.close(), pub.close())
    await pub.close()
    assert all(f.done() for f in futures)
    for f in futures:
        assert isinstance(f.result() if not f.exception() else f.exception(), Ack | LiftbridgeError)
    assert pub.closed and pub.pending == 0
    with pytest.raises(PublisherClosedError):
        await pub.start()
    await _settle()
    assert _other_tasks() <= before, _other_tasks() - before
    assert len(nats_client._subs) == subs_before, "the ack subscription was left behind"


async def test_client_close_is_idempotent(
    liftbridge_cluster: LocalCluster, no_warnings: None
) -> None:
    before = _other_tasks()
    never_connected = Client(liftbridge_cluster.brokers)
    await never_connected.close()
    await never_connected.close()
    client = Client(liftbridge_cluster.brokers)
    async with client:
        await client.fetch_metadata()
    await client.close()
    await asyncio.gather(client.close(), client.close())
    await _settle()
    assert _other_tasks() <= before


async def test_subscription_close_is_idempotent(
    liftbridge_cluster: LocalCluster, stream: str, no_warnings: None
) -> None:
    async with Client(liftbridge_cluster.brokers) as client:
        sub = client.subscribe(stream)
        await sub.start()
        await sub.aclose()
        await sub.aclose()
        assert [m async for m in sub] == []
        never_started = client.subscribe(stream)
        await never_started.aclose()


# ------------------------------------------------------------------ cancellation


async def test_cancel_publish_at_random_points(
    nats_client: NATS, stream: str, no_warnings: None
) -> None:
    rng = random.Random(61)
    before = _other_tasks()
    outcomes: dict[str, int] = {"done": 0, "cancelled": 0, "error": 0}
    # max_inflight=4 makes publishes also wait for room, another await to cancel at.
    async with Publisher(nats_client, max_inflight=4, ack_timeout=5) as pub:
        for i in range(300):
            method = pub.publish if i % 2 else pub.publish_async
            kind, result = await _cancel_after(
                rng, method(stream, b"c%d" % i, ack_policy=AckPolicy.ALL)
            )
            outcomes[kind] += 1
            if kind == "done" and isinstance(result, asyncio.Future):
                # publish_async returned before the cancel: its future still ends.
                with contextlib.suppress(LiftbridgeError):
                    await result
        await pub.flush(timeout=10)
        await _settle()
        assert pub.pending == 0, f"{pub.pending} publishes left pending"
        # The publisher still works.
        assert await pub.publish(stream, b"after", ack_policy=AckPolicy.ALL) is not None
    await _settle()
    assert outcomes["cancelled"] > 50 and outcomes["done"] > 10, outcomes
    assert _other_tasks() <= before


async def test_cancel_publisher_start_and_close(
    nats_client: NATS, stream: str, no_warnings: None
) -> None:
    rng = random.Random(7)
    before = _other_tasks()
    subs_before = len(nats_client._subs)
    reconnects_before = nats_client.stats["reconnects"]
    for _ in range(40):
        pub = Publisher(nats_client, ack_timeout=2)
        kind, _ = await _cancel_after(rng, pub.start())
        if kind == "done":
            futures = [await pub.publish_async(stream, b"z") for _ in range(20)]
            await _cancel_after(rng, pub.close())
            # Whatever the cancel interrupted, a second close finishes the job.
            await pub.close()
            assert all(f.done() for f in futures) and pub.pending == 0
            for f in futures:
                if not f.cancelled():
                    f.exception()  # retrieved: no "never retrieved" warning
        else:
            await pub.close()
    await _settle()
    assert _other_tasks() <= before, _other_tasks() - before
    assert len(nats_client._subs) == subs_before, "cancelled starts left subscriptions"
    # A cancelled nc.flush() inside start() must not break nats-py's read loop: the
    # connection still receives (an ack comes back) without reconnecting.
    async with Publisher(nats_client) as alive:
        assert await alive.publish(stream, b"alive", timeout=5) is not None
    assert nats_client.stats["reconnects"] == reconnects_before


async def test_cancel_subscription_reads_at_random_points(
    liftbridge_cluster: LocalCluster, nats_client: NATS, stream: str, no_warnings: None
) -> None:
    """Cancelling a read loses no message and delivers none twice."""
    total = 300
    async with Publisher(nats_client) as pub:
        await pub.publish_batch(stream, [b"s%d" % i for i in range(total)])
    rng = random.Random(5)
    seen: list[int] = []
    cancelled = 0
    async with (
        Client(liftbridge_cluster.brokers) as client,
        client.subscribe(
            stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        ) as sub,
    ):
        iterator = aiter(sub)
        while len(seen) < total:
            kind, message = await _cancel_after(rng, anext(iterator))
            if kind == "done":
                assert isinstance(message, Message), message
                seen.append(message.offset)
            else:
                cancelled += 1
    assert cancelled > 20
    assert seen == list(range(total)), "a cancelled read lost or repeated a message"


async def test_cancel_client_calls_at_random_points(
    liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str], no_warnings: None
) -> None:
    rng = random.Random(11)
    before = _other_tasks()
    for i in range(30):
        client = Client(liftbridge_cluster.brokers, timeout=5)
        try:
            kind, _ = await _cancel_after(rng, client.connect())
            if kind != "done":
                continue
            name = unique_name("cc")
            await _cancel_after(rng, client.create_stream(name, name))
            await _cancel_after(rng, client.fetch_metadata())
            await _cancel_after(rng, client.fetch_partition_metadata(name, 0))
            if i % 3 == 0:
                # Cancelled or not, the client is usable afterwards.
                with contextlib.suppress(LiftbridgeError):
                    await client.create_stream(name, name)
                await client.delete_stream(name)
        finally:
            await client.close()
    await _settle()
    assert _other_tasks() <= before, _other_tasks() - before
