"""The one error family of liftbridge-nats.

Every error the SDK raises derives from :class:`LiftbridgeError`, and every class says,
in three flags read the way aiokafka's errors are read:

``maybe_stored``
    The call may have taken effect although it failed: the message may have been
    stored, the stream created, the cursor written. Sending it again blindly may store
    it twice; with ``expected_offset`` (optimistic concurrency) a re-send is safe.
``retriable``
    The same call, made again after a pause, can succeed with no change on your side.
``invalid_metadata``
    The client's cached cluster metadata (leaders, brokers, streams) is probably stale;
    refresh it before trying again. The client's own retries do.

Code that decides what to do next reads the flags, not the class tree. The flags are
class attributes; the table of the errors guide (docs/errors.md) lists them for
every class.

Errors also say who raised them, as h11 splits its protocol errors: a
:class:`LocalError` was raised by the SDK itself (an argument refused before sending, a
message too large for NATS, a deadline passed on this side, a connection that is down),
a :class:`RemoteError` is what a server sent (a gRPC status or an ack error from a
Liftbridge broker, NATS's "no responders"). :func:`for_grpc_status` and
:func:`for_ack_error` give the class for a server's code.

Each message says what the caller can do next.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ._messages import Message

__all__ = [
    "ACK_ERRORS",
    "GRPC_STATUS_ERRORS",
    "AckLostError",
    "AckTimeoutError",
    "BadRequestError",
    "BrokerUnavailableError",
    "ClientClosedError",
    "ConsumerGroupError",
    "CursorsDisabledError",
    "DeserializationError",
    "EncryptionError",
    "EnvelopeError",
    "IncorrectOffsetError",
    "InvalidArgumentError",
    "LiftbridgeError",
    "LocalError",
    "MaxBytesExceededError",
    "MaxPayloadExceededError",
    "MessageTooLargeError",
    "NoLeaderError",
    "NoRespondersError",
    "NoStoredPositionError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotAssignedError",
    "NotConnectedError",
    "NotLeaderError",
    "PartitionPausedError",
    "PublishError",
    "PublishRejectedError",
    "PublisherClosedError",
    "ReadonlyPartitionError",
    "RemoteError",
    "RetriedIncorrectOffsetError",
    "RpcError",
    "RpcTimeoutError",
    "SerializationError",
    "ServerError",
    "ServerStartError",
    "StreamExistsError",
    "UnsentTimeoutError",
    "for_ack_error",
    "for_grpc_status",
]


class LiftbridgeError(Exception):
    """Base of every error raised by liftbridge-nats; its three flags say what to do next."""

    maybe_stored: ClassVar[bool] = False
    """The call may have taken effect although it failed (the message stored, the stream
    created): a blind re-send may store it twice; a publish with ``expected_offset``
    cannot."""
    retriable: ClassVar[bool] = False
    """The same call, made again after a pause, can succeed with no change on the
    caller's side."""
    invalid_metadata: ClassVar[bool] = False
    """The cached cluster metadata (leaders, brokers, streams) is probably stale: refresh
    it before trying again (the client's own retries do)."""


# ------------------------------------------------------------------ who raised it


class LocalError(LiftbridgeError):
    """Raised by the SDK itself; no server sent this error.

    An argument refused before sending, a message larger than NATS accepts, a closed
    client, a deadline that passed on this side, a connection that is down.
    """


class RemoteError(LiftbridgeError):
    """A server sent this error: a Liftbridge broker (a gRPC status, an ack error, its
    metadata) or the NATS server (nobody listens on the subject)."""


# ------------------------------------------------------------------ general


class InvalidArgumentError(LocalError, ValueError):
    """A public API argument is wrong; nothing was sent."""


class EnvelopeError(LocalError, ValueError):
    """Bytes that are not a valid Liftbridge envelope (or its protobuf payload)."""


class ClientClosedError(LocalError):
    """The client (or consumer) is closed; open a new one."""


class NotConnectedError(LocalError):
    """The NATS or gRPC connection is down and did not come back in time; nothing was sent."""

    retriable = True


class ServerStartError(LocalError):
    """A local NATS or Liftbridge server (testing harness) could not start."""


# ------------------------------------------------------------------ publishing


class PublishError(LiftbridgeError):
    """A publish did not end with a successful ack.

    ``subject`` and ``correlation_id`` identify the message, when known.
    """

    def __init__(
        self, message: str, *, subject: str | None = None, correlation_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.correlation_id = correlation_id


class AckTimeoutError(PublishError, LocalError, TimeoutError):
    """No ack arrived in time: the message may or may not have been stored."""

    maybe_stored = True
    retriable = True


class UnsentTimeoutError(AckTimeoutError):
    """The publish's deadline passed before its message could be sent (it waited for room
    under ``max_inflight``, or for its turn on a stream): it was certainly not stored, and
    publishing it again is safe. Caught as :class:`AckTimeoutError` too."""

    maybe_stored = False


class AckLostError(PublishError, LocalError):
    """The message was sent but its ack can no longer arrive: the publisher closed, or
    the stream carrying the acks broke, first. It may or may not have been stored."""

    maybe_stored = True
    retriable = True


class NoRespondersError(PublishError, RemoteError):
    """NATS reported that nobody listens on the subject: the message was NOT stored.

    No stream records the subject, the partition is paused, or a leader fail-over (or a
    reconnect to NATS) is in progress. Publishing the same message again cannot
    duplicate it; refresh the stream's metadata (or resume the partition) first.

    Not a :class:`TimeoutError`, so ``except asyncio.TimeoutError`` does not catch it,
    on purpose: it is an answer that came at once and says "not stored", where a
    timeout says "no answer, maybe stored". Handled as a timeout it would be waited on
    in vain or treated as possibly stored, and inside an ``asyncio.timeout()`` block it
    would pass for that block's own deadline. nats-py keeps its no-responders error
    apart from its timeouts too. Catch both with ``except PublishError`` and read the
    flags.
    """

    retriable = True
    invalid_metadata = True


class PublishRejectedError(PublishError, RemoteError):
    """The server acked the message with an error it did not explain (``UNKNOWN``)."""


class IncorrectOffsetError(PublishRejectedError):
    """Optimistic concurrency control refused the message: the expected offset is stale."""


class RetriedIncorrectOffsetError(IncorrectOffsetError):
    """Optimistic concurrency refused a *re-sent* copy of a message (``retry=True``).

    An earlier copy of the same message was most likely stored at the expected offset
    and its ack was lost: check the partition before publishing it again.
    """

    maybe_stored = True
    retried: ClassVar[bool] = True


class EncryptionError(PublishRejectedError):
    """The server could not encrypt the message for an encrypted stream."""


class MessageTooLargeError(PublishError):
    """The message is too large; nothing was stored. Catch this for both cases below:
    :class:`MaxPayloadExceededError` (NATS's limit, found before sending) and
    :class:`MaxBytesExceededError` (the server's limit, in its ack)."""


class MaxPayloadExceededError(MessageTooLargeError, LocalError):
    """The message with its envelope is larger than the NATS connection's
    ``max_payload``; found before sending, nothing was sent."""


class MaxBytesExceededError(MessageTooLargeError, PublishRejectedError):
    """The server refused the message as larger than its
    ``clustering.replication.max.bytes`` (ack error ``TOO_LARGE``)."""


class PublisherClosedError(PublishError, LocalError):
    """The publisher is not started or already closed; the message was not sent."""


# ------------------------------------------------------------------ control plane


class RpcError(LiftbridgeError):
    """A gRPC call to a Liftbridge broker failed; ``code`` is the gRPC status name."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class ServerError(RpcError, RemoteError):
    """A broker answered with a gRPC status that has no finer class here (``INTERNAL``,
    ``UNKNOWN``, ``PERMISSION_DENIED``...); the message carries the server's words."""


class StreamExistsError(RpcError, RemoteError):
    """A stream with this name already exists."""


class NoSuchStreamError(RpcError, RemoteError):
    """The stream (or partition) does not exist.

    The client retries a few times after refreshing its metadata (a stream created a
    moment ago may not be known to every broker yet) before raising this.
    """

    invalid_metadata = True


class NoSuchPartitionError(NoSuchStreamError):
    """The stream exists but has no partition with this id."""


class ReadonlyPartitionError(RpcError, RemoteError):
    """The partition is readonly and takes no new messages."""


class PartitionPausedError(RpcError, RemoteError):
    """The partition was paused while a subscription read it.

    Resume it with ``Client.resume_stream`` or subscribe with ``resume=True``.
    """


class NoLeaderError(RpcError, RemoteError):
    """No metadata or partition leader is known yet; retry after a moment."""

    retriable = True
    invalid_metadata = True


class NotLeaderError(RpcError, RemoteError):
    """The broker asked is not (or no longer) the leader of the partition.

    The client refreshes its metadata and retries by itself; this error only reaches
    the caller when leadership did not settle within the call's deadline.
    """

    retriable = True
    invalid_metadata = True


class BadRequestError(RpcError, RemoteError, ValueError):
    """The server refused the arguments of a call (gRPC ``INVALID_ARGUMENT``).

    Arguments the SDK refuses itself, before sending, raise :class:`InvalidArgumentError`;
    both are ``ValueError``.
    """


class BrokerUnavailableError(RpcError, NotConnectedError):
    """No broker answered within the deadline (gRPC ``UNAVAILABLE``).

    The call did not reach a broker, save for the rare connection that breaks while
    the call is under way; the client retries it on another broker, as the Go client
    does.
    """

    retriable = True
    invalid_metadata = True


class RpcTimeoutError(RpcError, LocalError, TimeoutError):
    """A gRPC call did not complete within its deadline; pass a larger ``timeout``.

    A write may have been applied meanwhile (``maybe_stored``); the client retries
    only reads after a timeout, and only while the call's deadline leaves time.
    """

    maybe_stored = True
    retriable = True


class ConsumerGroupError(RpcError, RemoteError):
    """A consumer-group call failed (unknown group, stale epoch, wrong coordinator)."""

    retriable = True
    invalid_metadata = True


class NoStoredPositionError(LocalError):
    """A group member got a partition with no stored position and no start position to
    fall back on (``start_position=None``); set a cursor or a start position."""


class NotAssignedError(InvalidArgumentError):
    """The partition is not assigned to this consumer-group member (see
    ``Consumer.assignments``): it cannot be sought, paused or asked its position."""


class CursorsDisabledError(RemoteError):
    """The cluster keeps no cursors: start the brokers with ``cursors.stream.partitions`` > 0."""


# ------------------------------------------------------------------ serializers


class SerializationError(InvalidArgumentError):
    """A value or key could not be turned into bytes by its serializer; nothing was sent.

    ``what`` is ``"value"`` or ``"key"``; ``subject`` names where the message was going,
    when known. The serializer's own exception is the ``__cause__``.
    """

    def __init__(self, message: str, *, what: str = "value", subject: str | None = None) -> None:
        super().__init__(message)
        self.what = what
        self.subject = subject


class DeserializationError(LocalError, ValueError):
    """A stored value or key could not be decoded by its deserializer.

    Names the message (``stream``, ``partition``, ``offset``) and keeps it undecoded in
    ``raw_message`` (a :class:`~liftbridge_nats.Message` with the stored bytes), so
    the caller can log, park or skip it. The reader that raised it has already moved
    past that message: iterating again continues with the next one. The deserializer's
    own exception is the ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        stream: str,
        partition: int,
        offset: int,
        what: str = "value",
        raw_message: Message | None = None,
    ) -> None:
        super().__init__(message)
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.what = what
        self.raw_message = raw_message


# ------------------------------------------------------------------ codes to classes

GRPC_STATUS_ERRORS: Mapping[str, type[RpcError]] = MappingProxyType(
    {
        "ALREADY_EXISTS": StreamExistsError,
        "NOT_FOUND": NoSuchStreamError,
        "INVALID_ARGUMENT": BadRequestError,
        "UNAVAILABLE": BrokerUnavailableError,
        "DEADLINE_EXCEEDED": RpcTimeoutError,
    }
)
"""The class for each gRPC status name a broker's answer can carry; any other status is
a :class:`ServerError`. The client refines some by the server's words (a
``FAILED_PRECONDITION`` that says "not leader" is a :class:`NotLeaderError`)."""

ACK_ERRORS: Mapping[int, type[PublishRejectedError]] = MappingProxyType(
    {
        1: PublishRejectedError,  # AckError.UNKNOWN
        2: IncorrectOffsetError,  # AckError.INCORRECT_OFFSET
        3: MaxBytesExceededError,  # AckError.TOO_LARGE
        4: EncryptionError,  # AckError.ENCRYPTION
    }
)
"""The class for each error an ack can carry (:class:`~liftbridge_nats.AckError`
values); an unknown value is a :class:`PublishRejectedError`."""


def for_grpc_status(code: str | None) -> type[RpcError]:
    """The error class for a gRPC status name such as ``"NOT_FOUND"``."""
    return GRPC_STATUS_ERRORS.get(code or "", ServerError)


def for_ack_error(code: int) -> type[PublishRejectedError]:
    """The error class for a non-OK ``AckError`` value."""
    return ACK_ERRORS.get(int(code), PublishRejectedError)
