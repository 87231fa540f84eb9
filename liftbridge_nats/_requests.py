"""The client's protobuf requests, built from checked arguments.

Every argument goes through :mod:`._checks` before it is put in a request, so that a
bad one fails at once with :class:`InvalidArgumentError` (or ``TypeError``) instead of
as a server answer; this module only converts checked values to the proto's types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._checks import (
    INT32_MAX,
    Duration,
    check_ack_policy,
    check_correlation_id,
    check_duration,
    check_expected_offset,
    check_group,
    check_headers,
    check_int,
    check_key,
    check_name,
    check_partition,
    check_partition_count,
    check_stream_name,
    check_stream_subject,
    check_value,
)
from ._errors import InvalidArgumentError
from ._proto import api_pb2

__all__ = [
    "as_bool",
    "as_int32",
    "as_int64",
    "as_millis",
    "create_stream_request",
    "message_fields",
    "publish_request",
]


def as_millis(value: Duration | None, name: str) -> api_pb2.NullableInt64 | None:
    """A duration as the proto's nullable int64 of milliseconds (None: server default)."""
    millis = check_duration(value, name)
    return None if millis is None else api_pb2.NullableInt64(value=millis)


def as_int64(value: int | None, name: str) -> api_pb2.NullableInt64 | None:
    """A non-negative count (bytes, messages) as the proto's nullable int64."""
    if value is None:
        return None
    return api_pb2.NullableInt64(value=check_int(value, name))


def as_int32(value: int | None, name: str) -> api_pb2.NullableInt32 | None:
    """A non-negative count as the proto's nullable int32."""
    if value is None:
        return None
    return api_pb2.NullableInt32(value=check_int(value, name, high=INT32_MAX))


def as_bool(value: bool | None) -> api_pb2.NullableBool | None:
    """An optional flag as the proto's nullable bool (None: server default)."""
    return None if value is None else api_pb2.NullableBool(value=value)


def message_fields(
    value: object,
    key: object,
    headers: Mapping[str, bytes] | None,
    ack_policy: object,
    correlation_id: str | None,
    new_id: Callable[[], str],
) -> dict[str, Any]:
    """The fields every gRPC publish request shares, checked by the Publisher's rules
    (a missing correlation id is made up by ``new_id``)."""
    data = check_value(value)
    checked_key = check_key(key)
    return {
        "key": bytes(checked_key or b""),
        "value": data,
        "headers": {} if headers is None else dict(check_headers(headers)),
        "correlationId": new_id()
        if correlation_id is None
        else check_correlation_id(correlation_id),
        "ackPolicy": int(check_ack_policy(ack_policy)),
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
    new_id: Callable[[], str],
) -> api_pb2.PublishRequest:
    """A checked PublishRequest; ``expected_offset`` None sends -1 ("no check")."""
    fields = message_fields(value, key, headers, ack_policy, correlation_id, new_id)
    offset = check_expected_offset(expected_offset)
    return api_pb2.PublishRequest(
        stream=check_name(stream, "stream name"),
        partition=check_partition(partition),
        expectedOffset=-1 if offset is None else offset,
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
    count = check_int(partitions, "partitions", low=1, high=INT32_MAX)
    stream_subject = check_stream_subject(subject, count)
    # -1 is REPLICATION_MAX: a replica on every broker.
    replicas = check_int(replication_factor, "replication_factor", low=-1, high=INT32_MAX)
    if replicas == 0:
        raise InvalidArgumentError("replication_factor must be >= 1, or -1 for every broker")
    group_name = None if group is None else check_group(group)
    check_partition_count(count, max_partitions)
    return api_pb2.CreateStreamRequest(
        subject=stream_subject,
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
