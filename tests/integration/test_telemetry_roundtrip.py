"""Trace context and serializers through a real Liftbridge node.

The publisher here is given the headers and bytes (``inject_context``, ``serialize``)
the way any publisher can send them; the stored message is read back over gRPC, in
this process and in a second one, whose CONSUMER span must link to the PRODUCER span.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Callable

import msgspec
from _publisher_helpers import read_all
from nats.aio.client import Client as NATS
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from liftbridge_nats import Client, DeserializationError, Publisher
from liftbridge_nats._tracing import publish_tracer
from liftbridge_nats.serializers import (
    MsgspecDeserializer,
    MsgspecSerializer,
    deserialize_message,
    serialize,
)
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.tracing import inject_context

# A second process reads the message and reports its CONSUMER span as JSON.
_CONSUMER = """
import asyncio, json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from liftbridge_nats import Client, StartPosition, StopPosition
from liftbridge_nats.tracing import consumer_span

async def main(brokers, stream):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with Client(brokers) as client:
        sub = client.subscribe(
            stream, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        )
        async with sub:
            async for msg in sub:
                with consumer_span(msg, tracer_provider=provider, group="audit"):
                    pass
    (span,) = exporter.get_finished_spans()
    print(json.dumps({
        "kind": span.kind.name,
        "name": span.name,
        "trace_id": span.context.trace_id,
        "links": [[l.context.trace_id, l.context.span_id] for l in span.links],
        "attributes": dict(span.attributes),
    }))

asyncio.run(main(json.loads(sys.argv[1]), sys.argv[2]))
"""


async def test_trace_context_travels_with_the_message_to_another_process(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("trace")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = publish_tracer(provider)
    assert tracer is not None
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client) as pub:
            with provider.get_tracer("app").start_as_current_span("checkout") as request:
                span, headers = tracer.start(name, "order-1", {"app": b"shop"})
                ack = await pub.publish(name, b"order", headers=headers)
            assert ack is not None
            tracer.finish(span, ack)
        (stored,) = await read_all(client, name)
    producer = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER)
    assert producer.context is not None
    trace_id = request.get_span_context().trace_id
    # The stored message carries the trace of the span active when it was published.
    assert producer.context.trace_id == trace_id
    assert stored.headers["app"] == b"shop"
    assert stored.headers["traceparent"].split(b"-")[1] == f"{trace_id:032x}".encode()
    ctx = stored.trace_context
    assert ctx is not None
    remote = trace.get_current_span(ctx).get_span_context()
    assert (remote.trace_id, remote.span_id) == (trace_id, producer.context.span_id)
    assert dict(producer.attributes or {})["messaging.liftbridge.offset"] == stored.offset

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(_CONSUMER),
        json.dumps(liftbridge_cluster.brokers),
        name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    consumer = json.loads(out)
    assert consumer["kind"] == "CONSUMER" and consumer["name"] == f"process {name}"
    assert consumer["links"] == [[trace_id, producer.context.span_id]]
    assert consumer["trace_id"] != trace_id  # linked, in a trace of its own
    assert consumer["attributes"]["messaging.consumer.group.name"] == "audit"
    assert consumer["attributes"]["messaging.liftbridge.offset"] == stored.offset


async def test_injected_context_does_not_replace_a_callers_traceparent(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("tracekeep")
    provider = TracerProvider()
    with provider.get_tracer("app").start_as_current_span("job"):
        headers = inject_context({"traceparent": b"set-by-caller"})
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client) as pub:
            await pub.publish(name, b"x", headers=headers)
        (stored,) = await read_all(client, name)
    assert stored.headers["traceparent"] == b"set-by-caller"
    assert stored.trace_context is None  # not a valid W3C value: nothing to extract


class Order(msgspec.Struct):
    id: int
    item: str


async def test_a_bad_message_in_a_stream_is_named_and_the_rest_still_decode(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("serde")
    to_bytes = MsgspecSerializer()
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client) as pub:
            await pub.publish(name, serialize(to_bytes, Order(1, "pear"), subject=name))
            # A plain NATS publish is stored as is: here, bytes that are no Order.
            await nats_client.publish(name, b"not json")
            await nats_client.flush()
            await pub.publish(name, serialize(to_bytes, Order(3, "fig"), subject=name))
        stored = await read_all(client, name)
    assert [m.offset for m in stored] == [0, 1, 2]
    decoded, failed = [], []
    for raw in stored:
        try:
            decoded.append(deserialize_message(raw, value_deserializer=MsgspecDeserializer(Order)))
        except DeserializationError as exc:
            failed.append((exc.stream, exc.partition, exc.offset, exc.raw_message))
    assert [m.value for m in decoded] == [Order(1, "pear"), Order(3, "fig")]
    assert failed == [(name, 0, 1, stored[1])]
