"""A publish transport in memory with a small Liftbridge stand-in: publish with no server.

``Publisher(transport=MemoryTransport())`` publishes without NATS or Liftbridge, as
httpx's ``MockTransport`` serves its client: every message is stored at the next offset
of its subject and acked, and recorded in :attr:`MemoryTransport.published`. A test
makes publishes fail on purpose with :meth:`MemoryTransport.fail` (no responders, no
ack, or an ack error) to exercise the application's error handling.

Underneath sits the same machinery the SDK's own unit tests drive: written messages
wait in an outgoing buffer until the event loop runs (like nats-py's flusher), then
reach :attr:`MemoryTransport.delivered`; the connection can stall (``buffer_limit``,
:meth:`~MemoryTransport.hold`), go down and come back
(:meth:`~MemoryTransport.disconnect`, :meth:`~MemoryTransport.reconnect`) or close.
Integration tests against real servers stay the proof of the wire; this pins down
application logic in milliseconds.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from liftbridge_nats._errors import InvalidArgumentError, NotConnectedError
from liftbridge_nats._messages import AckError, AckPolicy
from liftbridge_nats._proto import api_pb2
from liftbridge_nats._transport import (
    FastPath,
    InboxSubscription,
    OnData,
    OnStatus,
    PublishTransport,
)
from liftbridge_nats.envelope import MsgType, encode
from liftbridge_nats.wire import NO_OFFSET_CHECK, PublishedMessage, decode_publish

__all__ = ["Failure", "MemoryTransport", "RecordedMessage", "Responder", "Sent"]

# Waiters for room are woken at least this often, as on a real connection.
_POLL = 0.01


class Failure(enum.Enum):
    """How a publish fails besides an ack error (see :meth:`MemoryTransport.fail`)."""

    NO_RESPONDERS = "no responders"
    """NATS reports that nobody received the message (the publisher raises
    :class:`~liftbridge_nats.NoRespondersError` at once, or sends it again with
    ``retry=True``). Reported only for messages sent with a NATS reply subject, as the
    publisher does unless ``Publisher(no_responders=False)``."""
    NO_ACK = "no ack"
    """The message is dropped and no ack ever comes (a paused partition, a partition
    without a leader, a lost ack): the publish fails with
    :class:`~liftbridge_nats.AckTimeoutError` at its deadline."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One message as the transport carried it (raw bytes, for responders)."""

    subject: str
    reply: str
    data: bytes
    fast: bool
    """True when it came through write() (the fast path), False through send()."""

    @property
    def published(self) -> PublishedMessage:
        """The decoded envelope."""
        return decode_publish(self.data)


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One message that reached the stand-in server, as the publisher sent it."""

    subject: str
    """The NATS subject: the partition subject (partition N of a stream on ``orders``
    listens on ``orders.N``, partition 0 on ``orders`` itself)."""
    value: bytes
    key: bytes | None
    """None when the message has no key (an empty key reads back as None too)."""
    headers: Mapping[str, bytes]
    """The message's headers (tracing adds ``traceparent`` when it is on)."""
    correlation_id: str
    ack_policy: AckPolicy
    expected_offset: int | None
    """The offset optimistic concurrency control was asked to check; None for none."""
    offset: int | None
    """Where the stand-in stored it; None when it was not stored (a failure was
    injected, or a custom responder did not store it as it arrived)."""
    failure: Failure | AckError | None
    """The failure injected for this message, None when there was none."""
    ack_inbox: str
    reply_subject: str
    """The NATS reply subject ("" for none)."""


Responder = Callable[["MemoryTransport", "Sent"], None]
"""A callable answering each message that arrives: ``responder(transport, sent)``."""

_Failing = Failure | AckError


@dataclass(slots=True)
class _Rule:
    failure: _Failing
    subject: str | None
    left: int | None  # None: until clear_failures()


class _MemoryInbox(InboxSubscription):
    def __init__(self, transport: MemoryTransport, prefix: str) -> None:
        self._transport = transport
        self._prefix = prefix

    @property
    def direct(self) -> bool:
        return True

    async def close(self) -> None:
        self._transport._inboxes.pop(self._prefix, None)


class MemoryTransport(PublishTransport):
    """A NATS connection and a Liftbridge server in memory, for a :class:`Publisher`.

    ``Publisher(transport=MemoryTransport())`` publishes with no server. By default
    each message that arrives is stored at the next offset of its NATS subject
    (offsets count from 0 per subject; a subject stands for one partition of one
    stream, so partition 1 of a stream on ``orders``, subject ``orders.1``, counts on
    its own) and acked when it asks for an ack; its ack names the subject as its
    stream, partition 0. Every message that arrives, failed or not, re-sends included,
    is recorded in :attr:`published` in order of arrival.

    :meth:`fail` makes the next publishes (or all of them, or those on one subject)
    fail; messages sent with ``AckPolicy.NONE`` are never failed (nothing would tell
    the publisher).

    ``responder``: instead of storing and acking, call ``responder(transport, sent)``
    for each message (injected failures still come first); it answers with
    :meth:`ack`, :meth:`store` or :meth:`no_responders`, now or later, or not at all.
    ``buffer_limit`` (bytes, 0 for none) bounds the outgoing buffer while it is held;
    ``max_payload`` is the largest message the connection takes (NATS's default);
    ``fast_path=False`` makes the publisher use the slow path (:meth:`send`) only.
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        buffer_limit: int = 0,
        max_payload: int = 1024 * 1024,
        fast_path: bool = True,
    ) -> None:
        self.responder = responder
        self.buffer_limit = buffer_limit
        self._max_payload = max_payload
        self._fast = FastPath(True) if fast_path else FastPath(False, "turned off by the test")
        self.published: list[RecordedMessage] = []
        """Every message that reached the stand-in, in order (see :class:`RecordedMessage`)."""
        self.buffer: list[Sent] = []
        """Messages written but not yet flushed (see :meth:`hold`)."""
        self.buffered_bytes = 0
        self.delivered: list[Sent] = []
        """Every message that reached the stand-in, as raw bytes."""
        self.flushes = 0
        self._connected = True
        self._closed = False
        self._held = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self._room: list[asyncio.Future[None]] = []
        self._inboxes: dict[str, tuple[OnData, OnStatus]] = {}
        self._inbox_ids = itertools.count(1)
        self._fast_sent = 0
        self._public_sent = 0
        self._offsets: dict[str, int] = defaultdict(int)
        self._rules: list[_Rule] = []
        # The message being answered as it arrives (decoded once), and where it was
        # stored meanwhile.
        self._arriving: Sent | None = None
        self._arriving_msg: PublishedMessage | None = None
        self._stored_at: int | None = None

    # ------------------------------------------------------------------ the protocol

    @property
    def fast_path(self) -> FastPath:
        return self._fast

    @property
    def max_payload(self) -> int:
        return self._max_payload

    @property
    def connected(self) -> bool:
        return self._connected and not self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fast_sent(self) -> int:
        return self._fast_sent

    @property
    def public_sent(self) -> int:
        return self._public_sent

    def new_inbox(self) -> str:
        return f"_INBOX.mem{next(self._inbox_ids)}"

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def write(self, subject: str, reply: bytes, data: bytes) -> bool:
        if not self._fast or not self.connected:
            self.congested = False
            return False
        if (
            self.buffer_limit
            and self.buffered_bytes
            and (self.buffered_bytes + len(data) > self.buffer_limit)
        ):
            self.congested = True
            return False
        self._fast_sent += 1
        self._append(Sent(subject, reply.decode(), data, True))
        return True

    async def wait_writable(self) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._room.append(waiter)
        handle = loop.call_later(_POLL, self._wake)
        try:
            await waiter
        finally:
            handle.cancel()

    async def send(self, subject: str, reply: bytes, data: bytes, correlation_id: str = "") -> bool:
        if self._closed:
            raise NotConnectedError("the connection is closed")
        if not self._connected:
            return False
        await asyncio.sleep(0)  # the public API is a coroutine that yields
        self._public_sent += 1
        self._append(Sent(subject, reply.decode(), data, False))
        return True

    async def flush(self) -> None:
        await asyncio.sleep(0)

    async def subscribe(
        self, subject: str, on_data: OnData, on_status: OnStatus, *, pending_limit: int
    ) -> InboxSubscription:
        if not subject.endswith(".*"):
            raise ValueError("the memory transport serves wildcard inboxes ('<prefix>.*') only")
        prefix = subject[:-1]
        self._inboxes[prefix] = (on_data, on_status)
        await asyncio.sleep(0)
        return _MemoryInbox(self, prefix)

    # ------------------------------------------------------------------ failures

    def fail(
        self, failure: Failure | AckError, *, times: int | None = 1, subject: str | None = None
    ) -> None:
        """Make the next ``times`` messages fail with ``failure`` (every one until
        :meth:`clear_failures` when ``times`` is None), on ``subject`` only if given.

        ``failure`` is an :class:`AckError` other than ``OK`` (the message is not
        stored and its ack carries the error: ``INCORRECT_OFFSET`` raises
        :class:`~liftbridge_nats.IncorrectOffsetError`, ``TOO_LARGE``
        :class:`~liftbridge_nats.MaxBytesExceededError`, ``ENCRYPTION``
        :class:`~liftbridge_nats.EncryptionError`, ``UNKNOWN``
        :class:`~liftbridge_nats.PublishRejectedError`), or a :class:`Failure`. Every
        message that arrives counts, re-sends of ``Publisher(retry=True)`` included.
        Rules apply in the order they were made: the first one that matches a message
        takes it.
        """
        if isinstance(failure, AckError):
            if failure is AckError.OK:
                raise InvalidArgumentError(
                    "AckError.OK is no failure: publishes are acked unless told otherwise"
                )
        elif not isinstance(failure, Failure):
            raise TypeError(f"failure must be an AckError or a Failure, got {failure!r}")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int)):
            raise TypeError(f"times must be an int or None, got {times!r}")
        if times is not None and times < 1:
            raise InvalidArgumentError(
                f"times must be >= 1 (or None for every message), got {times}"
            )
        if subject is not None and not isinstance(subject, str):
            raise TypeError(f"subject must be a str or None, got {subject!r}")
        self._rules.append(_Rule(failure, subject, times))

    def clear_failures(self) -> None:
        """Forget every failure :meth:`fail` asked for: messages are acked again."""
        self._rules.clear()

    # ------------------------------------------------------------------ answers

    def store(self, sent: Sent) -> int:
        """Store ``sent`` at the next offset of its subject, with no ack; return it."""
        offset = self._offsets[sent.subject]
        self._offsets[sent.subject] = offset + 1
        if sent is self._arriving:
            self._stored_at = offset
        return offset

    def ack(self, sent: Sent, *, offset: int | None = None, error: int = 0) -> None:
        """Answer ``sent`` as Liftbridge would: stored at ``offset`` (by default the
        next offset of its subject), or refused with ``error`` (an :class:`AckError`
        value; nothing is stored)."""
        msg = self._arriving_msg if sent is self._arriving else None
        if msg is None:
            msg = sent.published
        if error:
            offset = 0
        elif offset is None:
            offset = self.store(sent)
        elif sent is self._arriving:
            self._stored_at = offset
        now = time.time_ns()
        ack = api_pb2.Ack(
            stream=sent.subject,
            partitionSubject=sent.subject,
            msgSubject=sent.subject,
            offset=offset,
            ackInbox=msg.ack_inbox,
            correlationId=msg.correlation_id,
            ackPolicy=api_pb2.AckPolicy.ValueType(int(msg.ack_policy)),
            receptionTimestamp=now,
            commitTimestamp=now,
            ackError=api_pb2.Ack.Error.ValueType(error),
        )
        self.deliver(msg.ack_inbox, encode(MsgType.ACK, ack.SerializeToString()))

    def no_responders(self, sent: Sent) -> None:
        """Tell the publisher that nobody received ``sent`` (NATS status 503), when it
        was sent with a reply subject."""
        for prefix, (_, on_status) in list(self._inboxes.items()):
            if sent.reply.startswith(prefix):
                on_status(sent.reply, "503")

    def deliver(self, subject: str, data: bytes) -> None:
        """Put ``data`` on the inbox that ``subject`` belongs to (dropped if none)."""
        for prefix, (on_data, _) in list(self._inboxes.items()):
            if subject.startswith(prefix):
                on_data(data)

    # ------------------------------------------------------------------ the connection

    def hold(self) -> None:
        """Stop flushing: written messages stay in the buffer (a stalled socket)."""
        self._held = True

    def release(self) -> None:
        """Flush again (now, and from now on)."""
        self._held = False
        self._flush()

    def disconnect(self) -> None:
        """The connection goes down; buffered messages stay for after the reconnect."""
        self._connected = False

    def reconnect(self) -> None:
        """The connection is back; the buffer goes out."""
        self._connected = True
        self._schedule_flush()

    def close(self) -> None:
        """Close the connection for good; buffered messages are lost."""
        self._closed = True
        self.buffer.clear()
        self.buffered_bytes = 0
        self._wake()

    # ------------------------------------------------------------------ internals

    def _append(self, sent: Sent) -> None:
        self.buffer.append(sent)
        self.buffered_bytes += len(sent.data)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._held or not self.connected or not self.buffer:
            return
        out, self.buffer = self.buffer, []
        self.buffered_bytes = 0
        self.flushes += 1
        self._wake()
        for sent in out:
            self.delivered.append(sent)
            self._arrive(sent)

    def _arrive(self, sent: Sent) -> None:
        msg = sent.published
        wants_ack = bool(msg.ack_inbox) and msg.ack_policy is not AckPolicy.NONE
        failure = self._take_failure(sent.subject) if wants_ack else None
        self._arriving, self._arriving_msg, self._stored_at = sent, msg, None
        try:
            if failure is Failure.NO_RESPONDERS:
                self.no_responders(sent)
            elif isinstance(failure, AckError):
                self.ack(sent, error=failure)
            elif failure is Failure.NO_ACK:
                pass
            elif self.responder is not None:
                self.responder(self, sent)
            elif wants_ack:
                self.ack(sent)
            else:
                self.store(sent)
            stored_at = self._stored_at
        finally:
            self._arriving = self._arriving_msg = None
        self.published.append(_record(sent, msg, stored_at, failure))

    def _take_failure(self, subject: str) -> _Failing | None:
        for i, rule in enumerate(self._rules):
            if rule.subject is None or rule.subject == subject:
                if rule.left is not None:
                    rule.left -= 1
                    if not rule.left:
                        del self._rules[i]
                return rule.failure
        return None

    def _wake(self) -> None:
        waiters, self._room = self._room, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def _record(
    sent: Sent, msg: PublishedMessage, offset: int | None, failure: _Failing | None
) -> RecordedMessage:
    message = msg.message
    expected = msg.expected_offset
    return RecordedMessage(
        subject=sent.subject,
        value=message.value,
        key=message.key,
        headers=message.headers,
        correlation_id=msg.correlation_id,
        ack_policy=msg.ack_policy,
        expected_offset=None if expected == NO_OFFSET_CHECK else expected,
        offset=offset,
        failure=failure,
        ack_inbox=msg.ack_inbox,
        reply_subject=sent.reply,
    )
