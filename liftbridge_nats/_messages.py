"""Typed, frozen records of the public API: acks, stored messages, policies, positions.

Protobuf stays inside the package; these are what callers see.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Generic

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # TypeVar defaults (PEP 696) arrived in 3.13
    from typing_extensions import TypeVar

from ._trace_context import extract_context

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "Ack",
    "AckError",
    "AckPolicy",
    "Message",
    "StartPosition",
    "StopPosition",
    "ns_to_datetime",
]


V = TypeVar("V", default=bytes)
"""The type of a message's value: ``bytes`` as stored, or what a deserializer made of it."""
K = TypeVar("K", default=bytes)
"""The type of a message's key: ``bytes`` as stored, or what a deserializer made of it."""


def ns_to_datetime(ns: int) -> datetime:
    """Convert Liftbridge's nanoseconds since the Unix epoch to an aware UTC datetime."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


class AckPolicy(IntEnum):
    """When the server acks a published message."""

    LEADER = 0
    """After the partition leader has written it to its log."""
    ALL = 1
    """After every replica in the in-sync replica set has it."""
    NONE = 2
    """Never: fire and forget."""


class AckError(IntEnum):
    """The error an ack carries; ``OK`` for a stored message."""

    OK = 0
    UNKNOWN = 1
    INCORRECT_OFFSET = 2
    TOO_LARGE = 3
    ENCRYPTION = 4


class StartPosition(Enum):
    """Where a subscription starts reading."""

    NEW_ONLY = 0
    """Only messages published after the subscription starts."""
    OFFSET = 1
    """At ``start_offset`` (or the oldest offset still retained, if later)."""
    EARLIEST = 2
    """At the oldest message retained."""
    LATEST = 3
    """At the newest message stored."""
    TIMESTAMP = 4
    """At the first message received at or after ``start_time``."""


class StopPosition(Enum):
    """Where a subscription stops reading."""

    ON_CANCEL = 0
    """Never by itself: it follows new messages until cancelled."""
    OFFSET = 1
    """After the message at ``stop_offset``."""
    LATEST = 2
    """After the newest message stored when the subscription started."""
    TIMESTAMP = 3
    """After the last message received at or before ``stop_time``."""


@dataclass(frozen=True, slots=True)
class Ack:
    """The server's acknowledgement of a published message.

    Timestamps are nanoseconds since the Unix epoch; ``reception_time`` and
    ``commit_time`` give them as datetimes.
    """

    stream: str
    """The stream that stored the message."""
    partition: int
    """The partition of ``stream`` that stored the message (read from the subjects)."""
    partition_subject: str
    """What the server sends as the partition's subject: Liftbridge v1.9.0 sends the
    stream's subject here for every partition."""
    message_subject: str
    """The NATS subject the message was published on."""
    offset: int
    """The message's offset in its partition (0 when the ack carries an error)."""
    ack_inbox: str
    correlation_id: str
    ack_policy: AckPolicy
    reception_timestamp: int
    commit_timestamp: int
    error: AckError = AckError.OK

    @property
    def reception_time(self) -> datetime:
        """When the leader received the message."""
        return ns_to_datetime(self.reception_timestamp)

    @property
    def commit_time(self) -> datetime:
        """When the message was committed under the ack policy."""
        return ns_to_datetime(self.commit_timestamp)


@dataclass(frozen=True, slots=True)
class Message(Generic[V, K]):
    """A message read from a stream partition.

    ``key`` is None when the message has none (an empty key reads back as None too:
    the wire does not tell them apart). ``headers`` must be treated as read-only.
    ``value`` and ``key`` are the stored bytes, unless a deserializer was given: then
    they are what it returned (``Message[Order]``; plain ``Message`` means bytes).
    """

    stream: str
    partition: int
    offset: int
    value: V
    key: K | None = None
    timestamp: int = 0
    subject: str = ""
    reply_subject: str = ""
    headers: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def time(self) -> datetime:
        """When the server received the message."""
        return ns_to_datetime(self.timestamp)

    @property
    def trace_context(self) -> Context | None:
        """The OpenTelemetry context its publisher sent along (W3C ``traceparent``,
        ``tracestate`` and baggage in the headers), or None when it carries none or
        ``opentelemetry-api`` is not installed. Pass it as a link or parent of a span;
        :func:`liftbridge_nats.tracing.consumer_span` does both for you."""
        return extract_context(self.headers)
