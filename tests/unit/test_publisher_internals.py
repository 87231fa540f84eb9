"""The in-flight ledger (deadlines, backpressure, memory bound) and the ack listener's
handling of whatever arrives on its inbox, without servers (sans-IO parts)."""

from __future__ import annotations

import asyncio
import tracemalloc
import weakref

import pytest

from liftbridge_nats import (
    Ack,
    EncryptionError,
    IncorrectOffsetError,
    MaxBytesExceededError,
    NoRespondersError,
    PublisherClosedError,
    PublishRejectedError,
    RetriedIncorrectOffsetError,
)
from liftbridge_nats._acks import InflightAckListener
from liftbridge_nats._inflight import CID, AckFuture, InflightLedger, next_attempt
from liftbridge_nats._memtransport import MemoryTransport
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import MsgType, encode


def _in_flight(
    loop: asyncio.AbstractEventLoop, cid: str, in_seconds: float, attempt: int = 0
) -> AckFuture:
    """The future of a message in flight, carrying its flight."""
    deadline = loop.time() + in_seconds
    future = AckFuture(loop=loop)
    future.flight = (cid, "subj", b"data", deadline, b"", deadline, attempt)
    return future


def _expiry_recording_ledger(
    loop: asyncio.AbstractEventLoop,
) -> tuple[InflightLedger, list[str]]:
    """A ledger of 100, and the correlation ids it expires, in the order it expires them."""
    expired: list[str] = []
    ledger = InflightLedger(
        loop, max_inflight=100, on_expired=lambda f: expired.append(f.flight[CID])
    )
    return ledger, expired


async def test_ledger_expires_in_deadline_order_with_one_timer() -> None:
    loop = asyncio.get_running_loop()
    ledger, expired = _expiry_recording_ledger(loop)
    ledger.add(_in_flight(loop, "a", 0.05), True)
    ledger.add(_in_flight(loop, "b", 0.10), True)
    ledger.add(_in_flight(loop, "c", 0.03), False)  # its own, shorter timeout
    ledger.add(_in_flight(loop, "d", 5.0), True)
    assert ledger.settle("b") is not None
    await asyncio.sleep(0.2)
    assert expired == ["c", "a"]
    assert len(ledger) == 1 and "d" in ledger
    ledger.close()
    assert [f.flight[CID] for f in ledger.drain()] == ["d"]


async def test_ledger_settle_unknown_and_discard() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=10, on_expired=lambda f: None)
    future = _in_flight(loop, "x", 5)
    ledger.add(future, True)
    assert ledger.settle("nope") is None
    other = AckFuture(loop=loop)
    ledger.discard("x", other)  # not its future: kept
    assert "x" in ledger
    ledger.discard("x", future)
    assert "x" not in ledger
    ledger.close()


async def test_ledger_backpressure_waits_then_resumes() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=4, on_expired=lambda f: None)
    for i in range(4):
        ledger.add(_in_flight(loop, f"m{i}", 5), True)
    assert ledger.full and ledger.must_wait()
    waiter = asyncio.create_task(ledger.wait_for_room())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    ledger.settle("m0")  # 3 left: above the low-water mark (3), so it wakes
    await asyncio.wait_for(waiter, 1)
    ledger.close()


async def test_ledger_close_wakes_waiters_with_error() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=1, on_expired=lambda f: None)
    ledger.add(_in_flight(loop, "m", 5), True)
    waiter = asyncio.create_task(ledger.wait_for_room())
    await asyncio.sleep(0.01)
    ledger.close()
    with pytest.raises(PublisherClosedError):
        await waiter


async def test_ledger_expiry_frees_room_for_waiters() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=2, on_expired=lambda f: None)
    ledger.add(_in_flight(loop, "a", 0.02), True)
    ledger.add(_in_flight(loop, "b", 0.02), True)
    await asyncio.wait_for(ledger.wait_for_room(), 1)
    assert len(ledger) <= 1
    await asyncio.sleep(0.05)
    assert len(ledger) == 0
    ledger.close()


class _Waiting:
    """A queued publish as the ledger sees one: woken (sent: in the ledger now), expired,
    or failed."""

    def __init__(self, ledger: InflightLedger, name: str, deadline: float, log: list[str]) -> None:
        self.ledger = ledger
        self.name = name
        self.deadline = deadline
        self.log = log
        self.state = "waiting"

    def done(self) -> bool:
        return self.state != "waiting"

    def set_result(self, _: None, /) -> None:
        self.state = "sent"
        self.log.append(f"sent {self.name}")
        self.ledger.add(_in_flight(asyncio.get_running_loop(), self.name, 5), True)

    def set_exception(self, exception: BaseException, /) -> None:
        self.state = "failed"

    def expire(self) -> None:
        self.state = "expired"
        self.log.append(f"expired {self.name}")


async def test_ledger_expires_queued_publishes_by_their_deadlines_before_waking_any() -> None:
    loop = asyncio.get_running_loop()
    log: list[str] = []
    ledger = InflightLedger(loop, max_inflight=1, on_expired=lambda f: log.append("flight"))
    ledger.add(_in_flight(loop, "m", 0.1), True)
    now = loop.time()
    # In call order; their deadlines are not: the heap, not the queue, times them.
    waiting = [
        _Waiting(ledger, "a", now + 0.1, log),  # due with the flight that holds the room
        _Waiting(ledger, "b", now + 5, log),
        _Waiting(ledger, "c", now + 0.05, log),
        _Waiting(ledger, "d", now + 5, log),
    ]
    for waiter in waiting:
        ledger.enqueue(waiter)
    await asyncio.sleep(0.2)
    # c expired first; a expired with the flight, before its room was given to anyone:
    # b, the first still waiting, was sent in its place.
    assert log == ["expired c", "expired a", "flight", "sent b"]
    assert [w.state for w in waiting] == ["expired", "sent", "expired", "waiting"]
    # Expired publishes at the head of the queue leave it at once; those behind a
    # waiting one are skipped when their turn comes, as cancelled ones are.
    assert ledger.queued() == [waiting[2], waiting[3]]
    ledger.close()
    assert waiting[3].state == "failed" and not ledger._queue_marks


async def test_ledger_never_expires_a_queued_publish_once_it_was_sent() -> None:
    loop = asyncio.get_running_loop()
    log: list[str] = []
    ledger = InflightLedger(loop, max_inflight=1, on_expired=lambda f: None)
    early = _Waiting(ledger, "early", loop.time() + 0.05, log)
    ledger.enqueue(early)  # room: sent at once, nothing to time
    assert log == ["sent early"] and not ledger._queue_marks
    late = _Waiting(ledger, "late", loop.time() + 0.05, log)
    ledger.enqueue(late)
    assert ledger._queue_marks
    ledger.settle("early")  # room: sent before its deadline
    await asyncio.sleep(0.1)
    assert log == ["sent early", "sent late"] and not ledger._queue_marks
    ledger.close()


async def test_nothing_of_acked_messages_stays_when_acks_come_out_of_order() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=100, on_expired=lambda f: None)
    ledger.add(_in_flight(loop, "stuck", 60), True)  # never acked: the oldest throughout
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(50_000):
            ledger.add(_in_flight(loop, f"m{i}", 60), True)
            ledger.settle(f"m{i}")
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(ledger) == 1
    # 50,000 messages came and went: even 8 bytes left of each would be 400 KB.
    assert grown < 16 * 1024
    ledger.close()


async def test_acked_flights_behind_an_unacked_one_are_freed_at_once() -> None:
    # Acks of several partitions interleave: an acked message published after an
    # unacked one must not stay alive (future, ack, data), and the unacked one still
    # expires at its deadline.
    loop = asyncio.get_running_loop()
    ledger, expired = _expiry_recording_ledger(loop)
    ledger.add(_in_flight(loop, "slow-partition", 0.05), True)
    acked = _in_flight(loop, "fast-partition", 0.06)
    ledger.add(acked, True)
    future = weakref.ref(acked)
    settled = ledger.settle("fast-partition")
    assert settled is acked
    del acked, settled
    assert future() is None
    await asyncio.sleep(0.15)
    assert expired == ["slow-partition"]
    assert len(ledger) == 0
    ledger.close()


async def test_a_long_own_timeout_does_not_hold_back_older_deadlines() -> None:
    # A flight with a timeout of its own goes before default-timeout flights in the
    # ledger's order; theirs expire on time all the same, and it expires on its own.
    loop = asyncio.get_running_loop()
    ledger, expired = _expiry_recording_ledger(loop)
    ledger.add(_in_flight(loop, "own-long", 0.3), False)
    ledger.add(_in_flight(loop, "a", 0.03), True)
    ledger.add(_in_flight(loop, "own-short", 0.01), False)
    ledger.add(_in_flight(loop, "b", 0.05), True)
    ledger.add(_in_flight(loop, "c", 5.0), True)
    await asyncio.sleep(0.15)
    assert expired == ["own-short", "a", "b"]
    assert "own-long" in ledger and "c" in ledger
    await asyncio.sleep(0.25)
    assert expired == ["own-short", "a", "b", "own-long"]
    assert ledger.settle("own-long") is None and ledger.settle("c") is not None
    assert not ledger._unordered
    ledger.close()


async def test_flights_found_due_together_expire_in_deadline_order() -> None:
    # A timer that fires late (a busy loop) finds both kinds due at once.
    loop = asyncio.get_running_loop()
    ledger, expired = _expiry_recording_ledger(loop)
    ledger.add(_in_flight(loop, "a", -0.020), True)
    ledger.add(_in_flight(loop, "own-1", -0.030), False)
    ledger.add(_in_flight(loop, "b", -0.010), True)
    ledger.add(_in_flight(loop, "own-2", -0.015), False)
    await asyncio.sleep(0.05)
    assert expired == ["own-1", "a", "own-2", "b"]
    ledger.close()


async def test_a_resent_correlation_id_expires_by_its_new_deadline() -> None:
    expired: list[AckFuture] = []
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=100, on_expired=expired.append)
    first = _in_flight(loop, "again", 0.01)
    ledger.add(first, True)
    assert ledger.settle("again") is first
    resent = _in_flight(loop, "again", 0.2)
    ledger.add(resent, True)
    await asyncio.sleep(0.05)  # the first deadline passed: its mark is stale
    assert expired == []
    assert ledger.get("again") is resent
    await asyncio.sleep(0.25)
    assert expired == [resent]
    ledger.close()


def test_a_next_attempt_keeps_the_message_and_never_outlives_the_publish() -> None:
    first = ("cid-1", "orders", b"envelope", 10.0, b"_INBOX.x.cid-1", 30.0, 0)
    second = next_attempt(first, 20.0)
    assert second == ("cid-1", "orders", b"envelope", 20.0, b"_INBOX.x.cid-1", 30.0, 1)
    # An attempt's deadline past the whole publish's is cut to it.
    assert next_attempt(second, 45.0) == (
        "cid-1",
        "orders",
        b"envelope",
        30.0,
        b"_INBOX.x.cid-1",
        30.0,
        2,
    )


def _ack_bytes(cid: str, error: int = 0, offset: int = 3) -> bytes:
    pb = api_pb2.Ack(
        stream="s",
        partitionSubject="s",
        msgSubject="s",
        offset=offset,
        correlationId=cid,
        ackError=error,  # type: ignore[arg-type]
    )
    return encode(MsgType.ACK, pb.SerializeToString())


async def test_listener_settles_and_counts_everything_else() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=10, on_expired=lambda f: None)
    listener = InflightAckListener(MemoryTransport(), ledger)
    futures = {cid: _in_flight(loop, cid, 5) for cid in ["ok", "occ", "big", "enc", "unk", "gone"]}
    for f in futures.values():
        ledger.add(f, True)
    listener.handle(_ack_bytes("ok", offset=9))
    listener.handle(_ack_bytes("ok"))  # a second stream on the same subject: unmatched
    listener.handle(_ack_bytes("occ", error=2))
    listener.handle(_ack_bytes("big", error=3))
    listener.handle(_ack_bytes("enc", error=4))
    listener.handle(_ack_bytes("unk", error=1))
    listener.handle(_ack_bytes("never-sent"))
    listener.handle(b"plain bytes, no envelope")
    listener.handle(b"")
    listener.handle(encode(MsgType.ACK, b"\xff\xff\xff"))  # not a protobuf Ack
    listener.handle(encode(MsgType.PUBLISH, b""))  # another envelope type
    listener.handle(encode(MsgType.ACK, _ack_bytes("x")[8:], crc=True) + b"")  # CRC ack, unknown id
    listener.handle_status(listener.reply_prefix + "gone", "503")
    listener.handle_status(listener.reply_prefix + "whatever", "408")
    ok = futures["ok"].result()
    assert isinstance(ok, Ack) and ok.offset == 9 and ok.correlation_id == "ok"
    for cid, exc_type in [
        ("occ", IncorrectOffsetError),
        ("big", MaxBytesExceededError),
        ("enc", EncryptionError),
        ("unk", PublishRejectedError),
        ("gone", NoRespondersError),
    ]:
        exc = futures[cid].exception()
        assert type(exc) is exc_type, (cid, exc)
        assert exc.correlation_id == cid
    stats = listener.stats
    assert (stats.acks_matched, stats.acks_rejected) == (5, 4)
    assert stats.acks_unmatched == 3
    assert stats.malformed == 3
    assert stats.foreign == 2
    assert stats.no_responders == 1
    assert len(ledger) == 0
    ledger.close()


async def test_listener_ignores_acks_for_cancelled_futures() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=10, on_expired=lambda f: None)
    listener = InflightAckListener(MemoryTransport(), ledger)
    future = _in_flight(loop, "c", 5)
    ledger.add(future, True)
    future.cancel()
    listener.handle(_ack_bytes("c"))
    assert listener.stats.acks_unmatched == 1 and len(ledger) == 0
    ledger.close()


async def test_listener_marks_refused_resent_copies() -> None:
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=10, on_expired=lambda f: None)
    listener = InflightAckListener(MemoryTransport(), ledger)
    first = _in_flight(loop, "first", 5)
    resent = _in_flight(loop, "again", 5, attempt=1)  # a re-sent copy
    ledger.add(first, True)
    ledger.add(resent, True)
    listener.handle(_ack_bytes("first", error=2))
    listener.handle(_ack_bytes("again", error=2))
    assert type(first.exception()) is IncorrectOffsetError
    exc = resent.exception()
    assert isinstance(exc, RetriedIncorrectOffsetError) and exc.retried
    ledger.close()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def test_listener_memory_does_not_grow_with_the_number_of_acks() -> None:
    # upb never shrinks a message's arena: parsing into one reused protobuf Ack forever
    # grew the process by ~90 bytes per ack (about 27 MiB for these 300k).
    loop = asyncio.get_running_loop()
    ledger = InflightLedger(loop, max_inflight=10, on_expired=lambda f: None)
    listener = InflightAckListener(MemoryTransport(), ledger)
    data = _ack_bytes("c" * 24)
    for _ in range(20_000):  # warm up allocator pools
        listener.handle(data)
    before = _rss_bytes()
    for _ in range(300_000):
        listener.handle(data)
    grown = _rss_bytes() - before
    assert grown < 4 * 1024 * 1024, f"RSS grew {grown / 2**20:.1f} MiB over 300k acks"
    assert listener.stats.acks_unmatched == 320_000
