"""The Publisher's tracing, metrics and serializers against a real Liftbridge node.

Spans go to the OpenTelemetry SDK's in-memory exporter and metrics to its in-memory
reader, through providers given to the Publisher (the global ones stay untouched); what
the server stored is read back over gRPC.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Callable
from typing import Any, TypeAlias

import msgspec
import pytest
from _publisher_helpers import read_all, wait_paused
from nats.aio.client import Client as NATS
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from liftbridge_nats import (
    Client,
    KeyPartitioner,
    NoRespondersError,
    Publisher,
    SerializationError,
    partition_subject,
)
from liftbridge_nats.serializers import (
    JsonDeserializer,
    JsonSerializer,
    MsgspecDeserializer,
    MsgspecSerializer,
    StringSerializer,
    deserialize_message,
)
from liftbridge_nats.testing import LocalCluster

# The suite's `traced` fixture (tests/conftest.py): an SDK provider into memory.
Traced: TypeAlias = tuple[TracerProvider, InMemorySpanExporter]
MetricValues: TypeAlias = Callable[[InMemoryMetricReader], dict[str, dict[str, Any]]]


def producer_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def newest_offset(client: Client, stream: str, partition: int = 0) -> int:
    info = await client.stream_info(stream, refresh=True)
    return info.partitions[partition].newest_offset


# ------------------------------------------------------------------ tracing


async def test_a_publish_under_a_span_stores_its_trace_and_the_span_has_the_ack(
    liftbridge_cluster: LocalCluster,
    nats_client: NATS,
    unique_name: Callable[[str], str],
    traced: Traced,
) -> None:
    provider, exporter = traced
    name = unique_name("tracepub")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=2)
        async with Publisher(nats_client, client=client, tracing=provider, metrics=False) as pub:
            with provider.get_tracer("app").start_as_current_span("checkout") as request:
                ack = await pub.publish_to_stream(
                    name, b"order", partition=1, headers={"app": b"shop"}
                )
                plain = await pub.publish(name, b"plain")
        assert ack is not None and plain is not None
        (stored,) = await read_all(client, name, 1)
        (stored_plain,) = await read_all(client, name, 0)
    trace_id = request.get_span_context().trace_id
    to_stream, to_subject = producer_spans(exporter)
    assert to_stream.name == f"publish {name}"
    assert to_stream.context is not None and to_stream.context.trace_id == trace_id
    assert to_stream.status.status_code is StatusCode.UNSET
    assert attributes(to_stream) == {
        "messaging.system": "liftbridge",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": name,
        "messaging.liftbridge.subject": partition_subject(name, 1),
        "messaging.destination.partition.id": "1",
        "messaging.message.id": ack.correlation_id,
        "messaging.liftbridge.offset": stored.offset,
        "messaging.liftbridge.stream": name,
    }
    # What the server stored carries the span's context, beside the caller's header.
    assert stored.headers["app"] == b"shop"
    assert stored.headers["traceparent"].split(b"-")[1:3] == [
        f"{trace_id:032x}".encode(),
        f"{to_stream.context.span_id:016x}".encode(),
    ]
    assert stored.trace_context is not None
    # A publish to a subject: the subject is the destination, the stream comes from the ack.
    assert to_subject.context is not None
    assert attributes(to_subject)["messaging.destination.name"] == name
    assert attributes(to_subject)["messaging.liftbridge.stream"] == name
    assert attributes(to_subject)["messaging.liftbridge.offset"] == stored_plain.offset
    assert attributes(to_subject)["messaging.message.id"] == plain.correlation_id
    assert stored_plain.headers["traceparent"].split(b"-")[2] == (
        f"{to_subject.context.span_id:016x}".encode()
    )


async def test_publish_to_stream_async_serializes_once_and_its_span_names_the_partition(
    liftbridge_cluster: LocalCluster,
    nats_client: NATS,
    unique_name: Callable[[str], str],
    traced: Traced,
) -> None:
    provider, exporter = traced
    name = unique_name("asyncstream")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        async with Publisher(
            nats_client,
            client=client,
            tracing=provider,
            metrics=False,
            value_serializer=JsonSerializer(),
            key_serializer=StringSerializer(),
        ) as pub:
            future = await pub.publish_to_stream_async(
                name, {"n": 1}, key="customer-7", partitioner=KeyPartitioner()
            )
            ack = await future
            with pytest.raises(SerializationError):
                await pub.publish_to_stream_async(name, object(), partition=0)
            assert pub.stats.published == 1
        assert ack is not None
        expected = zlib.crc32(b"customer-7") % 3
        assert ack.partition == expected
        (stored,) = await read_all(client, name, expected)
    assert (stored.key, stored.value) == (b"customer-7", b'{"n":1}')
    (span,) = producer_spans(exporter)
    assert attributes(span)["messaging.destination.name"] == name
    assert attributes(span)["messaging.destination.partition.id"] == str(expected)
    assert attributes(span)["messaging.liftbridge.offset"] == stored.offset
    assert span.context is not None
    assert stored.headers["traceparent"].split(b"-")[2] == f"{span.context.span_id:016x}".encode()


async def test_no_responders_is_recorded_on_the_span(
    liftbridge_cluster: LocalCluster,
    nats_client: NATS,
    unique_name: Callable[[str], str],
    traced: Traced,
) -> None:
    provider, exporter = traced
    nowhere = unique_name("nostream")
    async with Publisher(nats_client, tracing=provider, metrics=False) as pub:
        with pytest.raises(NoRespondersError):
            await pub.publish(nowhere, b"x")
    (span,) = producer_spans(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attributes(span)["error.type"] == "liftbridge_nats.NoRespondersError"
    assert attributes(span)["messaging.destination.name"] == nowhere
    assert "messaging.liftbridge.offset" not in attributes(span)
    (event,) = span.events
    assert event.name == "exception"
    assert str(dict(event.attributes or {})["exception.type"]).endswith("NoRespondersError")


async def test_a_resumed_partition_keeps_the_one_span_of_the_message(
    liftbridge_cluster: LocalCluster,
    nats_client: NATS,
    unique_name: Callable[[str], str],
    traced: Traced,
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider, exporter = traced
    name = unique_name("tracepause")
    caplog.set_level(logging.INFO, logger="liftbridge_nats.publisher")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        await client.pause_stream(name)
        await wait_paused(client, liftbridge_cluster, name)
        async with Publisher(nats_client, client=client, tracing=provider, metrics=False) as pub:
            ack = await pub.publish_to_stream(name, b"after the pause", timeout=15)
            assert ack is not None and pub.stats.resent >= 1
        (stored,) = await read_all(client, name)
    # Sent at least twice (nobody listened the first time), traced once.
    (span,) = producer_spans(exporter)
    assert span.status.status_code is StatusCode.UNSET
    assert attributes(span)["messaging.liftbridge.offset"] == stored.offset == 0
    assert attributes(span)["messaging.destination.partition.id"] == "0"
    assert span.context is not None
    assert stored.headers["traceparent"].split(b"-")[2] == f"{span.context.span_id:016x}".encode()
    resumed = [
        r.getMessage() for r in caplog.records if "resumed paused partition" in r.getMessage()
    ]
    assert resumed and repr(name) in resumed[0]


# ------------------------------------------------------------------ metrics


async def test_metrics_count_real_publishes_exactly(
    liftbridge_cluster: LocalCluster,
    nats_client: NATS,
    unique_name: Callable[[str], str],
    metric_values: MetricValues,
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    name = unique_name("metrics")
    nowhere = unique_name("nostream")
    try:
        async with Client(liftbridge_cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nats_client, metrics=provider, tracing=False) as pub:
                acks = await pub.publish_batch(name, [b"m%d" % i for i in range(50)])
                for _ in range(3):
                    with pytest.raises(NoRespondersError):
                        await pub.publish(nowhere, b"lost")
                seen = metric_values(reader)
                assert seen["liftbridge.publisher.inflight"] == {"": 0}
            assert len(acks) == 50
            assert await newest_offset(client, name) == 49
        seen = metric_values(reader)
        assert seen["messaging.client.sent.messages"] == {"": 53}
        assert seen["liftbridge.publisher.acked"] == {"": 50}
        assert seen["liftbridge.publisher.failed"] == {"liftbridge_nats.NoRespondersError": 3}
        assert seen["liftbridge.publisher.no_responders"] == {"": 3}
        assert seen["liftbridge.publisher.resent"] == {"": 0}
        latency = seen["messaging.client.operation.duration"][""]
        assert isinstance(latency, HistogramDataPoint)
        assert 1 <= latency.count <= 50 and 0 < latency.min <= latency.max < 5
    finally:
        provider.shutdown()


# ------------------------------------------------------------------ serializers


class Order(msgspec.Struct):
    id: int
    item: str


@dataclasses.dataclass
class Refund:
    order: int
    cents: int


async def test_objects_round_trip_through_serializer_and_deserializer(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    orders, refunds = unique_name("orders"), unique_name("refunds")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(orders, orders)
        await client.create_stream(refunds, refunds)
        async with Publisher(
            nats_client, value_serializer=MsgspecSerializer(), key_serializer=StringSerializer()
        ) as pub:
            await pub.publish(orders, Order(1, "pear"), key="customer-1")
            await pub.publish_batch(orders, [Order(2, "fig"), Order(3, "kiwi")])
        async with Publisher(nats_client, value_serializer=JsonSerializer()) as json_pub:
            await json_pub.publish(refunds, dataclasses.asdict(Refund(2, 150)))
        stored_orders = await read_all(client, orders)
        (stored_refund,) = await read_all(client, refunds)
    typed = [
        deserialize_message(m, value_deserializer=MsgspecDeserializer(Order)) for m in stored_orders
    ]
    assert [m.value for m in typed] == [Order(1, "pear"), Order(2, "fig"), Order(3, "kiwi")]
    assert [m.key for m in typed] == [b"customer-1", None, None]
    refund = deserialize_message(
        stored_refund, value_deserializer=JsonDeserializer(object_hook=lambda d: Refund(**d))
    )
    assert refund.value == Refund(2, 150)


async def test_publish_to_stream_partitions_by_the_serialized_key(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("serkeys")
    customers = [f"customer-{i}" for i in range(12)]
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, partitions=3)
        async with Publisher(
            nats_client,
            client=client,
            value_serializer=JsonSerializer(),
            key_serializer=StringSerializer(),
        ) as pub:
            for customer in customers:
                await pub.publish_to_stream(
                    name, {"customer": customer}, key=customer, partitioner=KeyPartitioner()
                )
        placed = {p: await read_all(client, name, p) for p in range(3)}
    seen = []
    for partition, messages in placed.items():
        for msg in messages:
            assert msg.key is not None and zlib.crc32(msg.key) % 3 == partition
            assert msg.value == b'{"customer":"%s"}' % msg.key
            seen.append(msg.key.decode())
    assert sorted(seen) == sorted(customers)  # each once: serialized once, sent once


async def test_a_value_that_cannot_be_serialized_sends_nothing(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("serfail")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(
            nats_client, client=client, value_serializer=MsgspecSerializer()
        ) as pub:
            await pub.publish(name, Order(1, "pear"))
            before = pub.stats
            with pytest.raises(SerializationError) as raised:
                await pub.publish(name, object())
            assert raised.value.what == "value"
            with pytest.raises(SerializationError):
                await pub.publish_async(name, {"id": object()})
            with pytest.raises(SerializationError):
                await pub.publish_to_stream(name, object(), partitioner=KeyPartitioner())
            after = pub.stats
            assert after.published == before.published == 1
            assert after.pending == 0 and after.buffered == 0
            assert after.fast_path_sent + after.public_api_sent == 1
            # Still usable.
            await pub.publish(name, Order(2, "fig"))
        assert await newest_offset(client, name) == 1
        stored = await read_all(client, name)
    assert [msgspec.json.decode(m.value, type=Order) for m in stored] == [
        Order(1, "pear"),
        Order(2, "fig"),
    ]
