"""Partitions in memory, read the way a broker serves them: the read side's test twin.

:class:`MemoryReads` is a :class:`~._read_transport.ReadTransport` (and the
:class:`~._read_transport.ReadRoutes` of its one pretend broker): a test fills
partitions with :meth:`~MemoryReads.append`, and subscriptions read them through
the same :class:`~._stream_reader.StreamReader` the network feeds, with the same
flow control: a call is sent only as many bytes as its reader granted, so read-ahead
bounds hold here as they do against a broker. Messages arrive in a later event-loop
callback than the one that made them available, as bytes from a socket would.

What a broker does to a call can be done by hand: end the open calls of a partition
with any status the server sends (:data:`NOT_LEADER`, :data:`STREAM_DELETED`,
:data:`PAUSED`, :data:`READONLY_END`, :data:`UNAVAILABLE`, or :data:`CLOSED`: a
normal end), refuse the next subscriptions, or stall a partition (nothing more is
sent, not even the "subscribed" answer, until it is released). Every subscribe is
recorded with its request (:attr:`MemoryReads.calls`), so a test can check where a
resubscription started.

Consumer-group subscriptions follow the server's rule: a partition has one group
subscriber, and a new one ends the previous call normally (a hand-over), unless its
group epoch is older (then it is refused as not assigned).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import grpc

from ._errors import ClientClosedError
from ._h2 import Status
from ._proto import api_pb2
from ._stream_reader import MAX_BYTES, MAX_MESSAGES, CallHandle, Delivery, StreamReader

__all__ = [
    "CLOSED",
    "NOT_LEADER",
    "PAUSED",
    "READONLY_END",
    "STREAM_DELETED",
    "UNAVAILABLE",
    "MemoryReads",
    "ServerEnd",
    "SubscribeCall",
]

_PREFIX = 5  # a gRPC message's length prefix, counted by flow control


@dataclass(frozen=True, slots=True)
class ServerEnd:
    """How the server ends (or refuses) a Subscribe call: a gRPC status."""

    code: grpc.StatusCode
    details: str

    def status(self) -> Status:
        """The status as the HTTP/2 layer reports it."""
        return Status(self.code.value[0], self.details)


# The statuses a Liftbridge v1.9.0 broker ends a Subscribe with, in its words.
CLOSED = ServerEnd(grpc.StatusCode.OK, "")
"""A normal end: what a group member's call gets when another member takes over."""
NOT_LEADER = ServerEnd(grpc.StatusCode.FAILED_PRECONDITION, "Server not partition leader")
STREAM_DELETED = ServerEnd(grpc.StatusCode.NOT_FOUND, "No such partition")
PAUSED = ServerEnd(grpc.StatusCode.FAILED_PRECONDITION, "commit log is closed (paused)")
READONLY_END = ServerEnd(grpc.StatusCode.RESOURCE_EXHAUSTED, "End of readonly partition")
UNAVAILABLE = ServerEnd(grpc.StatusCode.UNAVAILABLE, "the connection broke")
_STOPPED = ServerEnd(grpc.StatusCode.RESOURCE_EXHAUSTED, "Reached the stop position")
_EMPTY_RANGE = ServerEnd(grpc.StatusCode.INVALID_ARGUMENT, "stop offset is before start offset")
_NOT_ASSIGNED = ServerEnd(
    grpc.StatusCode.FAILED_PRECONDITION, "consumer is not assigned to the partition"
)


@dataclass(frozen=True, slots=True)
class SubscribeCall:
    """One recorded subscribe: the broker address and the request as sent."""

    address: str
    request: api_pb2.SubscribeRequest

    @property
    def stream(self) -> str:
        """The stream subscribed to."""
        return self.request.stream

    @property
    def partition(self) -> int:
        """The partition subscribed to."""
        return self.request.partition

    @property
    def start_offset(self) -> int:
        """The request's start offset (meaningful with the OFFSET start position)."""
        return self.request.startOffset


@dataclass(slots=True)
class _Partition:
    bodies: list[bytes] = field(default_factory=list)  # serialized Messages, by offset
    timestamps: list[int] = field(default_factory=list)
    calls: list[_MemoryCall] = field(default_factory=list)
    refusals: list[ServerEnd] = field(default_factory=list)
    stalled: bool = False
    group_holder: _MemoryCall | None = None


class _MemoryCall(CallHandle):
    """One Subscribe call on a partition: sends what flow control lets through."""

    def __init__(
        self,
        owner: MemoryReads,
        part: _Partition,
        reader: StreamReader,
        start: int,
        stop: int | None,
        epoch: int | None,
    ) -> None:
        self._owner = owner
        self._part = part
        self.reader = reader
        self._next = start
        self._stop = stop
        self.epoch = epoch
        self._credit = reader.window
        self._opened = False
        self.ended = False
        self._scheduled = False

    # CallHandle: what the reader asks of the "connection".

    def grant(self, increment: int) -> None:
        self._credit += increment
        self.schedule()

    def cancel(self) -> None:
        self._close()

    # The broker side.

    def schedule(self) -> None:
        """Send what can be sent, in a later callback (as a socket would)."""
        if not self._scheduled and not self.ended:
            self._scheduled = True
            self._owner.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        part = self._part
        if self.ended or part.stalled:
            return
        reader = self.reader
        sent = False
        if not self._opened:
            self._opened = True
            reader.h2_append(b"")  # the server's empty "subscribed" message
            self._credit -= _PREFIX
            sent = True
        bodies = part.bodies
        while self._next < len(bodies) and (self._stop is None or self._next <= self._stop):
            body = bodies[self._next]
            cost = len(body) + _PREFIX
            if cost > self._credit:
                # As HTTP/2 does for a message larger than the window: ask for room.
                reader.h2_need(cost)
                break
            reader.h2_append(body)
            self._credit -= cost
            self._next += 1
            sent = True
        if sent:
            reader.h2_wake()
        if not self.ended and self._stop is not None and self._next > self._stop:
            self.end(_STOPPED)

    def end(self, how: ServerEnd) -> None:
        """End the call as the server would, with ``how`` as its status."""
        if self.ended:
            return
        self._close()
        self.reader.h2_end(how.status())

    def _close(self) -> None:
        self.ended = True
        part = self._part
        if self in part.calls:
            part.calls.remove(self)
        if part.group_holder is self:
            part.group_holder = None


class MemoryReads:
    """Stream partitions in memory, served to subscriptions as a broker would.

    A :class:`~._read_transport.ReadTransport` and the
    :class:`~._read_transport.ReadRoutes` of one pretend broker (its address is
    :attr:`address`; :meth:`move_leader` changes it, as a fail-over would).
    ``max_messages`` and ``max_bytes`` bound each call's read-ahead as the client's
    ``read_ahead_messages`` and ``read_ahead_bytes`` do.
    """

    def __init__(
        self,
        *,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
        timeout: float = 5.0,
    ) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.timeout = timeout
        """Seconds a first subscribe may take (the client's ``timeout``)."""
        self.calls: list[SubscribeCall] = []
        """Every subscribe, in order."""
        self.refreshes = 0
        """How many times a subscription asked for fresh metadata."""
        self._leader = 0
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the calls run on (the one of the first subscribe)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def _part(self, stream: str, partition: int) -> _Partition:
        key = (stream, partition)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Partition()
        return part

    # ------------------------------------------------------------------ filling

    def append(
        self,
        stream: str,
        value: bytes,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: int | None = None,
    ) -> int:
        """Store a message at the end of a partition; its offset. Open calls get it."""
        part = self._part(stream, partition)
        offset = len(part.bodies)
        stamp = timestamp if timestamp is not None else offset + 1
        pb = api_pb2.Message(
            offset=offset,
            value=value,
            key=key or b"",
            timestamp=stamp,
            stream=stream,
            partition=partition,
            headers=dict(headers or {}),
        )
        part.bodies.append(pb.SerializeToString())
        part.timestamps.append(stamp)
        for call in part.calls:
            call.schedule()
        return offset

    def extend(self, stream: str, values: Iterable[bytes], *, partition: int = 0) -> list[int]:
        """Store messages at the end of a partition; their offsets."""
        return [self.append(stream, value, partition=partition) for value in values]

    def newest_offset(self, stream: str, partition: int = 0) -> int:
        """Offset of a partition's newest message; -1 when it is empty."""
        return len(self._part(stream, partition).bodies) - 1

    # ------------------------------------------------------------------ misbehaving

    def end_calls(self, stream: str, how: ServerEnd, *, partition: int = 0) -> int:
        """End every open call on a partition with ``how``; how many there were."""
        calls = list(self._part(stream, partition).calls)
        for call in calls:
            call.end(how)
        return len(calls)

    def refuse(self, stream: str, how: ServerEnd, *, partition: int = 0, times: int = 1) -> None:
        """Answer the next ``times`` subscribes to a partition with ``how``."""
        self._part(stream, partition).refusals.extend([how] * times)

    def stall(self, stream: str, *, partition: int = 0, stalled: bool = True) -> None:
        """Send nothing more on a partition's calls (``stalled=False`` releases them)."""
        part = self._part(stream, partition)
        part.stalled = stalled
        if not stalled:
            for call in part.calls:
                call.schedule()

    def open_calls(self, stream: str, *, partition: int = 0) -> int:
        """Calls open on a partition now."""
        return len(self._part(stream, partition).calls)

    def move_leader(self) -> None:
        """Give the partitions a new leader: the next subscribes go to a new address."""
        self._leader += 1

    # ------------------------------------------------------------------ ReadRoutes

    @property
    def address(self) -> str:
        """The pretend broker's address (what :meth:`leader_address` answers)."""
        return f"memory:{self._leader}"

    async def leader_address(self, stream: str, partition: int, *, replica: bool = False) -> str:
        """The pretend broker leads every partition."""
        return self.address

    async def refresh(self) -> None:
        """Count a metadata refresh (nothing to fetch)."""
        self.refreshes += 1

    # ------------------------------------------------------------------ ReadTransport

    def subscribe(
        self,
        address: str,
        request: api_pb2.SubscribeRequest,
        *,
        skip_through: int | None,
        delivery: Delivery | None = None,
    ) -> StreamReader:
        """Start a Subscribe call on the partition the request names."""
        if self._closed:
            raise ClientClosedError("the client is closed; open a new Client")
        recorded = api_pb2.SubscribeRequest()
        recorded.CopyFrom(request)
        self.calls.append(SubscribeCall(address, recorded))
        reader = StreamReader(
            skip_through=skip_through,
            max_messages=self.max_messages,
            max_bytes=self.max_bytes,
            delivery=delivery,
        )
        part = self._part(request.stream, request.partition)
        start, stop, refusal = self._range(part, request)
        epoch = request.consumer.groupEpoch if request.HasField("consumer") else None
        if refusal is None and part.refusals:
            refusal = part.refusals.pop(0)
        holder = part.group_holder
        if (
            refusal is None
            and epoch is not None
            and holder is not None
            and holder.epoch is not None
            and epoch < holder.epoch
        ):
            refusal = _NOT_ASSIGNED
        call = _MemoryCall(self, part, reader, start, stop, epoch)
        reader.attach(call)
        if refusal is not None:
            call.ended = True
            self.loop.call_soon(reader.h2_end, refusal.status())
            return reader
        if epoch is not None:
            if holder is not None:
                holder.end(CLOSED)  # the server's hand-over: the older member's stream ends
            part.group_holder = call
        part.calls.append(call)
        call.schedule()
        return reader

    @staticmethod
    def _range(
        part: _Partition, req: api_pb2.SubscribeRequest
    ) -> tuple[int, int | None, ServerEnd | None]:
        """Where a call starts and stops (an offset, inclusive), or why it is refused."""
        size = len(part.bodies)
        position = req.startPosition
        if position == api_pb2.OFFSET:
            start = max(0, req.startOffset)
        elif position == api_pb2.EARLIEST:
            start = 0
        elif position == api_pb2.LATEST:
            start = max(0, size - 1)
        elif position == api_pb2.TIMESTAMP:
            start = next(
                (i for i, ts in enumerate(part.timestamps) if ts >= req.startTimestamp), size
            )
        else:  # NEW_ONLY
            start = size
        stop: int | None = None
        if req.stopPosition == api_pb2.STOP_OFFSET:
            stop = req.stopOffset
        elif req.stopPosition == api_pb2.STOP_LATEST:
            stop = size - 1
        elif req.stopPosition == api_pb2.STOP_TIMESTAMP:
            stop = sum(1 for ts in part.timestamps if ts <= req.stopTimestamp) - 1
        if stop is not None and stop < start:
            return (
                start,
                stop,
                _EMPTY_RANGE if req.stopPosition == api_pb2.STOP_OFFSET else _STOPPED,
            )
        return start, stop, None

    async def close(self) -> None:
        """End every call (their readers end as cancelled) and refuse new ones."""
        self._closed = True
        for part in self._parts.values():
            for call in list(part.calls):
                call.reader.cancel()
