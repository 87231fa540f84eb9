"""One Subscribe call: its read-ahead buffer and the items a Subscription takes from it.

The call runs on a shared HTTP/2 connection to the broker (see :mod:`._read_pool`);
the connection appends each gRPC message body (raw protobuf bytes) to the call's
buffer as it arrives, on the event loop, and wakes a waiting consumer once per
received chunk: one wake-up for a whole burst of messages, no thread, no lock.

Messages are decoded when taken (:meth:`StreamReader.get`), not when received: a
buffered message costs its wire size (plus a bytes object), so the bound on the
buffer is a bound on memory, and the decoding CPU is spent by the consumer that
asked for it. ``get`` is the one place every message read passes through, once,
whichever API delivers it (a subscription, a consumer's ``async for`` or
``getmany``): there it is counted for the read metrics and handed to the caller's
deserializers (see :class:`Delivery`).

Read-ahead is bounded with HTTP/2 flow control, per call: the server may send only
as many bytes as the reader granted, and the reader grants bytes back as its
consumer takes messages. A slow consumer therefore holds its server back without
holding back the other calls that share the connection. The bound, exactly: what
the server has sent on the call and the consumer has not taken yet (buffered here,
arriving in pieces in :mod:`._h2`, or in flight), counted as sent (each message's
protobuf bytes plus its 5-byte gRPC prefix), is at most

    max(max_bytes, the largest of those messages)

so ``max_bytes`` whenever every message fits in it. A message larger than
``max_bytes`` cannot get through a window of ``max_bytes``: while one arrives, the
window is widened to its size (never further than the connection's ``max_message``
plus its prefix; a larger message ends the call), and it narrows back once the
consumer has taken it. The grant also aims at about ``max_messages`` messages (at
the mean size seen since the last grant), which bounds the count only as far as the
sizes stay near that mean.

The first message of a Subscribe (the server's empty "subscription established") is
reported as :data:`OPENED`; the end of the call follows the last message as a
:class:`StreamEnd`, so messages read before an error are still delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import grpc

from ._errors import RpcError
from ._messages import Message
from ._proto import api_pb2
from .serializers import Deserializer, decoded_fields
from .wire import message_from_proto

if TYPE_CHECKING:
    from ._h2 import Status
    from ._metrics import ReadCell

__all__ = [
    "MAX_BYTES",
    "MAX_MESSAGES",
    "OPENED",
    "CallStatusError",
    "Delivery",
    "Item",
    "StreamEnd",
    "StreamReader",
    "status_error",
]

MAX_MESSAGES: Final = 4096
"""Messages buffered per subscription (about: the grant follows the sizes seen)."""
MAX_BYTES: Final = 4 * 1024 * 1024
"""Bytes of messages (as sent) read ahead per subscription, at most, unless a single
message is larger (see the module docstring)."""
MIN_WINDOW: Final = 16 * 1024
"""The smallest window a call is given, whatever the message sizes."""
FIRST_WINDOW: Final = 64 * 1024
"""The window of a new call, before any message size is known (it adapts at once)."""
_PREFIX: Final = 5  # a gRPC message's length prefix, counted by flow control


class _Opened:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OPENED"


OPENED: Final = _Opened()
"""The server accepted the subscription (its first, empty message arrived)."""

_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}
_parse: Final = api_pb2.Message.FromString
# A message is built (frozen) by message_from_proto; its deserialized value and key
# replace the bytes before anyone else sees it.
_set_value: Final = getattr(Message, "value").__set__  # noqa: B009 (a slot descriptor)
_set_key: Final = getattr(Message, "key").__set__  # noqa: B009


class CallStatusError(grpc.RpcError):
    """How a call failed, in the shape of grpc's errors: ``code()`` and ``details()``."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """The gRPC status code."""
        return self._code

    def details(self) -> str:
        """The server's (or the transport's) message."""
        return self._details

    def __repr__(self) -> str:
        return f"CallStatusError({self._code.name}, {self._details!r})"


def status_error(status: Status) -> CallStatusError:
    """The error for a call that ended with a status other than OK."""
    return CallStatusError(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.details)


class StreamEnd:
    """The last item of a stream: why it ended.

    ``cancelled`` is True when :meth:`StreamReader.cancel` ended it. Otherwise
    ``error`` is None when the server closed the stream normally, a
    :class:`CallStatusError` (``code()``, ``details()``) when the call failed, or
    another exception met while reading (re-raised by the subscription).
    """

    __slots__ = ("cancelled", "error")

    def __init__(self, error: BaseException | None, *, cancelled: bool = False) -> None:
        self.error = error
        self.cancelled = cancelled

    def __repr__(self) -> str:
        return f"StreamEnd({self.error!r}, cancelled={self.cancelled})"


Item = Message[Any, Any] | _Opened | StreamEnd


class Delivery:
    """What a subscription asks of its readers for each message they hand over.

    ``cell``: the read metrics' counters of the partition (messages, bytes);
    None counts nothing. ``value_deserializer`` / ``key_deserializer``: applied to
    the stored bytes (a key of None stays None); a failure raises
    :class:`~liftbridge_nats.DeserializationError` from :meth:`StreamReader.get`
    with the message already taken, so the reader goes on with the next one.
    """

    __slots__ = ("cell", "key_deserializer", "value_deserializer")

    def __init__(
        self,
        cell: ReadCell | None = None,
        value_deserializer: Deserializer[Any] | None = None,
        key_deserializer: Deserializer[Any] | None = None,
    ) -> None:
        self.cell = cell
        self.value_deserializer = value_deserializer
        self.key_deserializer = key_deserializer

    @property
    def deserializing(self) -> bool:
        """Whether a value or key deserializer is set."""
        return self.value_deserializer is not None or self.key_deserializer is not None


class CallHandle:
    """What a reader needs of the connection carrying its call (see :mod:`._read_pool`)."""

    def grant(self, increment: int) -> None:
        """Let the server send ``increment`` more bytes."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Reset the call."""
        raise NotImplementedError


class StreamReader:
    """The buffer of one Subscribe call; the event loop takes items with :meth:`get`.

    ``skip_through`` drops messages at or below that offset (a resubscription after a
    fail-over may replay some; see :mod:`._subscription`). Everything runs on the
    event loop; :meth:`cancel` ends the call at once.
    """

    def __init__(
        self,
        *,
        skip_through: int | None = None,
        max_messages: int = MAX_MESSAGES,
        max_bytes: int = MAX_BYTES,
        delivery: Delivery | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._skip_through = -1 if skip_through is None else skip_through
        self._cell = None if delivery is None else delivery.cell
        self._delivery = delivery if delivery is not None and delivery.deserializing else None
        self._max_messages = max(2, max_messages)
        self._max_bytes = max(MIN_WINDOW, max_bytes)
        self._buffer: deque[bytes | StreamEnd] = deque()
        # Called by the connection for each message body: the deque's own append.
        self.h2_append: Callable[[bytes], None] = self._buffer.append
        self._handle: CallHandle | None = None
        self._opened = False
        self._ended = False
        self.end: StreamEnd | None = None
        """How the call ended, as soon as it did (its item may still wait in the buffer)."""
        self.listener: Callable[[], object] | None = None
        """Called whenever items arrive, after a waiting consumer was woken."""
        self._closing = False
        self._waiter: asyncio.Future[None] | None = None
        self._finished_callbacks: list[Callable[[StreamReader], object]] = []
        # Flow control. ``_credit`` is what the server may send plus what is buffered
        # plus ``_owed`` (taken by the consumer, not yet granted back).
        self._credit = min(FIRST_WINDOW, self._max_bytes)
        self._owed = 0
        self._owed_count = 0
        # Of what is owed, the messages (and their cost) the read metrics have
        # counted already, or never will (see _count).
        self._counted = 0
        self._counted_bytes = 0
        self._grant_at = self._credit // 2
        # Size of a message arriving in pieces, that the window must fit (0: none).
        self._need = 0

    @property
    def window(self) -> int:
        """The receive window to open the call with."""
        return self._credit

    def attach(self, handle: CallHandle) -> None:
        """The call is on a connection now (grants and cancellation go through it)."""
        self._handle = handle

    @property
    def finished(self) -> bool:
        """True once the call has ended (its :class:`StreamEnd` is buffered or taken)."""
        return self._ended

    def add_finished_callback(self, callback: Callable[[StreamReader], object]) -> None:
        """Call ``callback(self)`` once the call has ended (at once if it has)."""
        if self._ended:
            callback(self)
        else:
            self._finished_callbacks.append(callback)

    # ------------------------------------------------------------------ connection side

    def h2_wake(self) -> None:
        """Messages arrived: wake the consumer waiting for them."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.listener is not None:
            self.listener()

    def h2_need(self, size: int) -> None:
        """A message of ``size`` bytes is arriving in pieces: make the window fit it,
        beyond ``max_bytes`` if it is larger (until the consumer takes it)."""
        if size > self._need:
            self._need = size
            self._grant()

    def h2_end(self, status: Status) -> None:
        """The call ended with a gRPC status (code 0: closed normally by the server)."""
        error: BaseException | None = None
        if status.local:
            # Not the server's doing and no retry helps: the subscription raises it.
            error = RpcError(f"reading the stream failed: {status.details}", code="INTERNAL")
        elif status.code != 0:
            error = status_error(status)
        self._finish(StreamEnd(error, cancelled=self._closing))

    def fail(self, error: BaseException) -> None:
        """End the call with ``error`` (the connection could not be opened or broke)."""
        if not self._ended:
            self._finish(StreamEnd(error, cancelled=self._closing))

    def _finish(self, end: StreamEnd) -> None:
        if self._ended:
            return
        self._count()
        self._ended = True
        self.end = end
        self._buffer.append(end)
        self.h2_wake()
        callbacks, self._finished_callbacks = self._finished_callbacks, []
        for callback in callbacks:
            callback(self)

    # ------------------------------------------------------------------ consumer side

    @property
    def buffered(self) -> bool:
        """Whether an item waits to be taken."""
        return bool(self._buffer)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the messages buffered, as sent (prefix included): the part of the
        read-ahead that arrived whole (for diagnostics and tests; it walks the buffer)."""
        return sum(len(body) + _PREFIX for body in self._buffer if type(body) is bytes)

    @property
    def read_ahead_limit(self) -> int:
        """What the server may have sent that the consumer has not taken, at most,
        now: the window granted so far, less what the consumer took since."""
        return self._credit - self._owed

    def peek_offset(self) -> int | None:
        """Offset of the next buffered message (decoded, not taken), None if none."""
        handshake = not self._opened
        for body in self._buffer:
            if type(body) is not bytes:
                return None
            if handshake:
                handshake = False
                continue
            offset = api_pb2.Message.FromString(body).offset
            if offset > self._skip_through:
                return offset
        return None

    def get(self) -> Item | None:
        """The next item, or None when none is buffered yet."""
        buffer = self._buffer
        while buffer:
            body = buffer.popleft()
            if type(body) is not bytes:
                self._count()
                return body  # type: ignore[return-value]
            cost = len(body) + _PREFIX
            self._owed += cost
            self._owed_count += 1
            if self._opened:
                pb = _parse(body)
                taken = pb.offset > self._skip_through
            else:  # the server's empty first message
                pb = None
                taken = False
            if not taken:
                # The handshake, or a message replayed after a resubscription:
                # flow control counts it, the read metrics do not.
                self._counted += 1
                self._counted_bytes += cost
            if self._need:
                if cost >= self._need:
                    self._need = 0  # the message arriving in pieces is here
                elif not buffer:
                    self._grant()  # everything drained: the window must reopen now
            if self._owed >= self._grant_at:
                self._grant()
            if pb is None:
                self._opened = True
                return OPENED
            if taken:
                if self._delivery is None:
                    return message_from_proto(pb)
                return self._deserialized(message_from_proto(pb))
        self._count()  # drained: the consumer has caught up
        return None

    def take_protos(self, limit: int) -> list[api_pb2.Message]:
        """Up to ``limit`` buffered messages, in order, as parsed protobufs: what
        :meth:`get` would return, without building a :class:`Message` of each (for
        readers that copy the fields elsewhere at once, such as the Spark source).

        Flow control, the read metrics and the skip of replayed offsets are those of
        :meth:`get`. It stops before the end of the call, left for :meth:`get` to
        report; a reader with deserializers refuses (they apply to messages only).
        """
        if self._delivery is not None:
            raise RuntimeError("take_protos() cannot apply deserializers")
        out: list[api_pb2.Message] = []
        append = out.append
        buffer = self._buffer
        popleft = buffer.popleft
        skip = self._skip_through
        half = self._max_messages // 2
        while buffer and len(out) < limit and type(buffer[0]) is bytes:
            if not self._opened or self._need:
                # The handshake, or a message arriving in pieces: as get() does.
                body = popleft()
                assert type(body) is bytes  # (the loop's condition)
                cost = len(body) + _PREFIX
                self._owed += cost
                self._owed_count += 1
                pb = _parse(body) if self._opened else None
                if pb is not None and pb.offset > skip:
                    append(pb)
                else:
                    self._opened = True
                    self._counted += 1
                    self._counted_bytes += cost
                if self._need:
                    if cost >= self._need:
                        self._need = 0
                    elif not buffer:
                        self._grant()
                if self._owed >= self._grant_at:
                    self._grant()
                continue
            # get()'s bookkeeping with the counters in locals, up to the next message
            # after which get() would grant (_grant declines while the buffer holds
            # more than half of max_messages).
            owed, count, grant_at = self._owed, self._owed_count, self._grant_at
            left = limit - len(out)
            while True:
                body = popleft()
                if type(body) is not bytes:
                    buffer.appendleft(body)  # the end of the call: get() reports it
                    break
                cost = len(body) + _PREFIX
                owed += cost
                count += 1
                pb = _parse(body)
                if pb.offset > skip:
                    append(pb)
                    left -= 1
                else:  # replayed after a resubscription: not for the read metrics
                    self._counted += 1
                    self._counted_bytes += cost
                if not left or not buffer or (owed >= grant_at and len(buffer) <= half):
                    break
            self._owed, self._owed_count = owed, count
            if owed >= grant_at:
                self._grant()
        if not buffer:
            self._count()
        return out

    def _count(self) -> None:
        """Add the messages taken since the last count to the read metrics.

        Flow control already adds up what the consumer takes (``_owed``); the
        metrics take their share from there at each grant, whenever the buffer is
        drained and when the call ends, instead of counting message by message.
        """
        cell = self._cell
        if cell is not None:
            count = self._owed_count - self._counted
            if count:
                cell.messages += count
                cell.bytes += self._owed - self._counted_bytes - count * _PREFIX
                self._counted = self._owed_count
                self._counted_bytes = self._owed

    def _deserialized(self, message: Message) -> Message[Any, Any]:
        """``message`` with its value and key deserialized; DeserializationError
        (naming it) when they cannot be, and the message is taken all the same."""
        delivery = self._delivery
        assert delivery is not None
        value, key = decoded_fields(message, delivery.value_deserializer, delivery.key_deserializer)
        _set_value(message, value)
        _set_key(message, key)
        return message

    def _grant(self) -> None:
        """Give the server back the window the consumer freed, sized to the limits.

        The target window holds about ``max_messages`` messages of the mean size seen
        since the last grant, within [MIN_WINDOW, max_bytes], and at least a message
        that is arriving in pieces (so that it gets through once the buffer is
        drained): the one way the window exceeds ``max_bytes``. Nothing is granted
        while the buffer holds more than half of ``max_messages``.
        """
        handle = self._handle
        if handle is None or self._ended or len(self._buffer) > self._max_messages // 2:
            return
        if self._owed_count:
            mean = self._owed / self._owed_count
            target = int(min(self._max_bytes, max(MIN_WINDOW, self._max_messages * mean)))
        else:
            target = self._credit
        target = max(target, self._need)
        increment = self._owed + target - self._credit
        if increment <= 0:
            # The window shrinks: keep back what the consumer freed.
            self._credit -= self._owed
        else:
            self._credit = target
            handle.grant(increment)
        self._count()
        self._owed = self._owed_count = self._counted = self._counted_bytes = 0
        self._grant_at = max(1, target // 2)

    async def wait(self) -> None:
        """Return once items are buffered; cancellable. A stream always ends with a
        :class:`StreamEnd` (after :meth:`cancel` too), so a wait never outlasts it."""
        if self._buffer:
            return
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def next_item(self) -> Item:
        """Wait for the next item and take it."""
        while True:
            item = self.get()
            if item is not None:
                return item
            await self.wait()

    def cancel(self) -> None:
        """Cancel the call (returns at once; idempotent)."""
        self._count()  # what was taken after the call ended, too
        if self._ended:
            return
        self._closing = True
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        self._finish(StreamEnd(None, cancelled=True))

    def cancel_threadsafe(self) -> None:
        """:meth:`cancel` from any thread (a finalizer may run anywhere)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self.cancel()
        elif not self._loop.is_closed():
            # (Closed meanwhile: its connections are gone with it.)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.cancel)

    async def wait_finished(self) -> None:
        """Kept for the subscription's life cycle: a call has no thread to wait for."""

    async def aclose(self) -> None:
        """Cancel the call (idempotent)."""
        self.cancel()
