"""The Publisher, its sender and its ack listener over the in-memory transport: ordering,
backpressure, deadlines, cancellation and close, in milliseconds and without servers.
The integration and fault tests prove the same against real servers."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterable
from typing import Any

import pytest

from liftbridge_nats import (
    Ack,
    AckError,
    AckLostError,
    AckPolicy,
    AckTimeoutError,
    IncorrectOffsetError,
    InvalidArgumentError,
    NoRespondersError,
    NotConnectedError,
    Publisher,
    PublisherClosedError,
    PublishError,
)
from liftbridge_nats._inflight import CID, REPLY, AckFuture
from liftbridge_nats._memtransport import MemoryTransport, Sent, auto_ack


def _offsets(acks: Iterable[Ack | None]) -> list[int]:
    """The offsets of acks that must all be there."""
    out = []
    for ack in acks:
        assert ack is not None
        out.append(ack.offset)
    return out


def _offset(ack: Ack | None) -> int:
    return _offsets([ack])[0]


def _cids(sent: list[Sent]) -> list[str]:
    return [s.published.correlation_id for s in sent]


async def test_messages_go_out_and_are_acked_in_publishing_order() -> None:
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport) as pub:
        assert pub.fast_path
        futures = [await pub.publish_async("s", b"v%d" % i) for i in range(1000)]
        acks = await asyncio.gather(*futures)
        keyed = await pub.publish("s", b"k", key=b"key", headers={"h": b"1"})
    assert _offsets(acks) == list(range(1000))
    assert [s.published.message.value for s in transport.delivered[:1000]] == [
        b"v%d" % i for i in range(1000)
    ]
    assert isinstance(keyed, Ack) and keyed.offset == 1000
    assert transport.delivered[-1].published.message.key == b"key"
    stats = pub.stats
    assert stats.acked == 1001 and stats.pending == 0
    assert stats.fast_path_sent == 1001 and stats.public_api_sent == 0


async def test_fast_path_off_uses_the_public_path_with_the_same_results() -> None:
    transport = MemoryTransport(responder=auto_ack, fast_path=False)
    async with Publisher(transport) as pub:
        assert not pub.fast_path and pub.fast_path.reason
        acks = await asyncio.gather(*(pub.publish("s", b"v%d" % i) for i in range(100)))
    assert sorted(_offsets(acks)) == list(range(100))
    assert pub.stats.fast_path_sent == 0 and pub.stats.public_api_sent == 100


async def test_max_inflight_makes_publish_async_wait_for_acks() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, max_inflight=4) as pub:
        futures = [await pub.publish_async("s", b"x") for _ in range(4)]
        fifth = asyncio.ensure_future(pub.publish_async("s", b"y"))
        await asyncio.sleep(0.02)
        assert not fifth.done() and pub.pending == 4
        for sent in transport.delivered[:2]:
            transport.ack(sent)  # down to the low-water mark (3): room again
        future = await asyncio.wait_for(fifth, 1)
        for sent in transport.delivered[2:]:
            transport.ack(sent)
        assert _offsets(await asyncio.gather(*futures, future)) == [0, 1, 2, 3, 4]


async def test_a_full_buffer_is_waited_out_on_the_fast_path() -> None:
    transport = MemoryTransport(responder=auto_ack, buffer_limit=2_000)
    async with Publisher(transport) as pub:
        transport.hold()  # a stalled socket: nothing leaves the buffer
        burst = asyncio.gather(*(pub.publish("s", b"v%04d" % i) for i in range(500)))
        await asyncio.sleep(0.05)
        assert not burst.done()
        assert 0 < len(transport.buffer) < 500 and not transport.delivered
        transport.release()
        acks = await asyncio.wait_for(burst, 5)
    assert sorted(_offsets(acks)) == list(range(500))
    assert transport.flushes > 1
    # Every message took the fast path, none fell back to the public one.
    assert pub.stats.fast_path_sent == 500 and pub.stats.public_api_sent == 0


async def test_every_publish_ends_by_its_deadline_even_when_nothing_leaves() -> None:
    transport = MemoryTransport(responder=auto_ack, buffer_limit=500)
    async with Publisher(transport, ack_timeout=0.2) as pub:
        transport.hold()
        started = time.monotonic()
        results = await asyncio.gather(
            *(pub.publish("s", b"x" * 100) for _ in range(50)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        assert all(isinstance(r, AckTimeoutError) for r in results)
        assert elapsed < 1.0
        assert pub.pending == 0 and pub.stats.timed_out == 50


async def test_no_ack_times_out_and_a_late_ack_is_only_counted() -> None:
    transport = MemoryTransport()
    async with Publisher(transport, ack_timeout=0.05) as pub:
        with pytest.raises(AckTimeoutError):
            await pub.publish("s", b"x")
        transport.ack(transport.delivered[0])
        assert pub.stats.acks_unmatched == 1 and pub.stats.acked == 0


async def test_cancelling_a_publish_that_waits_for_the_buffer_sends_nothing() -> None:
    transport = MemoryTransport(buffer_limit=150)
    async with Publisher(transport) as pub:
        transport.hold()
        first = await pub.publish_async("s", b"x" * 100)
        waiting = asyncio.ensure_future(pub.publish("s", b"y" * 100))
        await asyncio.sleep(0.03)
        assert pub.pending == 2 and len(transport.buffer) == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert pub.pending == 1
        transport.release()
        await asyncio.sleep(0.01)
        assert len(transport.delivered) == 1
        transport.ack(transport.delivered[0])
        assert _offset(await first) == 0


async def test_close_waits_for_acks_then_fails_the_rest() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport).start()
    answered = await pub.publish_async("s", b"a")
    unanswered = await pub.publish_async("s", b"b")
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.02, transport.ack, transport.delivered[0])
    await pub.close(timeout=0.1)
    assert _offset(await answered) == 0
    with pytest.raises(AckLostError, match="may or may not have been stored"):
        await unanswered
    with pytest.raises(PublisherClosedError):
        await pub.publish("s", b"c")
    assert pub.closed and pub.pending == 0
    assert not transport._inboxes  # the ack subscription is gone
    await pub.close()  # idempotent


async def test_messages_wait_for_a_reconnect_in_order() -> None:
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, ack_timeout=2) as pub:
        transport.disconnect()
        futures = [await pub.publish_async("s", b"v%d" % i) for i in range(20)]
        await asyncio.sleep(0.05)
        assert pub.stats.buffered == 20 and not transport.delivered
        transport.reconnect()
        acks = await asyncio.gather(*futures)
    assert _offsets(acks) == list(range(20))
    assert [s.published.message.value for s in transport.delivered] == [
        b"v%d" % i for i in range(20)
    ]


async def test_closing_while_disconnected_fails_what_was_never_sent() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport).start()
    transport.disconnect()
    future = await pub.publish_async("s", b"x")
    await pub.close(timeout=0)
    with pytest.raises(PublisherClosedError, match="it was not sent"):
        await future
    assert not transport.delivered


async def test_closing_with_a_re_send_waiting_says_the_message_may_be_stored() -> None:
    transport = MemoryTransport()
    pub = await Publisher(transport, ack_timeout=0.05, retry=True, retry_deadline=10).start()
    future = await pub.publish_async("s", b"x")
    cid = future.flight[CID]
    await asyncio.sleep(0)
    assert len(transport.delivered) == 1  # the first copy went out
    transport.disconnect()
    await asyncio.sleep(0.15)  # no ack: the re-send waits for NATS to come back
    assert pub.stats.buffered == 1
    await pub.close(timeout=0)
    with pytest.raises(AckLostError, match="may or may not have been stored") as info:
        await future
    assert info.value.maybe_stored and info.value.correlation_id == cid


async def test_a_closed_connection_refuses_to_start_and_to_send() -> None:
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        transport.close()
        with pytest.raises(NotConnectedError):
            await pub.publish("s", b"x")
    with pytest.raises(NotConnectedError):
        await Publisher(transport).start()


async def test_no_responders_fails_at_once_or_is_sent_again_with_retry() -> None:
    transport = MemoryTransport()
    transport.responder = lambda t, sent: t.no_responders(sent)
    async with Publisher(transport, ack_timeout=5) as pub:
        with pytest.raises(NoRespondersError):
            await pub.publish("s", b"x")
    answers = iter(["503", "ack"])

    def flaky(t: MemoryTransport, sent: Sent) -> None:
        if next(answers) == "503":
            t.no_responders(sent)
        else:
            t.ack(sent)

    transport = MemoryTransport(responder=flaky)
    async with Publisher(transport, ack_timeout=5, retry=True) as pub:
        ack = await pub.publish("s", b"x")
    assert ack is not None and ack.offset == 0
    assert _cids(transport.delivered)[0] == _cids(transport.delivered)[1]  # the same message
    assert pub.stats.no_responders == 1 and pub.stats.resent == 1


async def test_no_responders_reaches_the_message_its_reply_subject_names() -> None:
    # The reply subject carries the counter of the publisher's own id, or a mark and the
    # caller's id: a caller's id that looks like a counter stays apart from the
    # publisher's own message with that counter.
    transport = MemoryTransport(responder=lambda t, sent: None)
    async with Publisher(transport, ack_timeout=5) as pub:
        own = await pub.publish_async("s", b"own")
        caller = await pub.publish_async("s", b"caller", correlation_id="1")
        await asyncio.sleep(0)  # the stand-in's flush
        sent_own, sent_caller = transport.delivered
        own_cid = sent_own.published.correlation_id
        assert own_cid.endswith("-1") and sent_own.reply.endswith(".1")
        assert sent_caller.reply == sent_own.reply[: -len("1")] + "_1"
        transport.no_responders(sent_caller)
        with pytest.raises(NoRespondersError) as caller_err:
            await caller
        assert caller_err.value.correlation_id == "1" and not own.done()
        transport.no_responders(sent_own)
        with pytest.raises(NoRespondersError) as own_err:
            await own
        assert own_err.value.correlation_id == own_cid
        assert pub.stats.no_responders == 2 and pub.stats.acks_unmatched == 0


async def test_an_ack_error_becomes_its_typed_exception_and_none_needs_no_ack() -> None:
    transport = MemoryTransport()
    transport.responder = lambda t, sent: t.ack(sent, error=AckError.INCORRECT_OFFSET)
    async with Publisher(transport) as pub:
        with pytest.raises(IncorrectOffsetError):
            await pub.publish("s", b"x", expected_offset=3)
        assert await pub.publish("s", b"y", ack_policy=AckPolicy.NONE) is None
        assert pub.stats.rejected == 1 and pub.stats.published == 2


async def test_flush_waits_for_every_ack() -> None:
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        futures = [await pub.publish_async("s", b"x") for _ in range(10)]
        flushing = asyncio.ensure_future(pub.flush())
        await asyncio.sleep(0.01)
        assert not flushing.done()
        for sent in transport.delivered:
            transport.ack(sent)
        await asyncio.wait_for(flushing, 1)
        assert all(f.done() for f in futures)


async def test_flush_returns_after_the_callbacks_of_futures_settled_before_it() -> None:
    # Acks that arrive just before flush() settle their futures, whose callbacks are
    # only scheduled: flush must not return before they ran, or a caller counting acks
    # in callbacks reads its counts short.
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        counted: list[Any] = []
        futures = [await pub.publish_async("s", b"x") for _ in range(5)]
        for future in futures:
            future.add_done_callback(counted.append)
        await asyncio.sleep(0.01)  # written out
        assert len(transport.delivered) == 5
        for sent in transport.delivered:
            transport.ack(sent)  # settled now, callbacks not run yet
        assert all(f.done() for f in futures) and counted == []
        await pub.flush()
        assert len(counted) == 5
        # The same for futures settled while flush waits.
        later = [await pub.publish_async("s", b"y") for _ in range(5)]
        for future in later:
            future.add_done_callback(counted.append)
        flushing = asyncio.ensure_future(pub.flush())
        await asyncio.sleep(0.01)
        for sent in transport.delivered[5:]:
            transport.ack(sent)
        await asyncio.wait_for(flushing, 1)
        assert len(counted) == 10


async def test_publish_works_with_await_gather_tasks_and_wait_for() -> None:
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport) as pub:
        call = pub.publish("s", b"a")  # sent now; the ack comes with the awaitable
        assert asyncio.iscoroutine(call)
        task = asyncio.create_task(pub.publish("s", b"b"))
        gathered = await asyncio.gather(call, pub.publish("s", b"c"))
        timed = await asyncio.wait_for(pub.publish("s", b"d"), 1)
        assert _offsets((*gathered, await task, timed)) == [0, 2, 1, 3]
        # A bad argument raises where the call is awaited, as with a coroutine.
        bad = pub.publish("s", "not bytes")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await bad
        # Waiting for the room in max_inflight takes a coroutine: still awaitable.
        pending = await pub.publish_async("s", b"e")
        assert _offset(await pending) == 4
        done, _ = await asyncio.wait([await pub.publish_async("s", b"f")], timeout=1)
        assert len(done) == 1


async def test_a_gathered_burst_leaves_the_collector_only_its_futures_and_acks() -> None:
    # A burst's futures and acks live until its gather returns, and CPython's collector
    # scans every tracked object that lives, again at each collection: a message in
    # flight may leave it its future only (the flight the future carries is not
    # tracked), an ack only itself (it keeps its protobuf's bytes, not a parsed protobuf).
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        calls = [pub.publish("s", b"v%d" % i, key=b"k", headers={"h": b"1"}) for i in range(1000)]
        futures = [call for call in calls if isinstance(call, AckFuture)]
        assert len(futures) == 1000
        await asyncio.sleep(0)  # the transport delivers
        gc.collect()
        assert [f for f in futures if gc.is_tracked(f.flight)] == []
        assert len(transport.delivered) == 1000
        for sent in transport.delivered:
            transport.ack(sent)
        acks = await asyncio.gather(*calls)
    gc.collect()
    assert [
        held
        for ack in acks
        for held in gc.get_referents(ack)
        if gc.is_tracked(held) and not isinstance(held, type)
    ] == []
    assert _offsets(acks) == list(range(1000))


def _envelopes_held(futures: Iterable[Any], value: bytes) -> int:
    """How many of ``futures`` keep an encoded message of ``value`` alive."""
    return sum(
        1
        for future in futures
        for flight in gc.get_referents(future)
        if type(flight) is tuple
        for held in flight
        if type(held) is bytes and len(held) > len(value)
    )


async def test_an_acked_future_lets_go_of_its_message() -> None:
    # Callers keep futures (a batch's, gathered at its end): once acked, a future must
    # not keep its message's encoded bytes alive, only its ack.
    value = b"x" * 4096
    transport = MemoryTransport()
    async with Publisher(transport, retry=True) as pub:
        futures = [await pub.publish_async("s", value) for _ in range(10)]
        await asyncio.sleep(0)  # the transport delivers
        assert _envelopes_held(futures, value) == 10  # in flight: kept, for a re-send
        for sent in transport.delivered[:6]:
            transport.ack(sent)
        await asyncio.sleep(0)
        assert _envelopes_held(futures, value) == 4
        for sent in transport.delivered[6:]:
            transport.ack(sent)
        acks = await asyncio.gather(*futures)
        assert _envelopes_held(futures, value) == 0
    assert _offsets(acks) == list(range(10))


async def test_without_re_sends_a_message_handed_to_nats_keeps_no_bytes() -> None:
    # Nothing will send it again, so its bytes go with nats-py's buffer, not a round trip
    # later with the ack: the common messages, one with a timeout of its own, and one
    # with AckPolicy.NONE (which is done once sent).
    value = b"x" * 4096
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        futures = [await pub.publish_async("s", value) for _ in range(10)]
        futures.append(await pub.publish_async("s", value, timeout=5))
        futures.append(await pub.publish_async("s", value, ack_policy=AckPolicy.NONE))
        assert _envelopes_held(futures, value) == 0
        assert {future.flight[REPLY] for future in futures} == {b""}  # nor the reply subject
        await asyncio.sleep(0)  # the transport delivers
        assert len(transport.delivered) == 12  # all sent all the same
        for sent in transport.delivered[:11]:
            transport.ack(sent)
        acks = await asyncio.gather(*futures)
    assert _offsets(acks[:11]) == list(range(11)) and acks[11] is None


async def test_a_failed_or_cancelled_future_lets_go_of_its_message() -> None:
    # The same when it fails, each way a publish fails, or is cancelled: an outage that
    # fails thousands of kept futures must not keep thousands of messages alive.
    value = b"x" * 4096
    # On nats-py's public API a sent message keeps its bytes until it is settled.
    transport = MemoryTransport(fast_path=False)
    answers = iter(["reject", "503", "silent", "silent", "silent"])

    def respond(t: MemoryTransport, sent: Sent) -> None:
        answer = next(answers)
        if answer == "reject":
            t.ack(sent, error=AckError.INCORRECT_OFFSET)
        elif answer == "503":
            t.no_responders(sent)

    transport.responder = respond
    pub = await Publisher(transport, ack_timeout=5).start()
    rejected = await pub.publish_async("s", value, expected_offset=7)
    unheard = await pub.publish_async("s", value)
    timed_out = await pub.publish_async("s", value, timeout=0.05)
    cancelled = await pub.publish_async("s", value)
    lost = await pub.publish_async("s", value)
    futures = [rejected, unheard, timed_out, cancelled, lost]
    await asyncio.sleep(0)  # the transport delivers and answers
    assert _envelopes_held(futures, value) == 3  # the silent ones, in flight
    cancelled.cancel()
    await asyncio.sleep(0.1)  # timed_out's deadline passes
    assert _envelopes_held([cancelled, timed_out], value) == 0
    await pub.close(timeout=0)
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert [type(r) for r in results] == [
        IncorrectOffsetError,
        NoRespondersError,
        AckTimeoutError,
        asyncio.CancelledError,
        AckLostError,
    ]
    assert _envelopes_held(futures, value) == 0
    # Each error still names the message it was about.
    assert [r.correlation_id for r in results if isinstance(r, PublishError)] == _cids(
        [transport.delivered[i] for i in (0, 1, 2, 4)]
    )


async def test_cancelling_the_task_of_a_publish_forgets_the_message() -> None:
    transport = MemoryTransport()
    async with Publisher(transport) as pub:
        task = asyncio.create_task(pub.publish("s", b"x"))
        await asyncio.sleep(0.01)
        assert pub.pending == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pub.pending == 0
        transport.ack(transport.delivered[0])  # a late ack is only counted
        assert pub.stats.acks_unmatched == 1
        gathered = asyncio.gather(*(pub.publish("s", b"y") for _ in range(10)))
        await asyncio.sleep(0.01)
        gathered.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gathered
        assert pub.pending == 0


async def test_headers_are_checked_on_the_keyed_path_too() -> None:
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport) as pub:
        await pub.publish("s", b"warm-up")  # the subject is known from now on
        bad_headers: list[Any] = [{"h": bytearray(b"v")}, {"h": 1}, {"": b"v"}]
        for bad in bad_headers:
            with pytest.raises(InvalidArgumentError):
                await pub.publish("s", b"v", key=b"k", headers=bad)
        with pytest.raises(TypeError):
            await pub.publish("s", b"v", key="k")  # type: ignore[arg-type]
        ack = await pub.publish("s", b"v", key=b"k", headers={"h": b"1"})
        again = await pub.publish("s", b"w", key=b"k", headers={"h": b"1"})
        assert ack is not None and again is not None and again.offset == ack.offset + 1
    sent = transport.delivered[-1].published.message
    assert sent.key == b"k" and sent.headers == {"h": b"1"} and sent.value == b"w"
    assert pub.stats.published == 3
