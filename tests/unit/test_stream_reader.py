"""The subscription's reader thread, driven by an in-memory call (no server).

The call stands in for grpc's synchronous Subscribe iterator: ``next()`` blocks until
the test feeds it an item, ``cancel()`` makes the blocked ``next()`` raise CANCELLED as
grpc does. The server-backed behaviour is covered in tests/integration.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
from dataclasses import FrozenInstanceError
from typing import Any, cast

import grpc
import pytest

from liftbridge_nats._proto import api_pb2
from liftbridge_nats._stream_reader import (
    OPENED,
    Item,
    StreamEnd,
    StreamReader,
)
from liftbridge_nats.messages import Message
from liftbridge_nats.wire import message_from_proto

pytestmark = pytest.mark.timeout(60)

_THREAD = "test-stream-reader"


class StatusError(grpc.RpcError):
    """An RPC failure as the synchronous iterator raises it: with code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_FINISH = object()


class FakeCall:
    """A Subscribe call fed by the test; counts the messages the reader pulled
    (the handshake included)."""

    def __init__(self) -> None:
        self.items: queue.Queue[object] = queue.Queue()
        self.pulled = 0
        self.cancelled = False

    def feed(self, *items: object) -> None:
        for item in items:
            self.items.put(item)

    def __iter__(self) -> FakeCall:
        return self

    def __next__(self) -> api_pb2.Message:
        if self.cancelled:
            raise StatusError(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        item = self.items.get()
        if self.cancelled:
            raise StatusError(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        if item is _FINISH:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        self.pulled += 1
        return cast(api_pb2.Message, item)

    def cancel(self) -> bool:
        self.cancelled = True
        self.items.put(None)  # wake a blocked next()
        return True


def pb(offset: int, value: bytes = b"v") -> api_pb2.Message:
    return api_pb2.Message(stream="s", partition=2, offset=offset, value=value, subject="s.2")


HANDSHAKE = api_pb2.Message()


def reader_for(call: FakeCall, **kwargs: Any) -> StreamReader:
    reader = StreamReader(cast(Any, call), name=_THREAD, **kwargs)
    reader.start()
    return reader


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _THREAD]


async def take(reader: StreamReader, within: float = 5.0) -> Item:
    return await asyncio.wait_for(reader.next_item(), within)


async def eventually(condition: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


@pytest.fixture(autouse=True)
def no_thread_left() -> Any:
    yield
    assert reader_threads() == [], "a reader thread outlived its test"


# ---------------------------------------------------------------------- conversion


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"stream": "s", "partition": 3, "offset": 2**62, "value": b"x" * 100},
        {"key": b"k", "value": b"", "timestamp": 1_700_000_000_123_456_789},
        {"subject": "ünïcode.subject", "replySubject": "_INBOX.x", "key": b"\x00"},
        {"headers": {"a": b"1", "b": b"", "ç": b"\xff" * 3}, "offset": 7},
        {"ackInbox": "in", "correlationId": "c", "ackPolicy": api_pb2.ALL, "value": b"v"},
    ],
)
def test_message_from_proto_equals_the_dataclass_constructor(fields: dict[str, Any]) -> None:
    message = api_pb2.Message(**fields)
    parsed = api_pb2.Message.FromString(message.SerializeToString())
    fast = message_from_proto(parsed)
    reference = Message(
        stream=parsed.stream,
        partition=parsed.partition,
        offset=parsed.offset,
        value=parsed.value,
        key=parsed.key or None,
        timestamp=parsed.timestamp,
        subject=parsed.subject,
        reply_subject=parsed.replySubject,
        headers=dict(parsed.headers),
    )
    assert type(fast) is Message
    assert fast == reference
    assert repr(fast) == repr(reference)
    assert hash(fast.offset) == hash(reference.offset)
    assert type(fast.headers) is dict


def test_message_from_proto_is_frozen() -> None:
    msg = message_from_proto(pb(1))
    with pytest.raises(FrozenInstanceError):
        msg.offset = 2  # type: ignore[misc]


# ---------------------------------------------------------------------- stream


async def test_opened_messages_then_end_in_order() -> None:
    call = FakeCall()
    reader = reader_for(call)
    call.feed(HANDSHAKE, *(pb(i, b"%d" % i) for i in range(300)), _FINISH)
    assert await take(reader) is OPENED
    got = [await take(reader) for _ in range(300)]
    assert [cast(Message, m).offset for m in got] == list(range(300))
    assert cast(Message, got[42]).value == b"42"
    end = await take(reader)
    assert isinstance(end, StreamEnd) and end.error is None
    await reader.aclose()
    assert reader.finished


async def test_skip_through_drops_replayed_offsets() -> None:
    call = FakeCall()
    reader = reader_for(call, skip_through=5)
    call.feed(HANDSHAKE, *(pb(i) for i in range(3, 9)), _FINISH)
    assert await take(reader) is OPENED
    assert [cast(Message, await take(reader)).offset for _ in range(3)] == [6, 7, 8]
    assert isinstance(await take(reader), StreamEnd)
    await reader.aclose()


async def test_rpc_error_arrives_after_the_messages_before_it() -> None:
    call = FakeCall()
    reader = reader_for(call)
    failure = StatusError(grpc.StatusCode.UNAVAILABLE, "broker went away")
    call.feed(HANDSHAKE, pb(0), pb(1), failure)
    assert await take(reader) is OPENED
    assert cast(Message, await take(reader)).offset == 0
    assert cast(Message, await take(reader)).offset == 1
    end = await take(reader)
    assert isinstance(end, StreamEnd) and end.error is failure
    await reader.aclose()


async def test_a_failure_that_is_not_an_rpc_error_cancels_the_call() -> None:
    call = FakeCall()
    reader = reader_for(call)
    call.feed(HANDSHAKE, ValueError("bug"))
    assert await take(reader) is OPENED
    end = await take(reader)
    assert isinstance(end, StreamEnd) and isinstance(end.error, ValueError)
    assert call.cancelled
    await reader.aclose()


async def test_aclose_cancels_a_blocked_read_and_joins_the_thread() -> None:
    call = FakeCall()
    reader = reader_for(call)
    call.feed(HANDSHAKE)
    assert await take(reader) is OPENED
    waiting = asyncio.ensure_future(reader.next_item())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await asyncio.wait_for(reader.aclose(), 5)
    assert call.cancelled and reader.finished
    end = await asyncio.wait_for(waiting, 5)
    assert isinstance(end, StreamEnd)
    assert reader_threads() == []
    await reader.aclose()  # idempotent


async def test_cancelled_wait_loses_no_message() -> None:
    call = FakeCall()
    reader = reader_for(call)
    call.feed(HANDSHAKE)
    assert await take(reader) is OPENED
    for _ in range(3):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.next_item(), 0.05)
    call.feed(pb(0))
    assert cast(Message, await take(reader)).offset == 0
    await reader.aclose()


async def test_a_lone_message_and_a_short_burst_are_delivered_promptly() -> None:
    call = FakeCall()
    reader = reader_for(call)
    call.feed(HANDSHAKE)
    assert await take(reader) is OPENED
    for round_ in range(20):
        # Alternately one message after a pause, and a burst shorter than a batch that
        # then stops: both must reach a waiting consumer without another message.
        batch = 1 if round_ % 2 else 10
        started = time.monotonic()
        call.feed(*(pb(round_ * 100 + i) for i in range(batch)))
        for _ in range(batch):
            await take(reader, within=1.0)
        assert time.monotonic() - started < 1.0
        await asyncio.sleep(0.003)
    await reader.aclose()


async def test_a_full_buffer_stops_the_thread_until_drained_to_half() -> None:
    call = FakeCall()
    reader = reader_for(call, max_messages=10)
    call.feed(HANDSHAKE)
    assert await take(reader) is OPENED
    call.feed(*(pb(i) for i in range(100)))
    await eventually(lambda: call.pulled >= 11)
    await asyncio.sleep(0.1)
    assert call.pulled == 11, "the thread read past a full buffer"
    for i in range(4):
        assert cast(Message, await take(reader)).offset == i
    await asyncio.sleep(0.1)
    assert call.pulled == 11, "the thread resumed before the buffer was half empty"
    assert cast(Message, await take(reader)).offset == 4  # 5 left: half
    await eventually(lambda: call.pulled > 11)
    got = [cast(Message, await take(reader)).offset for _ in range(95)]
    assert got == list(range(5, 100))
    await reader.aclose()


async def test_the_byte_bound_applies_too() -> None:
    call = FakeCall()
    reader = reader_for(call, max_bytes=1000)
    call.feed(HANDSHAKE)
    assert await take(reader) is OPENED
    call.feed(*(pb(i, b"x" * 100) for i in range(50)))
    await eventually(lambda: call.pulled >= 11)
    await asyncio.sleep(0.1)
    assert call.pulled == 11, "the thread read past the byte bound"
    got = [cast(Message, await take(reader)).offset for _ in range(50)]
    assert got == list(range(50))
    await reader.aclose()


async def test_aclose_releases_a_thread_waiting_for_room() -> None:
    call = FakeCall()
    reader = reader_for(call, max_messages=4)
    call.feed(HANDSHAKE, *(pb(i) for i in range(10)))
    await eventually(lambda: call.pulled >= 4)
    await asyncio.wait_for(reader.aclose(), 5)
    assert reader.finished


async def test_no_message_lost_under_racing_producer_and_consumer() -> None:
    # A producer with irregular pauses against a consumer that sometimes gives up
    # waiting (cancelled waits): every message arrives once, in order.
    call = FakeCall()
    reader = reader_for(call, max_messages=64)
    count = 20_000
    rng = random.Random(7)

    def produce() -> None:
        call.feed(HANDSHAKE)
        for i in range(count):
            call.feed(pb(i))
            if rng.random() < 0.01:
                time.sleep(rng.random() * 0.002)
        call.feed(_FINISH)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert await take(reader) is OPENED
        expected = 0
        while True:
            try:
                item = await asyncio.wait_for(reader.next_item(), 0.0005)
            except TimeoutError:
                continue
            if isinstance(item, StreamEnd):
                break
            assert cast(Message, item).offset == expected
            expected += 1
            if expected % 1000 == 0:
                await asyncio.sleep(0.001)
        assert expected == count
    finally:
        producer.join()
        await reader.aclose()
