"""A publish transport in memory, with a small Liftbridge stand-in: for fast tests.

:class:`MemoryTransport` implements :class:`~liftbridge_nats._transport.PublishTransport`
without a socket, as httpx's ``MockTransport`` does for its client. Written messages
sit in an outgoing buffer until the event loop runs (like nats-py's flusher), then
reach :attr:`MemoryTransport.delivered`; a ``responder`` (such as :func:`auto_ack`)
or the test itself answers them with :meth:`MemoryTransport.ack` or
:meth:`MemoryTransport.no_responders`. The test controls everything a real connection
does to a publisher: a full buffer (``buffer_limit`` and :meth:`hold`), a connection
going down and back (:meth:`disconnect`, :meth:`reconnect`), and closing it.

Integration tests against real servers stay the proof; these tests pin down the
publisher's own logic in milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ._errors import NotConnectedError
from ._messages import AckPolicy
from ._proto import api_pb2
from ._transport import FastPath, InboxSubscription, OnData, OnStatus, PublishTransport
from .envelope import MsgType, encode
from .wire import PublishedMessage, decode_publish

__all__ = ["MemoryTransport", "Sent", "auto_ack"]

# Waiters for room are woken at least this often, as on a real connection.
_POLL = 0.01


@dataclass(frozen=True, slots=True)
class Sent:
    """One message as the transport carried it."""

    subject: str
    reply: str
    data: bytes
    fast: bool
    """True when it came through write(), False through send()."""

    @property
    def published(self) -> PublishedMessage:
        """The decoded envelope."""
        return decode_publish(self.data)


Responder = Callable[["MemoryTransport", Sent], None]


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
    """A connection in memory. ``buffer_limit`` (bytes, 0 = none) bounds the outgoing
    buffer; ``fast_path=False`` makes :meth:`write` refuse everything."""

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
        self.buffer: list[Sent] = []
        self.buffered_bytes = 0
        self.delivered: list[Sent] = []
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

    # ------------------------------------------------------------------ what tests do

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

    def ack(self, sent: Sent, *, offset: int | None = None, error: int = 0) -> None:
        """Answer ``sent`` as Liftbridge would (the next offset of its subject by default)."""
        msg = sent.published
        if offset is None:
            offset = self._offsets[sent.subject]
            self._offsets[sent.subject] += 1
        ack = api_pb2.Ack(
            stream=sent.subject,
            partitionSubject=sent.subject,
            msgSubject=sent.subject,
            offset=offset if not error else 0,
            ackInbox=msg.ack_inbox,
            correlationId=msg.correlation_id,
            ackPolicy=api_pb2.AckPolicy.ValueType(int(msg.ack_policy)),
            ackError=api_pb2.Ack.Error.ValueType(error),
        )
        self.deliver(msg.ack_inbox, encode(MsgType.ACK, ack.SerializeToString()))

    def no_responders(self, sent: Sent) -> None:
        """Tell the publisher that nobody received ``sent`` (NATS status 503)."""
        for prefix, (_, on_status) in list(self._inboxes.items()):
            if sent.reply.startswith(prefix):
                on_status(sent.reply, "503")

    def deliver(self, subject: str, data: bytes) -> None:
        """Put ``data`` on the inbox that ``subject`` belongs to (dropped if none)."""
        for prefix, (on_data, _) in list(self._inboxes.items()):
            if subject.startswith(prefix):
                on_data(data)

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
            if self.responder is not None:
                self.responder(self, sent)

    def _wake(self) -> None:
        waiters, self._room = self._room, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def auto_ack(transport: MemoryTransport, sent: Sent) -> None:
    """A responder that acks every message that asks for an ack, in order."""
    msg = sent.published
    if msg.ack_inbox and msg.ack_policy is not AckPolicy.NONE:
        transport.ack(sent)
