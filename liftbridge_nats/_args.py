"""Argument checks and conversions for the client's requests.

Everything a caller passes is checked here before it goes on the wire, so that a bad
argument fails at once with :class:`InvalidArgumentError` (or ``TypeError``) instead of
as a server answer, and durations are converted to the milliseconds the server's stream
options expect (Liftbridge's ``server/config.go``, ``StreamsConfig.ApplyOverrides``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ._errors import InvalidArgumentError
from ._messages import AckPolicy
from ._names import check_group, check_new_stream, check_stream_name
from ._proto import api_pb2

__all__ = [
    "Duration",
    "as_bool",
    "as_int32",
    "as_int64",
    "as_millis",
    "checked_callable",
    "checked_int",
    "checked_name",
    "checked_partition",
    "checked_partitions",
    "checked_seconds",
    "checked_subject",
    "create_stream_request",
    "message_fields",
    "publish_request",
]

Duration = timedelta | float | int
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The server turns stream-option milliseconds into Go time.Duration nanoseconds (an
# int64): a larger value wraps around to a negative duration, and a negative cleaner
# interval makes the broker panic (time.NewTicker).
_GO_DURATION_MAX_MS = INT64_MAX // 1_000_000


def as_millis(value: Duration | None, name: str) -> api_pb2.NullableInt64 | None:
    """Stream options take durations in milliseconds (Liftbridge's ApplyOverrides)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise TypeError(f"{name} must be a timedelta or seconds, got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:  # also refuses NaN
        raise InvalidArgumentError(f"{name} must be a duration >= 0, got {value!r}")
    millis = round(seconds * 1000) if seconds < INT64_MAX else _GO_DURATION_MAX_MS + 1
    if millis > _GO_DURATION_MAX_MS:
        raise InvalidArgumentError(
            f"{name} must be at most {_GO_DURATION_MAX_MS // 1000:,} s (about 292 years: the "
            f"server keeps durations as int64 nanoseconds), got {value!r}"
        )
    return api_pb2.NullableInt64(value=millis)


def checked_int(value: object, what: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    """An int within ``[low, high]`` (the proto field's range); bools are not ints here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{what} must be between {low} and {high}, got {value}")
    return value


def as_int64(value: int | None, name: str) -> api_pb2.NullableInt64 | None:
    """A non-negative count (bytes, messages) as the proto's nullable int64."""
    if value is None:
        return None
    return api_pb2.NullableInt64(value=checked_int(value, name))


def as_int32(value: int | None, name: str) -> api_pb2.NullableInt32 | None:
    """A non-negative count as the proto's nullable int32."""
    if value is None:
        return None
    return api_pb2.NullableInt32(value=checked_int(value, name, high=INT32_MAX))


def as_bool(value: bool | None) -> api_pb2.NullableBool | None:
    """An optional flag as the proto's nullable bool (None: server default)."""
    return None if value is None else api_pb2.NullableBool(value=value)


def checked_seconds(value: object, what: str, *, zero: bool = False) -> float:
    """A finite number of seconds > 0 (>= 0 with ``zero``); ``TypeError`` for a non-number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        bound = ">= 0" if zero else "> 0"
        raise InvalidArgumentError(
            f"{what} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


def checked_name(value: object, what: str) -> str:
    """Check a stream name, subject or id before it goes on the wire."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value or value != value.strip():
        raise InvalidArgumentError(f"{what} must be non-empty, without surrounding spaces")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"{what} {value!r} is not valid Unicode (it contains a lone surrogate); names "
                "go to the server as UTF-8"
            ) from None
    return value


def checked_subject(value: object) -> str:
    """A NATS subject as the server accepts it: dot-separated non-empty tokens, no
    whitespace; wildcards (``*`` tokens, a final ``>``) are allowed, streams may use them."""
    subject = checked_name(value, "subject")
    tokens = subject.split(".")
    if any(not t for t in tokens) or any(c.isspace() for c in subject):
        raise InvalidArgumentError(
            f"subject {subject!r} is not a valid NATS subject: tokens separated by single "
            "dots, no whitespace"
        )
    if ">" in tokens[:-1]:
        raise InvalidArgumentError(f"subject {subject!r}: '>' may only be the last token")
    return subject


def checked_partitions(partitions: Sequence[int] | None) -> list[int]:
    """Partition ids as a list (None: none given, which means every partition)."""
    ids = list(partitions or ())
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in ids):
        raise InvalidArgumentError(f"partitions must be ints >= 0, got {ids!r}")
    return ids


def checked_partition(partition: int) -> int:
    """A partition id, checked to be an int in [0, 2**31)."""
    return checked_int(partition, "partition", high=INT32_MAX)


def message_fields(
    value: object,
    key: object,
    headers: Mapping[str, bytes] | None,
    ack_policy: object,
    correlation_id: str | None,
) -> dict[str, Any]:
    """The fields every gRPC publish request shares, checked."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"value must be bytes, got {type(value).__name__}")
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
    if not isinstance(ack_policy, AckPolicy):
        raise InvalidArgumentError(f"ack_policy must be an AckPolicy, got {ack_policy!r}")
    header_map = dict(headers or {})
    for name, data in header_map.items():
        if not isinstance(name, str) or not isinstance(data, bytes):
            raise TypeError("headers must map str names to bytes values")
    if correlation_id is not None:
        checked_name(correlation_id, "correlation_id")
    return {
        "key": bytes(key or b""),
        "value": bytes(value),
        "headers": header_map,
        "correlationId": correlation_id or uuid.uuid4().hex,
        "ackPolicy": int(ack_policy),
    }


def publish_request(
    stream: object,
    value: object,
    key: object,
    partition: int,
    headers: Mapping[str, bytes] | None,
    ack_policy: object,
    correlation_id: str | None,
    expected_offset: int | None,
) -> api_pb2.PublishRequest:
    """A checked PublishRequest; ``expected_offset`` None sends -1 ("no check")."""
    fields = message_fields(value, key, headers, ack_policy, correlation_id)
    return api_pb2.PublishRequest(
        stream=checked_name(stream, "stream name"),
        partition=checked_partition(partition),
        expectedOffset=-1
        if expected_offset is None
        else checked_int(expected_offset, "expected_offset", low=-1),
        **fields,
    )


def create_stream_request(
    subject: object,
    name: object,
    *,
    max_partitions: int,
    group: object = None,
    replication_factor: object = 1,
    partitions: object = 1,
    retention_max_bytes: int | None = None,
    retention_max_messages: int | None = None,
    retention_max_age: Duration | None = None,
    cleaner_interval: Duration | None = None,
    segment_max_bytes: int | None = None,
    segment_max_age: Duration | None = None,
    compact_enabled: bool | None = None,
    compact_max_goroutines: int | None = None,
    auto_pause_time: Duration | None = None,
    auto_pause_disable_if_subscribers: bool | None = None,
    min_isr: int | None = None,
    optimistic_concurrency_control: bool | None = None,
    encryption: bool | None = None,
) -> api_pb2.CreateStreamRequest:
    """A checked CreateStreamRequest (``Client.create_stream``'s arguments): every name,
    count and duration the server could not store raises before anything is sent."""
    stream = check_stream_name(name)
    checked_subject(subject)
    count = checked_int(partitions, "partitions", low=1, high=INT32_MAX)
    # -1 is REPLICATION_MAX: a replica on every broker.
    replicas = checked_int(replication_factor, "replication_factor", low=-1, high=INT32_MAX)
    if replicas == 0:
        raise InvalidArgumentError("replication_factor must be >= 1, or -1 for every broker")
    assert isinstance(subject, str)
    group_name = None if group is None else check_group(group)
    check_new_stream(subject, stream, group_name, count, max_partitions)
    return api_pb2.CreateStreamRequest(
        subject=subject,
        name=stream,
        group=group_name or "",
        replicationFactor=replicas,
        partitions=count,
        retentionMaxBytes=as_int64(retention_max_bytes, "retention_max_bytes"),
        retentionMaxMessages=as_int64(retention_max_messages, "retention_max_messages"),
        retentionMaxAge=as_millis(retention_max_age, "retention_max_age"),
        cleanerInterval=as_millis(cleaner_interval, "cleaner_interval"),
        segmentMaxBytes=as_int64(segment_max_bytes, "segment_max_bytes"),
        segmentMaxAge=as_millis(segment_max_age, "segment_max_age"),
        compactEnabled=as_bool(compact_enabled),
        compactMaxGoroutines=as_int32(compact_max_goroutines, "compact_max_goroutines"),
        autoPauseTime=as_millis(auto_pause_time, "auto_pause_time"),
        autoPauseDisableIfSubscribers=as_bool(auto_pause_disable_if_subscribers),
        minIsr=as_int32(min_isr, "min_isr"),
        optimisticConcurrencyControl=as_bool(optimistic_concurrency_control),
        encryption=as_bool(encryption),
    )


def checked_callable(value: object, name: str) -> None:
    """A (de)serializer, listener or hook: None or something callable (TypeError)."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a callable or None, got {type(value).__name__}")
