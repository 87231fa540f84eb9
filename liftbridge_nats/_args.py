"""Argument checks and conversions for the client's requests.

Everything a caller passes is checked here before it goes on the wire, so that a bad
argument fails at once with :class:`InvalidArgumentError` (or ``TypeError``) instead of
as a server answer, and durations are converted to the milliseconds the server's stream
options expect (server/config.go, ``StreamsConfig.ApplyOverrides``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ._proto import api_pb2
from .errors import InvalidArgumentError
from .messages import AckPolicy

__all__ = [
    "Duration",
    "as_bool",
    "as_int32",
    "as_int64",
    "as_millis",
    "checked_int",
    "checked_name",
    "checked_partition",
    "checked_partitions",
    "checked_subject",
    "message_fields",
    "publish_request",
]

Duration = timedelta | float | int
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def as_millis(value: Duration | None, name: str) -> api_pb2.NullableInt64 | None:
    """Stream options take durations in milliseconds (server/config.go ApplyOverrides)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise TypeError(f"{name} must be a timedelta or seconds, got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not 0 <= seconds < INT64_MAX / 1000:
        raise InvalidArgumentError(f"{name} must be a duration >= 0, got {value!r}")
    return api_pb2.NullableInt64(value=round(seconds * 1000))


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


def checked_name(value: object, what: str) -> str:
    """Check a stream name, subject or id before it goes on the wire."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value or value != value.strip():
        raise InvalidArgumentError(f"{what} must be non-empty, without surrounding spaces")
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
