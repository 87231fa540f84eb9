"""The activity stream: typed records of what happened to streams and groups.

When the brokers run with ``activity.stream.enabled: true``, the metadata leader
writes one protobuf ``ActivityStreamEvent`` per operation (create, delete, pause,
resume, readonly, group join and leave) to the internal ``__activity`` stream.
:class:`ActivityStream` reads it and yields :class:`ActivityEvent` records.

The leader publishes each event at least once: when recording that it published one
fails (a Raft timeout on a busy cluster), or when a new metadata leader takes over, it
publishes again events already in the stream. An event's ``id`` is its operation's Raft
index, and events are published in Raft order, so :class:`ActivityStream` yields each
once: an event whose id is not above every id it yielded before is one of those copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from ._errors import EnvelopeError
from ._messages import Message
from ._proto import api_pb2

if TYPE_CHECKING:
    from ._subscription import Subscription

__all__ = ["ACTIVITY_STREAM", "ActivityEvent", "ActivityOp", "ActivityStream", "decode_activity"]

ACTIVITY_STREAM = "__activity"


class ActivityOp(IntEnum):
    """The operation an activity event records."""

    CREATE_STREAM = 0
    DELETE_STREAM = 1
    PAUSE_STREAM = 2
    RESUME_STREAM = 3
    SET_STREAM_READONLY = 4
    JOIN_CONSUMER_GROUP = 5
    LEAVE_CONSUMER_GROUP = 6


@dataclass(frozen=True, slots=True)
class ActivityEvent:
    """One operation on the cluster.

    Stream operations fill ``stream`` and ``partitions`` (plus ``resume_all`` for
    pauses and ``readonly`` for readonly changes); group operations fill ``group_id``,
    ``consumer_id``, ``streams`` (joins) and ``expired`` (a leave caused by a timeout).
    ``offset`` and ``timestamp`` (ns) locate the event in the activity stream.
    """

    id: int
    op: ActivityOp
    offset: int
    timestamp: int
    stream: str = ""
    partitions: tuple[int, ...] = ()
    resume_all: bool = False
    readonly: bool = False
    group_id: str = ""
    consumer_id: str = ""
    streams: tuple[str, ...] = ()
    expired: bool = False


def decode_activity(msg: Message) -> ActivityEvent:
    """Decode an ``__activity`` message; EnvelopeError when it is not an event."""
    pb = api_pb2.ActivityStreamEvent()
    try:
        pb.ParseFromString(msg.value)
        op = ActivityOp(pb.op)
    except (DecodeError, ValueError) as exc:
        raise EnvelopeError(
            f"activity message at offset {msg.offset} is not an event: {exc}"
        ) from None

    def event(**fields: object) -> ActivityEvent:
        return ActivityEvent(pb.id, op, msg.offset, msg.timestamp, **fields)  # type: ignore[arg-type]

    if op is ActivityOp.CREATE_STREAM:
        c = pb.createStreamOp
        return event(stream=c.stream, partitions=tuple(c.partitions))
    if op is ActivityOp.DELETE_STREAM:
        return event(stream=pb.deleteStreamOp.stream)
    if op is ActivityOp.PAUSE_STREAM:
        p = pb.pauseStreamOp
        return event(stream=p.stream, partitions=tuple(p.partitions), resume_all=p.resumeAll)
    if op is ActivityOp.RESUME_STREAM:
        r = pb.resumeStreamOp
        return event(stream=r.stream, partitions=tuple(r.partitions))
    if op is ActivityOp.SET_STREAM_READONLY:
        s = pb.setStreamReadonlyOp
        return event(stream=s.stream, partitions=tuple(s.partitions), readonly=s.readonly)
    if op is ActivityOp.JOIN_CONSUMER_GROUP:
        j = pb.joinConsumerGroupOp
        return event(group_id=j.groupId, consumer_id=j.consumerId, streams=tuple(j.streams))
    leave = pb.leaveConsumerGroupOp
    return event(group_id=leave.groupId, consumer_id=leave.consumerId, expired=leave.expired)


class ActivityStream:
    """Async iterator of :class:`ActivityEvent`, each event once (the server may
    publish one again: see the module's notes); also an async context manager."""

    def __init__(self, subscription: Subscription) -> None:
        self._sub = subscription
        self._last_id = -1
        self.repeats = 0
        """Events skipped because the server had published them already."""

    async def __aenter__(self) -> ActivityStream:
        await self._sub.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Subscribe now (otherwise the first ``__anext__`` does)."""
        await self._sub.start()

    async def aclose(self) -> None:
        """Stop reading."""
        await self._sub.aclose()

    def __aiter__(self) -> ActivityStream:
        return self

    async def __anext__(self) -> ActivityEvent:
        while True:
            event = decode_activity(await self._sub.__anext__())
            if event.id > self._last_id:
                self._last_id = event.id
                return event
            self.repeats += 1
