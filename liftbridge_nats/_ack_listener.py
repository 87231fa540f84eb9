"""An ack inbox on its own, for applications that publish Liftbridge envelopes themselves.

An application that builds envelopes with :func:`liftbridge_nats.wire.encode_publish`
and sends them on its own nats-py connection gets Liftbridge's acks (type-1 envelopes)
on the inbox it names in each message. :class:`AckListener` owns such an inbox and
yields each ack, decoded into the public :class:`~liftbridge_nats.Ack`, to ``async
for``. It unwraps acks as the publisher's own listener does (:func:`._acks.ack_payload`);
that one settles the publisher's in-flight futures instead and stays untouched here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from google.protobuf.message import DecodeError

from ._acks import ack_payload
from ._errors import ClientClosedError, EnvelopeError, InvalidArgumentError
from ._log import RateLimitedLog, get_logger
from ._messages import Ack
from ._proto import api_pb2
from ._transport import InboxSubscription, NatsTransport, PublishTransport
from .wire import ack_from_proto

__all__ = ["DEFAULT_MAX_BUFFERED_ACKS", "AckListener"]

DEFAULT_MAX_BUFFERED_ACKS = 65_536
"""Acks an :class:`AckListener` keeps for its reader by default."""

_parse_ack = api_pb2.Ack.FromString
_log = get_logger("acks")
# At most one warning about dropped messages per this many seconds (per listener).
_DROP_LOG_INTERVAL = 10.0
_NEW, _OPEN, _CLOSED = range(3)


class AckListener:
    """Receives Liftbridge acks on an inbox of its own: ``async for ack in listener``.

    ``nc`` is a connected nats-py client (or a publish transport such as
    :class:`liftbridge_nats.testing.MemoryTransport`). Use it as ``async with
    AckListener(nc) as acks``, put :attr:`inbox` in each message as its ack inbox
    (``wire.encode_publish(..., ack_inbox=acks.inbox)``), and read the acks with
    ``async for ack in acks``: each is a :class:`~liftbridge_nats.Ack`, in order of
    arrival; an ack carrying an error is yielded too (``ack.error``), not raised.

    It keeps up to ``max_buffered`` acks that nobody has read yet; when that many wait,
    later acks are dropped, counted in :attr:`dropped` and logged (at most once every 10
    seconds): read faster or raise ``max_buffered``. Anything on the inbox that is no
    ack (bytes that are no envelope, a protobuf that does not parse) is skipped and
    counted in :attr:`malformed`; envelopes of another type and NATS status messages
    in :attr:`foreign`. After :meth:`close` (or the end of the ``async with``) no more
    acks arrive; iteration yields those already received, then ends.
    """

    def __init__(self, nc: Any, *, max_buffered: int = DEFAULT_MAX_BUFFERED_ACKS) -> None:
        if isinstance(max_buffered, bool) or not isinstance(max_buffered, int):
            raise TypeError(f"max_buffered must be an int, got {type(max_buffered).__name__}")
        if max_buffered < 1:
            raise InvalidArgumentError(f"max_buffered must be >= 1, got {max_buffered}")
        transport = nc if isinstance(nc, PublishTransport) else NatsTransport(nc)
        self._transport: PublishTransport = transport
        self._max_buffered = max_buffered
        self._prefix = transport.new_inbox()
        self._inbox = self._prefix + ".ack"
        self._acks: deque[Ack] = deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._sub: InboxSubscription | None = None
        self._state = _NEW
        self._received = 0
        self._dropped = 0
        self._malformed = 0
        self._foreign = 0
        self._full_log = RateLimitedLog(_log, logging.WARNING, _DROP_LOG_INTERVAL)
        self._junk_log = RateLimitedLog(_log, logging.WARNING, _DROP_LOG_INTERVAL)

    @property
    def inbox(self) -> str:
        """The subject to send as each message's ack inbox."""
        return self._inbox

    @property
    def received(self) -> int:
        """Acks decoded so far (those dropped for a full buffer included)."""
        return self._received

    @property
    def dropped(self) -> int:
        """Acks dropped because ``max_buffered`` acks were waiting to be read."""
        return self._dropped

    @property
    def malformed(self) -> int:
        """Messages on the inbox that were no valid envelope or no valid protobuf Ack."""
        return self._malformed

    @property
    def foreign(self) -> int:
        """Valid envelopes of another type than ACK, and NATS status messages."""
        return self._foreign

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._state == _CLOSED

    async def start(self) -> AckListener:
        """Subscribe to the inbox (``async with`` does it); acks sent before are lost."""
        if self._state == _OPEN:
            return self
        if self._state == _CLOSED:
            raise ClientClosedError("this AckListener was closed; create a new one")
        self._sub = await self._transport.subscribe(
            self._prefix + ".*",
            self._on_data,
            self._on_status,
            pending_limit=self._max_buffered,
        )
        self._state = _OPEN
        return self

    async def close(self) -> None:
        """Unsubscribe (idempotent); iteration ends once the received acks are read."""
        self._state = _CLOSED
        self._wake()
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.close()

    async def __aenter__(self) -> AckListener:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> AckListener:
        return self

    async def __anext__(self) -> Ack:
        while not self._acks:
            if self._state == _CLOSED:
                raise StopAsyncIteration
            if self._state == _NEW:
                raise ClientClosedError(
                    "the AckListener is not started: use `async with AckListener(nc)`"
                )
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
        return self._acks.popleft()

    def _on_data(self, data: bytes) -> None:
        try:
            payload = ack_payload(data)
            if payload is None:
                self._foreign += 1
                self._dropped_junk()
                return
            ack = ack_from_proto(_parse_ack(payload))
        except (EnvelopeError, DecodeError):
            self._malformed += 1
            self._dropped_junk()
            return
        self._received += 1
        if len(self._acks) >= self._max_buffered:
            self._dropped += 1
            self._full_log.log(
                "AckListener on %s: %d acks dropped so far, %d were waiting to be read "
                "(read them faster or raise max_buffered)",
                self._inbox,
                self._dropped,
                self._max_buffered,
            )
            return
        self._acks.append(ack)
        self._wake()

    def _on_status(self, subject: str, status: str) -> None:
        self._foreign += 1
        self._dropped_junk()

    def _dropped_junk(self) -> None:
        # Anyone may publish to the inbox: counts and the subject only, at most one
        # line per interval however fast junk arrives.
        self._junk_log.log(
            "AckListener on %s skipped %d malformed messages and %d of another kind so far",
            self._inbox,
            self._malformed,
            self._foreign,
        )

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
