"""The one error family of liftbridge-nats.

Every error the SDK raises derives from :class:`LiftbridgeError`. Each class says
whether retrying the same call can help (``retriable``), the way aiokafka's errors do,
and each message says what the caller can do next.
"""

from __future__ import annotations

from typing import ClassVar


class LiftbridgeError(Exception):
    """Base of every error raised by liftbridge-nats."""

    retriable: ClassVar[bool] = False


class InvalidArgumentError(LiftbridgeError, ValueError):
    """A public API argument is wrong; nothing was sent."""


class EnvelopeError(LiftbridgeError, ValueError):
    """Bytes that are not a valid Liftbridge envelope (or its protobuf payload)."""


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


class AckTimeoutError(PublishError, TimeoutError):
    """No ack arrived in time: the message may or may not have been stored."""

    retriable = True


class PublishRejectedError(PublishError):
    """The server acked the message with an error it did not explain (``UNKNOWN``)."""


class IncorrectOffsetError(PublishRejectedError):
    """Optimistic concurrency control refused the message: the expected offset is stale."""


class MessageTooLargeError(PublishRejectedError):
    """The message is larger than the server (or the NATS connection) accepts."""


class EncryptionError(PublishRejectedError):
    """The server could not encrypt the message for an encrypted stream."""


class PublisherClosedError(PublishError):
    """The publisher is closed, or closed before this message was acked."""


class NotConnectedError(LiftbridgeError):
    """The NATS or gRPC connection is down and did not come back in time."""

    retriable = True


# ------------------------------------------------------------------ control plane


class RpcError(LiftbridgeError):
    """A gRPC call to a Liftbridge broker failed; ``code`` is the gRPC status name."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class StreamExistsError(RpcError):
    """A stream with this name already exists."""


class NoSuchStreamError(RpcError):
    """The stream (or partition) does not exist."""


class ReadonlyPartitionError(RpcError):
    """The partition is readonly and takes no new messages."""


class NoLeaderError(RpcError):
    """No metadata or partition leader is known yet; retry after a moment."""

    retriable = True


class BrokerUnavailableError(RpcError, NotConnectedError):
    """No broker answered within the deadline."""

    retriable = True


class ConsumerGroupError(RpcError):
    """A consumer-group call failed (unknown group, stale epoch, wrong coordinator)."""

    retriable = True


class ServerStartError(LiftbridgeError):
    """A local NATS or Liftbridge server (testing harness) could not start."""


# ------------------------------------------------------------------ control plane: details


class NoSuchPartitionError(NoSuchStreamError):
    """The stream exists but has no partition with this id."""


class NotLeaderError(RpcError):
    """The broker asked is not (or no longer) the leader of the partition.

    The client refreshes its metadata and retries by itself; this error only reaches
    the caller when leadership did not settle within the call's deadline.
    """

    retriable = True


class PartitionPausedError(RpcError):
    """The partition was paused while a subscription read it.

    Resume it with ``Client.resume_stream`` or subscribe with ``resume=True``.
    """


class BadRequestError(RpcError, InvalidArgumentError):
    """The server refused the arguments of a call (gRPC ``INVALID_ARGUMENT``)."""


class RpcTimeoutError(RpcError, TimeoutError):
    """A gRPC call did not complete within its deadline; pass a larger ``timeout``."""

    retriable = True


class ClientClosedError(LiftbridgeError):
    """The client (or consumer) is closed; open a new one."""


class NoRespondersError(AckTimeoutError):
    """NATS reported that nobody listens on the subject: the message was NOT stored.

    The early, certain form of an ack timeout: no stream records the subject, the
    partition is paused, or a leader fail-over (or a reconnect to NATS) is in progress.
    Publishing the same message again cannot duplicate it.
    """

    retriable = True


class NoStoredPositionError(ConsumerGroupError):
    """A group member got a partition with no stored position and no start position to
    fall back on (``start_position=None``); set a cursor or a start position."""

    retriable = False


class NotAssignedError(InvalidArgumentError):
    """The partition is not assigned to this consumer-group member (see
    ``Consumer.assignments``): it cannot be sought, paused or asked its position."""


class CursorsDisabledError(LiftbridgeError):
    """The cluster keeps no cursors: start the brokers with ``cursors.stream.partitions`` > 0."""


class RetriedIncorrectOffsetError(IncorrectOffsetError):
    """Optimistic concurrency refused a *re-sent* copy of a message (``retry=True``).

    An earlier copy of the same message was most likely stored at the expected offset
    and its ack was lost: check the partition before publishing it again.
    """

    retried: ClassVar[bool] = True
