"""Reading a stream partition: Subscribe as an async iterator that survives fail-over.

The server answers a Subscribe with one empty message once the subscription exists
(or with an error status instead), then streams the partition. The event loop reads
the stream ahead into a small bounded buffer (see :mod:`._stream_reader`), from the
client's read transport (:mod:`._read_transport`): over the network, one HTTP/2
connection per broker shared by every subscription to it (:mod:`._read_pool`);
when the buffer is full the server is held back by flow control, so a slow consumer
costs the server's patience, not memory here.

When the stream breaks (the leader died, lost leadership, or the connection dropped)
the iterator refreshes the metadata and subscribes again at the offset after the last
one it delivered: no gap and no duplicate. Stop positions end the iteration cleanly.
Both are logged (``liftbridge_nats.subscription``): the break and the resubscription
at INFO, a subscription given up at ERROR, failed attempts at DEBUG.

A message whose value or key the caller's deserializer refuses is raised as a
:class:`~liftbridge_nats.DeserializationError` in its place: the position moves
past it as if it had been delivered, and the next ``__anext__`` goes on after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Generic

import grpc

from ._checks import check_int, check_name, check_partition
from ._errors import (
    BadRequestError,
    ClientClosedError,
    DeserializationError,
    InvalidArgumentError,
    LiftbridgeError,
    NoLeaderError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    RpcTimeoutError,
)
from ._grpc import Backoff, rpc_error
from ._log import get_logger, redact
from ._messages import K, Message, StartPosition, StopPosition, V
from ._proto import api_pb2
from ._stream_reader import OPENED, Delivery, StreamEnd, StreamReader

if TYPE_CHECKING:
    from ._metrics import Metrics
    from ._read_transport import ReadRoutes, ReadTransport
    from .serializers import Deserializer

__all__ = ["Subscription", "SubscriptionOptions", "TimeSpec", "subscription_options"]

TimeSpec = datetime | timedelta | int | float
"""A point in time: an aware datetime, a timedelta meaning "that long ago", or an int
(nanoseconds) / float (seconds) since the Unix epoch."""

_START_PB = {
    StartPosition.NEW_ONLY: api_pb2.NEW_ONLY,
    StartPosition.OFFSET: api_pb2.OFFSET,
    StartPosition.EARLIEST: api_pb2.EARLIEST,
    StartPosition.LATEST: api_pb2.LATEST,
    StartPosition.TIMESTAMP: api_pb2.TIMESTAMP,
}
_STOP_PB = {
    StopPosition.ON_CANCEL: api_pb2.STOP_ON_CANCEL,
    StopPosition.OFFSET: api_pb2.STOP_OFFSET,
    StopPosition.LATEST: api_pb2.STOP_LATEST,
    StopPosition.TIMESTAMP: api_pb2.STOP_TIMESTAMP,
}
# Serial numbers of group-member subscriptions (see Subscription._request).
_SUBSCRIPTIONS = itertools.count(1)
# The server says this when a stop position lies before the start: an empty range.
_EMPTY_RANGE = "stop offset is before start offset"

_log = get_logger("subscription")


def to_nanos(when: TimeSpec, name: str) -> int:
    """Nanoseconds since the epoch for a :data:`TimeSpec`."""
    if isinstance(when, bool):
        raise InvalidArgumentError(f"{name} must be a datetime, timedelta or number")
    if isinstance(when, datetime):
        return int(when.timestamp() * 1e9)
    if isinstance(when, timedelta):
        if when < timedelta(0):
            raise InvalidArgumentError(f"{name} as a timedelta means 'ago' and cannot be negative")
        return time.time_ns() - int(when.total_seconds() * 1e9)
    if isinstance(when, int):
        return when
    if isinstance(when, float):
        return int(when * 1e9)
    raise InvalidArgumentError(f"{name} must be a datetime, timedelta or number")


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    """A validated subscription request (see :meth:`Client.subscribe`)."""

    stream: str
    partition: int = 0
    start_position: StartPosition = StartPosition.NEW_ONLY
    start_offset: int = 0
    start_timestamp: int = 0
    stop_position: StopPosition = StopPosition.ON_CANCEL
    stop_offset: int = 0
    stop_timestamp: int = 0
    read_isr_replica: bool = False
    resume: bool = False


def subscription_options(
    stream: str,
    *,
    partition: int = 0,
    start_position: StartPosition | None = None,
    start_offset: int | None = None,
    start_time: TimeSpec | None = None,
    stop_position: StopPosition | None = None,
    stop_offset: int | None = None,
    stop_time: TimeSpec | None = None,
    read_isr_replica: bool = False,
    resume: bool = False,
) -> SubscriptionOptions:
    """Check subscribe arguments before anything is sent.

    ``start_offset`` or ``start_time`` alone imply their start position, and likewise
    for the stop side; an explicit position that contradicts them is an error.
    """
    check_name(stream, "stream name")
    check_partition(partition)
    if start_offset is not None:
        check_int(start_offset, "start_offset")
    if stop_offset is not None:
        check_int(stop_offset, "stop_offset")
    if start_offset is not None and start_time is not None:
        raise InvalidArgumentError("give start_offset or start_time, not both")
    if stop_offset is not None and stop_time is not None:
        raise InvalidArgumentError("give stop_offset or stop_time, not both")

    if start_position is None:
        if start_offset is not None:
            start_position = StartPosition.OFFSET
        elif start_time is not None:
            start_position = StartPosition.TIMESTAMP
        else:
            start_position = StartPosition.NEW_ONLY
    if not isinstance(start_position, StartPosition):
        raise InvalidArgumentError(
            f"start_position must be a StartPosition, got {start_position!r}"
        )
    if start_position is StartPosition.OFFSET:
        if start_offset is None:
            raise InvalidArgumentError("StartPosition.OFFSET needs start_offset")
    elif start_offset is not None:
        raise InvalidArgumentError(
            f"start_offset only goes with StartPosition.OFFSET, not {start_position.name}"
        )
    if start_position is StartPosition.TIMESTAMP:
        if start_time is None:
            raise InvalidArgumentError("StartPosition.TIMESTAMP needs start_time")
    elif start_time is not None:
        raise InvalidArgumentError(
            f"start_time only goes with StartPosition.TIMESTAMP, not {start_position.name}"
        )

    if stop_position is None:
        if stop_offset is not None:
            stop_position = StopPosition.OFFSET
        elif stop_time is not None:
            stop_position = StopPosition.TIMESTAMP
        else:
            stop_position = StopPosition.ON_CANCEL
    if not isinstance(stop_position, StopPosition):
        raise InvalidArgumentError(f"stop_position must be a StopPosition, got {stop_position!r}")
    if stop_position is StopPosition.OFFSET:
        if stop_offset is None:
            raise InvalidArgumentError("StopPosition.OFFSET needs stop_offset")
        if start_offset is not None and stop_offset < start_offset:
            raise InvalidArgumentError(
                f"stop_offset {stop_offset} is before start_offset {start_offset}"
            )
    elif stop_offset is not None:
        raise InvalidArgumentError(
            f"stop_offset only goes with StopPosition.OFFSET, not {stop_position.name}"
        )
    if stop_position is StopPosition.TIMESTAMP:
        if stop_time is None:
            raise InvalidArgumentError("StopPosition.TIMESTAMP needs stop_time")
    elif stop_time is not None:
        raise InvalidArgumentError(
            f"stop_time only goes with StopPosition.TIMESTAMP, not {stop_position.name}"
        )

    return SubscriptionOptions(
        stream=stream,
        partition=partition,
        start_position=start_position,
        start_offset=start_offset or 0,
        start_timestamp=0 if start_time is None else to_nanos(start_time, "start_time"),
        stop_position=stop_position,
        stop_offset=stop_offset or 0,
        stop_timestamp=0 if stop_time is None else to_nanos(stop_time, "stop_time"),
        read_isr_replica=read_isr_replica,
        resume=resume,
    )


def _cancel_all(readers: list[StreamReader]) -> None:
    """Finalizer of a Subscription dropped unclosed: cancel its calls."""
    for reader in readers:
        reader.cancel_threadsafe()


class _Resubscribe(Exception):
    """Internal: the server stream broke in a way a new subscription can repair."""

    def __init__(self, cause: LiftbridgeError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Subscription(Generic[V, K]):
    """An async iterator of :class:`~liftbridge_nats.Message` from one partition.

    Use ``async with client.subscribe(...) as sub: async for msg in sub: ...`` so that
    the server stream is closed when you stop reading; ``async for`` alone also works
    and the stream closes with the client. ``await sub.start()`` subscribes eagerly
    (the first ``__anext__`` does it otherwise), which makes NEW_ONLY subscriptions
    see everything published after it returns.

    An open subscription reads ahead of the iteration about 4096 messages, and at
    most 4 MiB of them (the client's ``read_ahead_messages`` and ``read_ahead_bytes``
    change these), save for a single larger message, let through whole; it needs no
    thread of its own (every subscription is read by the event loop). ``aclose()``
    (and closing the client) ends the server stream.

    With deserializers (see :meth:`Client.subscribe`) it yields ``Message[V, K]``;
    a message they refuse is raised as a
    :class:`~liftbridge_nats.DeserializationError` and the iteration goes on
    with the next one.

    (``take_many``, ``buffered``, ``streaming``, ``handed_over``, ``ensure_open``,
    ``defer_error``, ``peek_offset`` and ``abandon`` serve the package's
    :class:`~liftbridge_nats.Consumer`, ``take_protos`` and ``wait_buffered`` its
    Spark source; iterate instead.)
    """

    def __init__(
        self,
        router: ReadRoutes,
        options: SubscriptionOptions,
        *,
        transport: ReadTransport,
        resubscribe_wait: float = 30.0,
        group: api_pb2.Consumer | None = None,
        listener: Callable[[], object] | None = None,
        value_deserializer: Deserializer[V] | None = None,
        key_deserializer: Deserializer[K] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.options = options
        self._router = router
        self._transport = transport
        self._resubscribe_wait = resubscribe_wait
        self._group = group
        cell = (
            None
            if metrics is None
            else metrics.read_cell(
                options.stream, options.partition, group.groupId if group is not None else None
            )
        )
        # What each reader does per message it hands over (None: nothing).
        self._delivery = (
            Delivery(cell, value_deserializer, key_deserializer)
            if cell is not None or value_deserializer is not None or key_deserializer is not None
            else None
        )
        # The broker of the current (or last) server stream, for the logs.
        self._address = ""
        self._stop_offset = (
            options.stop_offset if options.stop_position is StopPosition.OFFSET else None
        )
        # The reader of the current server stream. Messages wait in its buffer, so a
        # cancelled __anext__ (say, under asyncio.wait_for) loses none.
        self._reader: StreamReader | None = None
        # Every reader whose call may still run (the current one included): aclose()
        # ends them, and a Subscription dropped unclosed cancels them.
        self._readers: list[StreamReader] = []
        weakref.finalize(self, _cancel_all, self._readers).atexit = False
        self._last_offset: int | None = None
        # While streams break before delivering a message: the backoff (and deadline,
        # resubscribe_wait after the first break) of that outage, and the last break.
        # An opened stream alone does not end an outage: a broker that accepts every
        # subscription and breaks it at once must not keep one going for ever.
        self._outage: Backoff | None = None
        self._break: LiftbridgeError | None = None
        self._opened_at = 0.0  # when the current (or last) stream opened
        # An error met by take_many after some messages: raised by the next take.
        self._error: LiftbridgeError | None = None
        # Called (on the event loop) whenever the current stream has something new.
        self._listener: Callable[[], object] | None = listener
        self._done = False
        self._started = False
        self._refused = False
        self.resubscribes = 0
        """How many times the subscription was re-established after a broken stream."""

    @property
    def last_offset(self) -> int | None:
        """Offset of the last message delivered, None before the first."""
        return self._last_offset

    @property
    def closed(self) -> bool:
        """True once the iteration has ended (stop position, close, or error)."""
        return self._done

    @property
    def address(self) -> str:
        """The broker the current (or last) stream was opened to."""
        return self._address

    def reconnect(self, why: str) -> None:
        """Drop the current stream (a silent one from a broker that no longer leads
        the partition, say): the next :meth:`ensure_open` subscribes again after the
        last message taken, at the leader the metadata names then."""
        if self._reader is None or self._done:
            return
        _log.info(
            "%s: the stream from broker %s is silent after offset %s and %s; subscribing again",
            self._label(),
            redact(self._address),
            "none" if self._last_offset is None else self._last_offset,
            why,
        )
        self._drop_reader()

    @property
    def refused(self) -> bool:
        """True when the broker refused this group member's Subscribe as not assigned:
        a subscriber with a newer group epoch holds the partition there (the iteration
        has ended; whether the partition is still ours is the group's to say)."""
        return self._refused

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Subscription[V, K]:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Establish the subscription now; raises if the server refuses it."""
        if not self._started and not self._done:
            await self._open(first=True)

    async def aclose(self) -> None:
        """Stop reading and close the server stream (idempotent)."""
        self.abandon()

    def abandon(self) -> None:
        """End the iteration now and cancel every call (no I/O to wait for; for the
        package's consumers, see :class:`._read_transport.PartitionFeed`)."""
        self._done = True
        self._drop_reader()
        for reader in self._readers:
            reader.cancel()  # a subscribe in progress in another task too
        self._readers.clear()

    def _drop_reader(self) -> None:
        """Cancel the current stream and forget it."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            if reader in self._readers:
                self._readers.remove(reader)

    def _reap(self) -> None:
        """Forget the readers that ended, except the current one."""
        self._readers[:] = [r for r in self._readers if r is self._reader or not r.finished]

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> Subscription[V, K]:
        return self

    async def __anext__(self) -> Message[V, K]:
        while True:
            message = self._take()
            if message is not None:
                return message
            if self._done:
                raise StopAsyncIteration
            reader = self._reader
            if reader is None:
                await self._open(first=not self._started)
            else:
                await reader.wait()

    def _take(self) -> Message[V, K] | None:
        """The next buffered message, or None. Meeting the end of a server stream, it
        decides what follows (no I/O: the caller subscribes again or stops)."""
        error = self._error
        if error is not None:
            self._error = None
            raise error
        reader = self._reader
        while reader is not None:
            try:
                item = reader.get()
            except DeserializationError as exc:
                self._passed(exc.offset)
                raise
            if item is None:
                return None
            if type(item) is Message:
                # (The reader drops offsets at or below the last delivered one: a
                # resubscription can replay some, see _try_open.)
                self._passed(item.offset)
                return item
            assert isinstance(item, StreamEnd), item
            self._drop_reader()
            self._on_stream_end(item)
            return None
        return None

    def _passed(self, offset: int) -> None:
        """The message at ``offset`` was delivered (or raised as undecodable)."""
        self._last_offset = offset
        self._outage = None
        if self._stop_offset is not None and offset >= self._stop_offset:
            self._done = True
            self._drop_reader()

    # ------------------------------------------------------------------ protobufs
    # What the Spark source reads through: the fields go straight into its columns.

    def take_protos(self, limit: int) -> list[api_pb2.Message]:
        """Up to ``limit`` buffered messages as parsed protobufs, without waiting: what
        iterating would deliver (in order, replayed offsets skipped, nothing past the
        stop offset), without building a :class:`Message` of each. An empty list: none
        is buffered (:meth:`wait_buffered`), or the iteration is over (:attr:`closed`).
        Errors are raised as ``__anext__`` raises them. No deserializers."""
        if limit < 1:
            return []
        reader = self._reader
        if reader is None or self._error is not None:
            message = self._take()  # raises the deferred error, if any
            assert message is None, message
            return []
        out = reader.take_protos(limit)
        if not out:
            # Nothing buffered, or the end of the stream: _take decides what follows.
            message = self._take()
            assert message is None, message
            return out
        stop = self._stop_offset
        if stop is not None and out[-1].offset >= stop:
            for i, pb in enumerate(out):
                if pb.offset >= stop:
                    del out[i + 1 :]
                    break
        self._passed(out[-1].offset)
        return out

    async def wait_buffered(self) -> None:
        """Return once :meth:`take_protos` may have something (subscribing again
        first if the stream ended); at once when the iteration is over."""
        if self._error is not None or self._done:
            return
        reader = self._reader
        if reader is None:
            await self._open(first=not self._started)
        else:
            await reader.wait()

    # ------------------------------------------------------------------ PartitionFeed
    # What a consumer's fetcher reads a partition through (see ._read_transport).

    def take_many(self, limit: int) -> list[Message[V, K]]:
        """Up to ``limit`` buffered messages, without waiting. An error met after some
        messages is kept for the next call, so that those are delivered first (a
        message that could not be deserialized counts as delivered either way)."""
        out: list[Message[V, K]] = []
        reader = self._reader
        try:
            if reader is None or self._error is not None or self._stop_offset is not None:
                take = self._take  # the general case, a message at a time
                while len(out) < limit:
                    message = take()
                    if message is None:
                        break
                    out.append(message)
                return out
            # The common case, without a call per message through _take.
            get = reader.get
            append = out.append
            while len(out) < limit:
                item = get()
                if type(item) is Message:
                    append(item)
                    continue
                if item is not None:
                    assert isinstance(item, StreamEnd), item
                    self._drop_reader()
                    self._on_stream_end(item)
                break
        except LiftbridgeError as exc:
            if out:
                self._last_offset = out[-1].offset
                self._outage = None
            if isinstance(exc, DeserializationError):
                self._passed(exc.offset)  # (idempotent: _take may have done it)
            if not out:
                raise
            self._error = exc
            return out
        if out:
            self._last_offset = out[-1].offset
            self._outage = None
        return out

    @property
    def buffered(self) -> bool:
        """Whether a message (or the end of a stream) waits to be taken."""
        reader = self._reader
        return self._error is not None or (reader is not None and reader.buffered)

    @property
    def streaming(self) -> bool:
        """Whether a server stream is current (False: :meth:`ensure_open` subscribes)."""
        return self._reader is not None

    def defer_error(self, error: LiftbridgeError) -> None:
        """Raise ``error`` at the next take (the caller holds messages already)."""
        self._error = error

    def peek_offset(self) -> int | None:
        """Offset of the next buffered message, not taken; None when none is."""
        reader = self._reader
        return None if reader is None else reader.peek_offset()

    @property
    def handed_over(self) -> bool:
        """A group member's stream was ended by the server: another member (with a
        newer group epoch) subscribed to the partition."""
        reader = self._reader
        end = None if reader is None else reader.end
        return (
            self._group is not None and end is not None and end.error is None and not end.cancelled
        )

    async def ensure_open(self) -> bool:
        """Subscribe (again) if the stream ended; False once the iteration is over."""
        if not self._done and self._reader is None:
            await self._open(first=not self._started)
        return not self._done

    def _on_stream_end(self, end: StreamEnd) -> None:
        error = end.error
        if end.cancelled:
            self._done = True  # closed by aclose() or with the client
        elif error is None:
            if self._group is not None:
                # The server ends a group member's stream when another member takes
                # the partition over: that is the end of this subscription.
                self._done = True
        elif isinstance(error, grpc.RpcError):
            self._on_stream_error(error)
        else:
            self._done = True
            raise error

    def _on_stream_error(self, exc: grpc.RpcError) -> None:
        code = exc.code()
        detail = (exc.details() or "").lower()
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            # The stop position (or the end of a readonly partition) was reached.
            self._done = True
            return
        if code == grpc.StatusCode.CANCELLED:
            # Not ours: a close by us (aclose(), or with the client) ends the stream as
            # cancelled before this. The broker cancelled the call: subscribe again.
            self._log_break(exc)
            return
        if (
            self._group is not None
            and code == grpc.StatusCode.FAILED_PRECONDITION
            and "assigned" in detail
        ):
            self._done = True
            return
        broken = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
        if code in broken and not (code == grpc.StatusCode.INTERNAL and "paused" in detail):
            self._log_break(exc)
            return  # the next __anext__ resubscribes
        err = rpc_error(exc, self._what())
        if isinstance(err, NotLeaderError):
            self._log_break(exc)
            return
        self._done = True
        if code == grpc.StatusCode.NOT_FOUND:
            raise NoSuchStreamError(
                f"{self._what()}: the stream was deleted while subscribed", code=code.name
            )
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            raise PartitionPausedError(
                f"{self._what()}: the partition was paused; resume_stream() or subscribe(resume=True)",
                code=code.name,
            )
        raise err

    def _what(self) -> str:
        return f"subscribe to stream {self.options.stream!r} partition {self.options.partition}"

    def _label(self) -> str:
        """Which subscription, for the logs."""
        label = f"stream {self.options.stream!r} partition {self.options.partition}"
        if self._group is not None:
            label += f" (group {self._group.groupId!r} member {self._group.consumerId})"
        return label

    def _log_break(self, exc: grpc.RpcError) -> None:
        self._break = rpc_error(exc, self._what())
        _log.info(
            "%s: the stream from broker %s broke after offset %s (%s: %s); subscribing again",
            self._label(),
            redact(self._address),
            "none" if self._last_offset is None else self._last_offset,
            exc.code().name,
            exc.details(),
        )

    def _request(self) -> api_pb2.SubscribeRequest:
        opts = self.options
        if self._last_offset is not None:
            # Resubscribing: carry on right after the last delivered message.
            opts = replace(
                opts, start_position=StartPosition.OFFSET, start_offset=self._last_offset + 1
            )
        req = api_pb2.SubscribeRequest(
            stream=opts.stream,
            partition=opts.partition,
            startPosition=_START_PB[opts.start_position],
            startOffset=opts.start_offset,
            startTimestamp=opts.start_timestamp,
            stopPosition=_STOP_PB[opts.stop_position],
            stopOffset=opts.stop_offset,
            stopTimestamp=opts.stop_timestamp,
            readISRReplica=opts.read_isr_replica,
            resume=opts.resume,
        )
        if self._group is not None:
            req.consumer.CopyFrom(self._group)
            # Server trap (v1.9.0): a partition remembers one group subscriber, and a
            # subscription that ends forgets the one registered under its consumer id,
            # even when that is a newer subscription of the same member. Re-subscribing
            # (after a fail-over, a seek, a hand-over check) would then leave the
            # partition unguarded: another member's subscription would not end ours,
            # and both would read it. The server uses this id for nothing else, so
            # each subscription names itself apart (the member id, then a serial).
            req.consumer.consumerId = f"{self._group.consumerId}/{next(_SUBSCRIPTIONS)}"
        return req

    async def _open(self, *, first: bool) -> None:
        """Subscribe (again), retrying while leadership settles."""
        try:
            await self._open_retrying(first=first)
        finally:
            self._reap()

    async def _open_retrying(self, *, first: bool) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        if first:
            backoff = Backoff(began + self._router.timeout, first=0.05)
        elif self._outage is None or began - self._opened_at >= self._resubscribe_wait:
            # (A stream that stayed open that long ended the outage, even if it was
            # quiet.)
            backoff = self._outage = Backoff(began + self._resubscribe_wait, first=0.2)
        else:
            # The last resubscription opened and broke with nothing delivered: the
            # outage goes on, and so do its backoff and its deadline.
            backoff = self._outage
            if not await backoff.sleep():
                self._done = True
                broke = self._break or NoLeaderError(
                    f"{self._what()}: the stream keeps breaking", code="UNAVAILABLE"
                )
                _log.error(
                    "%s: gave up subscribing again (resubscribe_wait): every stream broke "
                    "before delivering a message: %s",
                    self._label(),
                    broke,
                )
                raise broke
        attempt = 0
        while True:
            err: LiftbridgeError
            try:
                self._reader = await self._try_open(backoff.remaining())
                self._started = True
                self._opened_at = loop.time()
                if not first:
                    self.resubscribes += 1
                    if self._reader is not None:
                        _log.info(
                            "%s: subscribed again to broker %s after offset %s "
                            "(%d failed attempts, %.2f s)",
                            self._label(),
                            redact(self._address),
                            "none" if self._last_offset is None else self._last_offset,
                            attempt,
                            loop.time() - began,
                        )
                return
            except _Resubscribe as exc:
                err = exc.cause
            except (NoLeaderError, NoSuchStreamError) as exc:
                if isinstance(exc, NoSuchStreamError) and attempt >= 4:
                    self._done = True
                    raise
                err = exc
            except LiftbridgeError:
                self._done = True
                raise
            if self._done:
                return
            attempt += 1
            _log.debug(
                "%s: subscribe attempt %d failed: %s",
                self._label(),
                attempt,
                err,
            )
            if not await backoff.sleep():
                self._done = True
                if not first:
                    _log.error(
                        "%s: gave up subscribing again after %.1f s (resubscribe_wait): %s",
                        self._label(),
                        loop.time() - began,
                        err,
                    )
                raise err
            with contextlib.suppress(LiftbridgeError):
                await self._router.refresh()

    async def _try_open(self, left: float) -> StreamReader | None:
        opts = self.options
        if (
            self._stop_offset is not None
            and self._last_offset is not None
            and self._last_offset >= self._stop_offset
        ):
            self._done = True
            return None
        self._reap()  # the readers of earlier attempts
        address = await self._router.leader_address(
            opts.stream, opts.partition, replica=opts.read_isr_replica
        )
        # Server trap (v1.9.0): asked for an offset above its high watermark, a new
        # leader whose watermark still lags starts from watermark + 1, which can be a
        # message this subscription delivered before the fail-over: the reader skips
        # everything up to the last delivered offset.
        self._address = address
        reader = self._transport.subscribe(
            address,
            self._request(),
            skip_through=self._last_offset,
            delivery=self._delivery,
        )
        self._readers.append(reader)
        try:
            async with asyncio.timeout(max(left, 0.05)):
                first = await reader.next_item()
        except TimeoutError:
            reader.cancel()
            raise _Resubscribe(
                RpcTimeoutError(
                    f"{self._what()}: no answer from {address}", code="DEADLINE_EXCEEDED"
                )
            ) from None
        except BaseException:
            reader.cancel()
            raise
        if first is OPENED and not self._done:
            reader.listener = self._listener
            if self._listener is not None and reader.buffered:
                self._listener()
            return reader
        reader.cancel()
        if self._done:
            return None  # closed (by another task) meanwhile
        assert isinstance(first, StreamEnd), first
        if first.cancelled:
            raise ClientClosedError("the client is closed; open a new Client")
        exc = first.error
        if exc is None:
            raise _Resubscribe(
                NoLeaderError(f"{self._what()}: the server closed the stream", code="UNAVAILABLE")
            )
        if not isinstance(exc, grpc.RpcError):
            raise exc
        code = exc.code()
        detail = (exc.details() or "").lower()
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED or (
            code == grpc.StatusCode.INVALID_ARGUMENT and _EMPTY_RANGE in detail
        ):
            # Nothing to read between the start and the stop position.
            self._done = True
            return None
        if "lookup offset for timestamp" in detail:
            if opts.stop_position is StopPosition.TIMESTAMP and "before the beginning" in detail:
                self._done = True  # stop_time lies before the first message
                return None
            raise BadRequestError(f"{self._what()} failed: {exc.details()}", code=code.name)
        if (
            self._group is not None
            and code == grpc.StatusCode.FAILED_PRECONDITION
            and "assigned" in detail
        ):
            # A subscriber with a newer group epoch holds the partition at this broker:
            # another member now, or one of a deleted group's members (a group created
            # again starts its epochs over). The consumer's next heartbeat tells which.
            self._done = self._refused = True
            return None
        err = rpc_error(exc, self._what())
        if isinstance(err, NotLeaderError) or code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.INTERNAL,
        ):
            raise _Resubscribe(err)
        raise err
