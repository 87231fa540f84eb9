"""The ack listener: one NATS inbox per publisher, acks matched by correlation id.

Liftbridge answers a published message (one with an ack inbox and a policy other than
NONE) with a type-1 envelope carrying a protobuf ``Ack`` on that inbox. The listener
decodes it, finds the in-flight message by ``correlationId`` and settles its future:
with a frozen :class:`~liftbridge_nats.Ack`, or with a typed error when the
ack carries one.

The listener subscribes to ``<prefix>.*``: acks come on ``<prefix>.ack`` (the ack inbox
written into every message) and, when the publisher sets NATS reply subjects
``<prefix>.<correlation id>``, the NATS server's "no responders" status (503) comes on
the reply subject of a message that no subscriber received. Liftbridge's partition
leader is the only NATS subscriber of a partition subject, so a 503 means that no
stream recorded the message: nothing was stored, and the publisher can say so at once
(or send it again) instead of waiting for the ack deadline.

Nothing that arrives on the inbox can break the listener: bytes that are no envelope,
envelopes of other types, and acks for correlation ids it does not know (never sent,
already timed out, already acked) are counted in :class:`AckStats` and dropped. When
several streams record the same subject, each of them acks the message: the first ack
settles the future and the later ones are counted as unmatched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from ._errors import (
    EncryptionError,
    EnvelopeError,
    IncorrectOffsetError,
    MaxBytesExceededError,
    NoRespondersError,
    PublishError,
    PublishRejectedError,
    RetriedIncorrectOffsetError,
    for_ack_error,
)
from ._inflight import ATTEMPT, CID, SUBJECT, AckFuture, InflightLedger
from ._log import RateLimitedLog, get_logger
from ._proto import api_pb2
from ._transport import InboxSubscription, NatsTransport, PublishTransport
from .envelope import MsgType, decode, header
from .wire import ack_view

__all__ = [
    "CALLER_ID_MARK",
    "AckStats",
    "InflightAckListener",
    "ack_error_exception",
    "ack_payload",
    "no_responders_exception",
]

# The server sends acks without a CRC, so nearly every ack starts with these 8 bytes.
_PLAIN_ACK_HEADER = header(MsgType.ACK)
_HEADER_LEN = len(_PLAIN_ACK_HEADER)
_parse_ack = api_pb2.Ack.FromString

_log = get_logger("acks")
# At most one line about junk on an ack inbox per this many seconds (per publisher).
_JUNK_LOG_INTERVAL = 10.0


# What the caller can do, for each class an ack error maps to (errors.for_ack_error).
_ACK_ERROR_ADVICE: dict[type[PublishRejectedError], str] = {
    IncorrectOffsetError: "its expected offset is not the next offset of the partition "
    "(optimistic concurrency control). Fetch the partition's newest offset and publish "
    "again with expected_offset set to it + 1.",
    MaxBytesExceededError: "it is larger than the server's clustering.replication.max.bytes. "
    "Send a smaller message or raise that limit.",
    EncryptionError: "the server could not encrypt it. Check the server's encryption "
    "configuration (its key) and the server logs.",
}


def ack_error_exception(
    error: int, *, stream: str, subject: str, correlation_id: str, retried: bool = False
) -> PublishError:
    """The typed exception for an ack that carries ``error`` (an ``AckError`` value):
    the class :func:`~liftbridge_nats.for_ack_error` names, with what to do next.

    ``retried``: the message was sent more than once (Publisher(retry=True)); an
    incorrect offset then most likely means an earlier copy was stored.
    """
    where = f"stream {stream!r}" if stream else f"subject {subject!r}"
    cls = for_ack_error(error)
    if cls is IncorrectOffsetError and retried:
        return RetriedIncorrectOffsetError(
            f"{where} refused a re-sent copy of the message: its expected offset is taken, "
            "most likely by an earlier copy whose ack was lost. Read the partition before "
            "publishing it again.",
            subject=subject,
            correlation_id=correlation_id,
        )
    advice = _ACK_ERROR_ADVICE.get(cls)
    message = (
        f"{where} refused the message: {advice}"
        if advice is not None
        else f"{where} rejected the message without a reason (ack error {error}). "
        "The server logs may tell more; the message was not stored."
    )
    return cls(message, subject=subject, correlation_id=correlation_id)


def no_responders_exception(subject: str, correlation_id: str) -> NoRespondersError:
    """The error for a message that no NATS subscriber received."""
    return NoRespondersError(
        f"no Liftbridge server listens on subject {subject!r}, so the message was not "
        "stored: no stream records this subject, its partition is paused, or a leader "
        "fail-over or NATS reconnect is in progress. Create the stream, resume the "
        "partition (publish_to_stream does it for you), or publish again shortly "
        "(Publisher(retry=True) does it for you).",
        subject=subject,
        correlation_id=correlation_id,
    )


_NO_RESPONDERS = "503"
# Starts the last token of the reply subject of a message whose correlation id the
# caller chose; the publisher's own ids put only their counter there (digits).
CALLER_ID_MARK = "_"


def ack_payload(data: bytes) -> bytes | None:
    """The protobuf ``Ack`` carried by the envelope ``data`` (unparsed); None for a
    valid envelope of another type. Raises :class:`EnvelopeError` for anything that is
    no envelope.

    The one unwrapping of acks: :meth:`InflightAckListener.handle` repeats only its first test
    (a CRC-less ack, the server's kind), inline, for the publisher's hot path.
    """
    if data.startswith(_PLAIN_ACK_HEADER):
        return data[_HEADER_LEN:]
    env = decode(data)
    if env.msg_type is not MsgType.ACK:
        return None
    return bytes(env.payload)


@dataclass(frozen=True, slots=True)
class AckStats:
    """What arrived on a publisher's ack inbox."""

    acks_matched: int = 0
    """Acks that settled an in-flight message (successful or carrying an error)."""
    acks_rejected: int = 0
    """Of the matched acks, those carrying an error."""
    acks_unmatched: int = 0
    """Acks for unknown correlation ids: timed out, cancelled, already acked by another
    stream on the same subject, or never sent by this publisher."""
    malformed: int = 0
    """Messages on the inbox that are no valid envelope or no valid protobuf Ack."""
    foreign: int = 0
    """Valid envelopes of another type than ACK, and NATS status messages other than 503."""
    no_responders: int = 0
    """Messages of this publisher that NATS reported nobody received (503)."""


class InflightAckListener:
    """Subscribes to one inbox and settles the ledger's flights as acks arrive.

    Use as ``async with InflightAckListener(transport, ledger) as listener`` (the
    :class:`Publisher` does this for you); ``transport`` is a
    :class:`~liftbridge_nats._transport.PublishTransport` or a connected nats-py client.
    :attr:`inbox` is the ack inbox to put in published messages, and a message's NATS
    reply subject, which makes NATS report a message nobody received, is
    :attr:`reply_prefix` + the counter of its correlation id when the id is
    ``cid_prefix`` + that counter (the publisher's own ids), or :attr:`reply_prefix` +
    :data:`CALLER_ID_MARK` + the id (a caller's). Liftbridge stores the reply subject
    with the message, so it repeats no more of the id than it must.
    ``on_no_responders(future)`` receives such a message's future (already out of the
    ledger, not done); without it the future fails with :class:`NoRespondersError`.

    On the fast path acks go from nats-py's parser straight to :meth:`handle`, without
    the subscription's message objects, queue and task (:attr:`direct`); status
    messages still come through the subscription.
    """

    def __init__(
        self,
        transport: Any,
        ledger: InflightLedger,
        *,
        inbox_prefix: str | None = None,
        cid_prefix: str = "",
        on_no_responders: Callable[[AckFuture], None] | None = None,
    ) -> None:
        if not isinstance(transport, PublishTransport):
            transport = NatsTransport(transport)
        self._transport: PublishTransport = transport
        self._ledger = ledger
        self._prefix: str = inbox_prefix or transport.new_inbox()
        self._reply_prefix = self._prefix + "."
        self._inbox = self._reply_prefix + "ack"
        self._cid_prefix = cid_prefix
        self._on_no_responders = on_no_responders or _fail_no_responders
        self._sub: InboxSubscription | None = None
        self._matched = 0
        self._rejected = 0
        self._unmatched = 0
        self._malformed = 0
        self._foreign = 0
        self._no_responders = 0
        self._junk_log = RateLimitedLog(_log, logging.WARNING, _JUNK_LOG_INTERVAL)

    @property
    def inbox(self) -> str:
        """The NATS subject the server sends acks to."""
        return self._inbox

    @property
    def reply_prefix(self) -> str:
        """``reply_prefix + correlation_id`` is a message's NATS reply subject."""
        return self._reply_prefix

    @property
    def direct(self) -> bool:
        """True while acks bypass the subscription's queue (the fast path)."""
        return self._sub is not None and self._sub.direct

    @property
    def stats(self) -> AckStats:
        """A snapshot of the counters."""
        return AckStats(
            self._matched,
            self._rejected,
            self._unmatched,
            self._malformed,
            self._foreign,
            self._no_responders,
        )

    async def start(self) -> None:
        """Subscribe to the inbox (idempotent)."""
        if self._sub is not None:
            return
        # The subscription's queue only ever holds acks for flights in the ledger (plus
        # strays), so bound it by the ledger's capacity, with room for duplicates.
        limit = max(4 * self._ledger.capacity, 65_536)
        self._sub = await self._transport.subscribe(
            self._prefix + ".*", self.handle, self.handle_status, pending_limit=limit
        )

    async def stop(self) -> None:
        """Unsubscribe (idempotent)."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.close()

    async def __aenter__(self) -> InflightAckListener:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def handle_status(self, subject: str, status: str) -> None:
        """Process a NATS status message that arrived on ``subject``."""
        if status != _NO_RESPONDERS or not subject.startswith(self._reply_prefix):
            self._foreign += 1
            self._dropped()
            return
        token = subject[len(self._reply_prefix) :]
        if token.startswith(CALLER_ID_MARK):
            future = self._ledger.settle(token[len(CALLER_ID_MARK) :])
        else:
            future = self._ledger.settle(self._cid_prefix + token)
        if future is None:
            self._unmatched += 1
            return
        self._no_responders += 1
        if not future.done():
            self._on_no_responders(future)

    def handle(self, data: bytes) -> None:
        """Process the bytes of one message that arrived on the inbox.

        This runs once per acked message, straight from nats-py's parser (see
        ``direct``), so the common case (a CRC-less ack that settles a flight) is
        written out in one function.
        """
        if data.startswith(_PLAIN_ACK_HEADER):
            # A bytes slice: upb parses bytes faster than a memoryview of them, and the
            # Ack keeps it to fill its fields from when they are read.
            payload = data[_HEADER_LEN:]
        else:
            unwrapped = self._unwrap(data)
            if unwrapped is None:
                return
            payload = unwrapped
        try:
            # A fresh protobuf per ack (upb parses into a new message faster than into
            # a reused one), dropped once the future is settled.
            pb = _parse_ack(payload)
        except DecodeError:
            self._malformed += 1
            self._dropped()
            return
        future = self._ledger.settle(pb.correlationId)
        if future is None:
            self._unmatched += 1
            return
        if future.done():  # cancelled by its caller meanwhile
            self._unmatched += 1
        elif pb.ackError:
            self._settle_error(future, pb)
        else:
            self._matched += 1
            # Acked: the message's bytes are no longer needed, while its future may be
            # kept for long (gathered with thousands of others, say).
            del future.flight
            future.set_result(ack_view(payload))

    def _unwrap(self, data: bytes) -> bytes | None:
        """The Ack payload of an envelope with a CRC or an unusual header; None (and
        counted) for anything else."""
        try:
            payload = ack_payload(data)
        except EnvelopeError:
            self._malformed += 1
            self._dropped()
            return None
        if payload is None:
            self._foreign += 1
            self._dropped()
        return payload

    def _dropped(self) -> None:
        # Anyone may publish to the inbox: counts and the subject only, at most one
        # line per interval however fast junk arrives.
        self._junk_log.log(
            "dropped messages on the ack inbox %s: %d malformed and %d of another kind "
            "so far (not acks of this publisher)",
            self._inbox,
            self._malformed,
            self._foreign,
        )

    def _settle_error(self, future: AckFuture, pb: api_pb2.Ack) -> None:
        flight = future.flight
        self._matched += 1
        self._rejected += 1
        future.set_exception(
            ack_error_exception(
                pb.ackError,
                stream=pb.stream,
                subject=flight[SUBJECT],
                correlation_id=pb.correlationId,
                retried=flight[ATTEMPT] > 0,
            )
        )


def _fail_no_responders(future: AckFuture) -> None:
    flight = future.flight
    future.set_exception(no_responders_exception(flight[SUBJECT], flight[CID]))
