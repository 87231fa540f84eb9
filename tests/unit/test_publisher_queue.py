"""``publish()`` calls over ``max_inflight`` wait in the ledger's queue as the call they
return (no task, no coroutine of their own), over the in-memory transport: order,
cancellation, close, argument errors and the slow way out; and the deadline of a call
that waits for room, on both faces, counted from the call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from liftbridge_nats import (
    Ack,
    AckTimeoutError,
    InvalidArgumentError,
    NotConnectedError,
    Publisher,
    PublisherClosedError,
    UnsentTimeoutError,
)
from liftbridge_nats._inflight import CID, DEADLINE, FINAL, AckFuture, PublishCall
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
    assert pub.stats.acked == 3 and not pub._pipeline.failed


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


# ------------------------------------------------------------------ deadlines from the call


def _never_sent(exc: BaseException) -> bool:
    return (
        isinstance(exc, UnsentTimeoutError)
        and isinstance(exc, AckTimeoutError)
        and not exc.maybe_stored
        and exc.retriable
        and "never sent" in str(exc)
        and "publishing it again is safe" in str(exc)
    )


async def test_a_queued_call_past_its_deadline_fails_never_sent_and_lets_go() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=2, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = [await pub.publish_async("s", b"x%d" % i) for i in range(2)]
        started = loop.time()
        queued = pub.publish("s", b"late", timeout=0.1, correlation_id="late-1")
        behind = pub.publish("s", b"behind")  # the default timeout: 5 s, still waiting
        with pytest.raises(AckTimeoutError) as caught:
            await queued
        # By its own deadline, not the 5 s of the messages that hold the room.
        assert 0.1 <= loop.time() - started < 1.0
        assert _never_sent(caught.value), caught.value
        assert caught.value.correlation_id == "late-1" and caught.value.subject == "s"
        assert type(caught.value) is UnsentTimeoutError
        assert pub.stats.timed_out == 1
        assert pub._metric_counts().failed == {"liftbridge_nats.UnsentTimeoutError": 1}
        # Expired, it holds nothing: not its arguments, not a place in the queue.
        waiting = pub._live().ledger.queued()
        assert len(waiting) == 1 and waiting[0].call is behind  # type: ignore[attr-defined]
        await _ack_everything(transport, asyncio.gather(*first, behind))
        assert isinstance(await behind, Ack)
    assert _values(transport.delivered) == [b"x0", b"x1", b"behind"]


async def test_a_queued_call_with_the_default_timeout_ends_by_ack_timeout_after_the_call() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=0.3) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x", timeout=5)
        started = loop.time()
        queued = pub.publish("s", b"late")
        with pytest.raises(AckTimeoutError) as caught:
            await queued
        assert 0.3 <= loop.time() - started < 1.0 and _never_sent(caught.value)
        first.cancel()
    assert _values(transport.delivered) == [b"x"]


async def test_a_queued_call_sent_late_gets_only_the_rest_of_its_time() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x")
        started = loop.time()
        queued = pub.publish("s", b"late", timeout=0.6)
        await asyncio.sleep(0.3)
        await asyncio.sleep(0.01)
        transport.ack(transport.delivered[0])  # room: it is sent now, 0.3 s into its time
        await first
        await asyncio.sleep(0.01)
        assert _values(transport.delivered) == [b"x", b"late"]
        assert isinstance(queued, AckFuture)
        # Its deadline is the call's, not 0.6 s after the send.
        assert queued.flight[FINAL] == queued.flight[DEADLINE]
        assert started + 0.6 <= queued.flight[DEADLINE] < started + 0.65
        with pytest.raises(AckTimeoutError) as caught:
            await queued  # never acked
        assert loop.time() - started < 0.85
        assert caught.value.maybe_stored  # it was sent: it may have been stored
        assert "never sent" not in str(caught.value)


@pytest.mark.parametrize("headers", [None, {"h": b"v"}], ids=["plain", "key+headers"])
async def test_a_queued_call_with_the_default_timeout_sent_late_keeps_its_call_deadline(
    headers: dict[str, bytes] | None,
) -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=0.6) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x", key=b"k", headers=headers)
        started = loop.time()
        queued = pub.publish("s", b"late", key=b"k", headers=headers)
        await asyncio.sleep(0.3)
        transport.ack(transport.delivered[0])  # room: it is sent now, 0.3 s into its time
        await first
        await asyncio.sleep(0.01)
        assert _values(transport.delivered) == [b"x", b"late"]
        assert transport.delivered[1].published.message.key == b"k"
        assert isinstance(queued, AckFuture)
        # ack_timeout after the call, not after the send; entered among the ledger's
        # deadlines in call order (no heap entry of its own).
        assert queued.flight[FINAL] == queued.flight[DEADLINE]
        assert started + 0.6 <= queued.flight[DEADLINE] < started + 0.65
        assert queued.flight[CID] not in pub._pipeline.ledger._unordered
        with pytest.raises(AckTimeoutError) as caught:
            await queued  # never acked
        assert loop.time() - started < 0.85
        assert caught.value.maybe_stored


async def test_a_queued_call_with_retries_keeps_the_whole_deadline_of_its_call() -> None:
    transport = MemoryTransport()
    async with Publisher(
        transport, max_inflight=1, ack_timeout=0.5, retry=True, retry_deadline=2
    ) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x")
        started = loop.time()
        queued = pub.publish("s", b"late")
        await asyncio.sleep(0.2)
        transport.ack(transport.delivered[0])
        await first
        assert isinstance(queued, AckFuture)
        sent = loop.time()
        # The whole publish ends retry_deadline after the call; this attempt waits
        # ack_timeout for its ack, as every attempt does.
        assert started + 2 <= queued.flight[FINAL] < started + 2.05
        assert sent + 0.5 - 0.05 <= queued.flight[DEADLINE] <= sent + 0.5
        queued.cancel()


async def test_a_shorter_deadline_behind_longer_ones_expires_first() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        first = await pub.publish_async("s", b"x")
        calls = [
            pub.publish("s", b"a"),
            pub.publish("s", b"b", timeout=0.1),
            pub.publish("s", b"c"),
        ]
        with pytest.raises(AckTimeoutError):
            await calls[1]
        assert not calls[0].done() and not calls[2].done()  # type: ignore[attr-defined]
        await _ack_everything(transport, asyncio.gather(first, calls[0], calls[2]))
    assert _values(transport.delivered) == [b"x", b"a", b"c"]


async def test_a_cancelled_or_sent_queued_call_is_never_expired() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        first = await pub.publish_async("s", b"x")
        cancelled = pub.publish("s", b"cancelled", timeout=0.05)
        sent = pub.publish("s", b"sent", timeout=0.2)
        assert cancelled.cancel()  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
        transport.ack(transport.delivered[0])
        await first
        await asyncio.sleep(0.01)
        assert _values(transport.delivered) == [b"x", b"sent"]
        transport.ack(transport.delivered[1])
        assert isinstance(await sent, Ack)
        await asyncio.sleep(0.3)  # past both deadlines: nothing fires
        assert pub.stats.timed_out == 0 and not pub._pipeline.failed
        assert not pub._live().ledger._queue_marks


async def test_publish_async_waiting_for_room_returns_a_failed_future_at_its_deadline() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x")
        started = loop.time()
        future = await pub.publish_async("s", b"late", timeout=0.2, correlation_id="c-1")
        assert 0.2 <= loop.time() - started < 1.0
        assert future.done()
        with pytest.raises(AckTimeoutError) as caught:
            await future
        assert _never_sent(caught.value) and caught.value.correlation_id == "c-1"
        assert pub.stats.timed_out == 1 and pub.pending == 1
        assert not pub._live().ledger.queued()
        # The room it waited for goes to the next publish at once.
        transport.ack(transport.delivered[0])
        await first
        after = await asyncio.wait_for(pub.publish_async("s", b"after"), 1)
        await _ack_everything(transport, after)
    assert _values(transport.delivered) == [b"x", b"after"]


async def test_publish_async_sent_late_gets_only_the_rest_of_its_time() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=0.6) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x", timeout=5)
        started = loop.time()
        waiting = asyncio.ensure_future(pub.publish_async("s", b"late"))
        await asyncio.sleep(0.3)
        transport.ack(transport.delivered[0])
        await first
        future = await waiting
        assert started + 0.6 <= future.flight[DEADLINE] < started + 0.65
        with pytest.raises(AckTimeoutError) as caught:
            await future
        assert loop.time() - started < 0.85 and caught.value.maybe_stored


async def test_the_awaited_face_without_the_fast_path_keeps_the_deadline_too() -> None:
    transport = MemoryTransport(fast_path=False)
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x")
        started = loop.time()
        with pytest.raises(AckTimeoutError) as caught:
            await pub.publish("s", b"late", timeout=0.2)
        assert 0.2 <= loop.time() - started < 1.0 and _never_sent(caught.value)
        first.cancel()
    assert _values(transport.delivered) == [b"x"]


async def test_the_awaited_face_without_the_fast_path_counts_from_the_call_not_the_await() -> None:
    # publish() returns a coroutine there; awaited late, its clock still began at the call.
    transport = MemoryTransport(fast_path=False)
    async with Publisher(transport, max_inflight=1, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"x")
        started = loop.time()
        late = pub.publish("s", b"late", timeout=0.3)
        await asyncio.sleep(0.2)
        first.cancel()  # room frees with 0.1 s of the call's time left
        with pytest.raises(AckTimeoutError) as caught:
            await late
        assert 0.3 <= loop.time() - started < 0.6, loop.time() - started
        assert caught.value.maybe_stored  # sent once room freed, with the rest of its time
        expired = pub.publish("s", b"expired", timeout=0.1)
        await asyncio.sleep(0.15)
        with pytest.raises(AckTimeoutError) as never:
            await expired
        assert _never_sent(never.value)
    assert _values(transport.delivered) == [b"x", b"late"]


async def test_a_bad_timeout_of_a_queued_call_raises_when_awaited() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1) as pub:
        first = await pub.publish_async("s", b"x")
        bad = pub.publish("s", b"y", timeout=-1)
        with pytest.raises(InvalidArgumentError, match="timeout must be > 0"):
            await bad
        with pytest.raises(InvalidArgumentError, match="timeout must be > 0"):
            await pub.publish_async("s", b"y", timeout=0)
        first.cancel()


async def test_a_queued_call_woken_into_a_full_outbox_still_ends_by_its_call_deadline() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=2, max_buffered_bytes=0, ack_timeout=5) as pub:
        loop = asyncio.get_running_loop()
        first = await pub.publish_async("s", b"sent")
        await asyncio.sleep(0.01)
        transport.disconnect()
        kept = await pub.publish_async("s", b"kept")
        started = loop.time()
        queued = pub.publish("s", b"queued", timeout=0.4)
        await asyncio.sleep(0.3)
        transport.ack(transport.delivered[0])  # room: woken, the slow way (NATS down)
        await first
        await asyncio.sleep(0.01)
        assert isinstance(queued, AckFuture) and not queued.done()
        assert started + 0.4 <= queued.flight[FINAL] < started + 0.45
        # Prepared and waiting for the outbox, it ends by the deadline of its call:
        # through the ledger's timer or the outbox's wait, whichever runs first.
        with pytest.raises((AckTimeoutError, NotConnectedError)):
            await queued
        assert 0.4 <= loop.time() - started < 0.9
        kept.cancel()


async def test_a_queued_call_once_sent_and_acked_is_not_kept_until_its_deadline() -> None:
    # A steady burst over capacity used to leave every sent call (its future and ack)
    # referenced from the queue's deadline marks until the deadline timer ran, an
    # ack_timeout later: hundreds of thousands of objects for the collector to scan.
    import gc
    import weakref

    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=2, ack_timeout=60) as pub:
        calls = [pub.publish("s", b"v%d" % i) for i in range(6)]
        refs = [weakref.ref(call) for call in calls]
        gathered = asyncio.gather(*calls)
        await _ack_everything(transport, gathered)
        del calls, gathered
        gc.collect()
        assert [ref() for ref in refs] == [None] * 6
        ledger = pub._live().ledger
        assert not ledger._queue_order and not ledger._queue_marks


async def test_queued_calls_of_both_kinds_expire_in_deadline_order() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=1, ack_timeout=0.2) as pub:
        first = pub.publish("s", b"x")
        calls = {
            "default-1": pub.publish("s", b"a"),
            "own-0.1": pub.publish("s", b"b", timeout=0.1),
            "own-0.3": pub.publish("s", b"c", timeout=0.3),
            "default-2": pub.publish("s", b"d"),
        }
        failed: list[str] = []
        for name, call in calls.items():
            call.add_done_callback(lambda _f, name=name: failed.append(name))  # type: ignore[attr-defined]
        results = await asyncio.gather(first, *calls.values(), return_exceptions=True)
    assert all(isinstance(r, AckTimeoutError) for r in results)
    assert failed == ["own-0.1", "default-1", "default-2", "own-0.3"]
    # The due calls failed before the room the first message's timeout freed was given
    # out: only the one with time left was sent (and then timed out waiting for its ack).
    assert _values(transport.delivered) == [b"x", b"c"]
