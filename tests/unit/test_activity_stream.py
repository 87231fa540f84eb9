"""The activity stream's reader over a stand-in subscription: events decoded in order,
and the copies the server publishes again (same id) skipped."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge_nats import ActivityOp, ActivityStream, EnvelopeError, Message
from liftbridge_nats._proto import api_pb2


class _Subscription:
    """Yields the messages given, then ends as a subscription with a stop position."""

    def __init__(self, messages: list[Message[bytes, bytes]]) -> None:
        self._messages = iter(messages)

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def __anext__(self) -> Message[bytes, bytes]:
        try:
            return next(self._messages)
        except StopIteration:
            raise StopAsyncIteration from None


def _created(event_id: int, stream: str, offset: int) -> Message[bytes, bytes]:
    pb = api_pb2.ActivityStreamEvent(id=event_id, op=api_pb2.CREATE_STREAM)
    pb.createStreamOp.stream = stream
    pb.createStreamOp.partitions.append(0)
    return Message("__activity", 0, offset, pb.SerializeToString(), timestamp=offset)


def _paused(event_id: int, stream: str, offset: int) -> Message[bytes, bytes]:
    pb = api_pb2.ActivityStreamEvent(id=event_id, op=api_pb2.PAUSE_STREAM)
    pb.pauseStreamOp.stream = stream
    return Message("__activity", 0, offset, pb.SerializeToString(), timestamp=offset)


async def _read(messages: list[Message[bytes, bytes]]) -> tuple[list[Any], int]:
    stream = ActivityStream(_Subscription(messages))  # type: ignore[arg-type]
    async with stream:
        events = [(e.id, e.op, e.stream, e.offset) async for e in stream]
    return events, stream.repeats


async def test_events_published_again_by_the_server_are_yielded_once() -> None:
    # The leader published "create a" (Raft index 7), failed to record it, and
    # published it again; later a new leader republished from index 8 on.
    events, repeats = await _read(
        [
            _created(7, "a", 0),
            _created(7, "a", 1),
            _paused(8, "a", 2),
            _created(9, "b", 3),
            _paused(8, "a", 4),
            _created(9, "b", 5),
            _created(12, "c", 6),
        ]
    )
    assert events == [
        (7, ActivityOp.CREATE_STREAM, "a", 0),
        (8, ActivityOp.PAUSE_STREAM, "a", 2),
        (9, ActivityOp.CREATE_STREAM, "b", 3),
        (12, ActivityOp.CREATE_STREAM, "c", 6),
    ]
    assert repeats == 3


async def test_a_message_that_is_no_event_raises() -> None:
    stream = ActivityStream(
        _Subscription([Message("__activity", 0, 0, b"\xff\xff")])  # type: ignore[arg-type]
    )
    with pytest.raises(EnvelopeError, match="offset 0 is not an event"):
        await anext(stream)
