"""``publish()`` calls over ``max_inflight`` wait in the ledger's queue as the call they
return (no task, no coroutine of their own), over the in-memory transport: order,
cancellation, close, argument errors and the slow way out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liftbridge_nats import Ack, NotConnectedError, Publisher, PublisherClosedError
from liftbridge_nats._inflight import AckFuture, PublishCall
from liftbridge_nats._memtransport import MemoryTransport, Sent


def _values(sent: list[Sent]) -> list[bytes]:
    return [s.published.message.value for s in sent]


async def _ack_everything(transport: MemoryTransport, until: asyncio.Future[Any]) -> None:
    """Ack whatever was delivered, as a server would, until ``until`` is done."""
    acked = 0
    while not until.done():
        for sent in transport.delivered[acked:]:
            transport.ack(sent)
        acked = len(transport.delivered)
        await asyncio.sleep(0.001)


async def test_calls_over_max_inflight_are_queued_without_a_task_and_sent_in_order() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=4) as pub:
        tasks_before = len(asyncio.all_tasks())
        calls = [pub.publish("s", b"v%d" % i) for i in range(10)]
        assert all(isinstance(call, PublishCall) for call in calls)
        assert len(asyncio.all_tasks()) == tasks_before
        await asyncio.sleep(0.01)
        assert pub.pending == 4 and _values(transport.delivered) == [b"v0", b"v1", b"v2", b"v3"]
        gathered = asyncio.gather(*calls)
        await _ack_everything(transport, gathered)
        acks = gathered.result()
    assert [ack.offset for ack in acks if isinstance(ack, Ack)] == list(range(10))
    assert _values(transport.delivered) == [b"v%d" % i for i in range(10)]
    assert pub.stats.fast_path_sent == 10 and pub.stats.public_api_sent == 0


async def test_flush_waits_for_queued_calls_too() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=2) as pub:
        calls = [pub.publish("s", b"v%d" % i) for i in range(7)]
        flushing = asyncio.ensure_future(pub.flush())
        await asyncio.sleep(0.01)
        for sent in transport.delivered[:2]:  # the two in flight when flush began
            transport.ack(sent)
        await asyncio.sleep(0.01)
        assert not flushing.done()  # the queued calls were published too
        await _ack_everything(transport, flushing)
        assert all(isinstance(call, PublishCall) and call.done() for call in calls)
    assert _values(transport.delivered) == [b"v%d" % i for i in range(7)]


async def test_queued_calls_and_waiting_publish_async_keep_their_order() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=4) as pub:
        first = [await pub.publish_async("s", b"x%d" % i) for i in range(4)]
        queued_a = pub.publish("s", b"a")
        waiting_b = asyncio.ensure_future(pub.publish_async("s", b"b"))
        await asyncio.sleep(0)  # b is waiting for room now, behind a
        queued_c = pub.publish("s", b"c")
        await asyncio.sleep(0.01)
        for sent in transport.delivered:  # room for all three at once
            transport.ack(sent)
        everything = asyncio.gather(*first, queued_a, waiting_b, queued_c)
        await _ack_everything(transport, everything)
        await waiting_b.result()
    # c, queued last, sends itself only after b's task (woken first) has sent b.
    assert _values(transport.delivered) == [b"x0", b"x1", b"x2", b"x3", b"a", b"b", b"c"]


async def test_a_queued_call_behind_a_woken_task_waits_for_that_task() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=8) as pub:
        first = [await pub.publish_async("s", b"x%d" % i) for i in range(8)]
        waiting_b = asyncio.ensure_future(pub.publish_async("s", b"b"))
        await asyncio.sleep(0)
        queued_c = pub.publish("s", b"c")
        await asyncio.sleep(0.01)
        for sent in transport.delivered:  # the second ack wakes b, with room for c too
            transport.ack(sent)
        everything = asyncio.gather(*first, waiting_b, queued_c)
        await _ack_everything(transport, everything)
        await waiting_b.result()
    assert _values(transport.delivered)[8:] == [b"b", b"c"]


async def test_a_cancelled_queued_call_is_never_sent_and_holds_nobody_up() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=8) as pub:
        first = [await pub.publish_async("s", b"x") for _ in range(8)]
        queued = pub.publish("s", b"cancelled")
        assert isinstance(queued, PublishCall)
        assert queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        await asyncio.sleep(0.01)
        # One ack leaves room (7 of 8) above the low-water mark: nothing wakes the
        # queue, which holds only the cancelled call. A new publish must not wait.
        transport.ack(transport.delivered[0])
        later = await asyncio.wait_for(pub.publish_async("s", b"later"), 1)
        also = pub.publish("s", b"also")
        await asyncio.sleep(0.01)
        everything = asyncio.gather(*first, later, also)
        await _ack_everything(transport, everything)
    assert b"cancelled" not in _values(transport.delivered)
    assert _values(transport.delivered)[-2:] == [b"later", b"also"]


async def test_a_queued_call_works_in_a_task_and_a_bad_argument_raises_when_awaited() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1) as pub:
        first = await pub.publish_async("s", b"x")
        task = asyncio.create_task(pub.publish("s", b"in a task"))
        bad = pub.publish("s", "not bytes")  # type: ignore[arg-type]
        good = pub.publish("s", b"good")
        everything = asyncio.gather(first, task, good)
        await _ack_everything(transport, everything)
        with pytest.raises(TypeError):
            await bad
    assert _values(transport.delivered) == [b"x", b"in a task", b"good"]
    assert pub.stats.acked == 3 and not pub._failed


async def test_close_fails_queued_calls_as_not_sent() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport, max_inflight=1).start()
    first = await pub.publish_async("s", b"x")
    queued = pub.publish("s", b"never")
    await pub.close(timeout=0)
    with pytest.raises(PublisherClosedError):
        await queued
    with pytest.raises(PublisherClosedError):
        await pub.publish("s", b"after close")
    assert first.done() and _values(transport.delivered) == [b"x"]


async def _queued_behind_a_full_outbox(
    transport: MemoryTransport, pub: Publisher[Any, Any], *, connection_closes: bool = False
) -> tuple[AckFuture, PublishCall]:
    """A queued call woken while NATS is down and the outbox is full (max_inflight=2,
    max_buffered_bytes=0): it goes the slow way, in a task of the publisher's.
    ``connection_closes``: the connection closes for good before it is woken. Returns
    the future of the message in the outbox and the call."""
    first = await pub.publish_async("s", b"sent")
    await asyncio.sleep(0.01)  # delivered
    transport.disconnect()
    kept = await pub.publish_async("s", b"kept")  # in the outbox, which it fills
    queued = pub.publish("s", b"queued")
    assert isinstance(queued, PublishCall)
    if connection_closes:
        transport.close()
    transport.ack(transport.delivered[0])  # room: the queued call is woken
    await first
    return kept, queued


async def test_a_queued_call_the_fast_path_refuses_goes_the_slow_way() -> None:
    # Woken while NATS is down and the outbox full: it waits for room in a task of the
    # publisher's, then goes out after the outbox's message once NATS is back, and is acked.
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=2, max_buffered_bytes=0) as pub:
        kept, queued = await _queued_behind_a_full_outbox(transport, pub)
        await asyncio.sleep(0.01)
        assert not queued.done() and len(pub._live().queued) == 1
        transport.reconnect()
        await _ack_everything(transport, asyncio.gather(kept, queued))
        ack = await queued
        assert not pub._live().queued
    assert isinstance(ack, Ack)
    assert _values(transport.delivered) == [b"sent", b"kept", b"queued"]


async def test_a_queued_call_closed_while_it_waits_for_the_outbox_lets_go_of_its_message() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport, max_inflight=2, max_buffered_bytes=0).start()
    kept, queued = await _queued_behind_a_full_outbox(transport, pub)
    await asyncio.sleep(0.01)
    assert not queued.done() and hasattr(queued, "flight")  # prepared, waits for room
    assert pub.pending == 2
    await pub.close(timeout=0)
    with pytest.raises(PublisherClosedError):
        await queued
    assert not hasattr(queued, "flight")
    with pytest.raises(PublisherClosedError):
        await kept
    # The outbox's message failed as a publish; the call raised as publish() does when
    # the publisher closes under it, uncounted.
    assert pub._metric_counts().failed == {"liftbridge_nats.PublisherClosedError": 1}
    assert _values(transport.delivered) == [b"sent"]


async def test_a_queued_call_the_closed_connection_refuses_lets_go_of_its_message() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport, max_inflight=2, max_buffered_bytes=0).start()
    try:
        kept, queued = await _queued_behind_a_full_outbox(transport, pub, connection_closes=True)
        with pytest.raises(NotConnectedError):
            await queued
        assert not hasattr(queued, "flight")
        assert queued not in pub._live().ledger.futures()
        with pytest.raises(NotConnectedError):
            await kept
        # The outbox's message failed as a publish; the call raised as publish() does
        # when the connection is closed, uncounted.
        assert pub._metric_counts().failed == {"liftbridge_nats.NotConnectedError": 1}
    finally:
        await pub.close(timeout=0)
    assert _values(transport.delivered) == [b"sent"]
