"""Tracing helpers against the OpenTelemetry SDK's in-memory exporter (no servers).

Each test uses a tracer provider of its own: the global provider can be set once per
process, so the cases that need a global one (or no opentelemetry at all) run in a
subprocess.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import TypeAlias

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from liftbridge_nats import (
    Ack,
    AckPolicy,
    AckTimeoutError,
    InvalidArgumentError,
    Message,
    MessageTooLargeError,
)
from liftbridge_nats._tracing import PublishTracer, consumer_span, error_type, publish_tracer
from liftbridge_nats.tracing import extract_context, inject_context

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# The suite's `traced` fixture (tests/conftest.py): an SDK provider into memory.
Traced: TypeAlias = tuple[TracerProvider, InMemorySpanExporter]


def ack(offset: int = 41, stream: str = "orders") -> Ack:
    return Ack(
        stream, 1, "orders", "orders.1", offset, "_INBOX.x.ack", "c-1", AckPolicy.LEADER, 1, 2
    )


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


# ------------------------------------------------------------------ producer spans


def test_producer_span_follows_the_messaging_conventions(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert isinstance(tracer, PublishTracer) and tracer.active
    span, headers = tracer.start("orders.1", "c-1", None, stream="orders", partition=1)
    tracer.finish(span, ack(offset=41))
    (done,) = exporter.get_finished_spans()
    assert done.name == "publish orders" and done.kind is SpanKind.PRODUCER
    assert dict(done.attributes or {}) == {
        "messaging.system": "liftbridge",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": "orders",
        "messaging.liftbridge.subject": "orders.1",
        "messaging.destination.partition.id": "1",
        "messaging.message.id": "c-1",
        "messaging.liftbridge.offset": 41,
        "messaging.liftbridge.stream": "orders",
    }
    assert done.status.status_code is StatusCode.UNSET
    ctx = done.context
    assert ctx is not None
    assert headers["traceparent"] == (
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}".encode()
    )


def test_plain_publish_names_the_subject_and_learns_the_stream_from_the_ack(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    span, _ = tracer.start("orders", "c-2", None)
    tracer.finish(span, ack(offset=7, stream="orders-stream"))
    (done,) = exporter.get_finished_spans()
    attrs = dict(done.attributes or {})
    assert done.name == "publish orders"
    assert attrs["messaging.destination.name"] == "orders"
    assert "messaging.liftbridge.subject" not in attrs  # it is the destination
    assert "messaging.destination.partition.id" not in attrs
    assert attrs["messaging.liftbridge.stream"] == "orders-stream"
    assert attrs["messaging.liftbridge.offset"] == 7


def test_producer_span_is_a_child_of_the_current_span(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    with provider.get_tracer("app").start_as_current_span("handle request") as parent:
        span, headers = tracer.start("orders", "c-3", {"app": b"1"})
    tracer.finish(span, ack())
    producer = next(s for s in exporter.get_finished_spans() if s.name == "publish orders")
    assert producer.parent is not None
    assert producer.parent.span_id == parent.get_span_context().span_id
    assert producer.context is not None
    assert producer.context.trace_id == parent.get_span_context().trace_id
    assert headers["app"] == b"1"


def test_errors_are_recorded(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    span, _ = tracer.start("orders", "c-4", None)
    error = AckTimeoutError("no ack", subject="orders", correlation_id="c-4")
    tracer.finish(span, error=error)
    (done,) = exporter.get_finished_spans()
    assert done.status.status_code is StatusCode.ERROR
    assert dict(done.attributes or {})["error.type"] == "liftbridge_nats.AckTimeoutError"
    assert "messaging.liftbridge.offset" not in dict(done.attributes or {})
    (event,) = done.events
    assert event.name == "exception"
    exception_type = dict(event.attributes or {})["exception.type"]
    assert isinstance(exception_type, str) and exception_type.endswith("AckTimeoutError")


async def test_finisher_ends_the_span_when_the_ack_future_settles(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    loop = asyncio.get_running_loop()
    outcomes: list[Ack | BaseException | None] = [
        ack(offset=3),
        MessageTooLargeError("too big"),
        None,
    ]
    for i, outcome in enumerate(outcomes):
        span, _ = tracer.start("orders", f"c-{i}", None)
        future: asyncio.Future[Ack | None] = loop.create_future()
        future.add_done_callback(tracer.finisher(span))
        if isinstance(outcome, Ack):
            future.set_result(outcome)
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
            assert future.exception() is outcome  # retrieved: no "never retrieved" warning
        else:
            future.cancel()
    await asyncio.sleep(0)  # done-callbacks run on the next loop iteration
    spans = {
        dict(s.attributes or {})["messaging.message.id"]: s for s in exporter.get_finished_spans()
    }
    assert set(spans) == {"c-0", "c-1", "c-2"}
    assert dict(spans["c-0"].attributes or {})["messaging.liftbridge.offset"] == 3
    assert spans["c-0"].status.status_code is StatusCode.UNSET
    assert dict(spans["c-1"].attributes or {})["error.type"] == (
        "liftbridge_nats.MessageTooLargeError"
    )
    assert dict(spans["c-2"].attributes or {})["error.type"] == "cancelled"
    assert spans["c-2"].status.status_code is StatusCode.ERROR


def test_tracing_argument() -> None:
    assert publish_tracer(False) is None
    with pytest.raises(TypeError, match="TracerProvider"):
        publish_tracer("yes")
    with pytest.raises(TypeError, match="TracerProvider"):
        publish_tracer(None)


def test_error_type_is_the_qualified_class_name() -> None:
    assert error_type(ValueError()) == "builtins.ValueError"
    assert error_type(AckTimeoutError("x")) == "liftbridge_nats.AckTimeoutError"


# ------------------------------------------------------------------ propagation


def test_injection_never_overwrites_a_header_of_the_same_name(traced: Traced) -> None:
    provider, _ = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    mine = {"traceparent": b"mine", "TraceState": b"keep", "x": b"1"}
    span, headers = tracer.start("orders", "c-5", mine)
    span.end()
    assert headers["traceparent"] == b"mine"
    assert headers["TraceState"] == b"keep" and "tracestate" not in headers
    assert headers["x"] == b"1"
    assert mine == {"traceparent": b"mine", "TraceState": b"keep", "x": b"1"}  # not changed


def test_tracestate_and_baggage_travel_too() -> None:
    from opentelemetry import baggage, context

    parent_ctx = trace.set_span_in_context(
        trace.NonRecordingSpan(
            trace.SpanContext(
                0x0AF7651916CD43DD8448EB211C80319C,
                0xB7AD6B7169203331,
                is_remote=True,
                trace_flags=trace.TraceFlags(1),
                trace_state=trace.TraceState([("vendor", "v1")]),
            )
        )
    )
    ctx = baggage.set_baggage("tenant", "acme", context=parent_ctx)
    token = context.attach(ctx)
    try:
        headers = inject_context({"a": b"b"})
    finally:
        context.detach(token)
    assert headers["traceparent"] == TRACEPARENT.encode()
    assert headers["tracestate"] == b"vendor=v1"
    assert headers["baggage"] == b"tenant=acme"
    extracted = extract_context(headers)
    assert extracted is not None
    assert baggage.get_baggage("tenant", extracted) == "acme"
    span_ctx = trace.get_current_span(extracted).get_span_context()
    assert span_ctx.trace_state.get("vendor") == "v1" and span_ctx.is_remote


def test_inject_without_an_active_span_adds_nothing() -> None:
    assert inject_context({"a": b"b"}) == {"a": b"b"}
    assert inject_context() == {}


def test_extract_and_message_trace_context() -> None:
    msg = Message("orders", 0, 5, b"v", headers={"traceparent": TRACEPARENT.encode()})
    ctx = msg.trace_context
    assert ctx is not None
    span_ctx = trace.get_current_span(ctx).get_span_context()
    assert (span_ctx.trace_id, span_ctx.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )
    # Header names are matched case-insensitively, like HTTP's.
    assert extract_context({"TraceParent": TRACEPARENT.encode()}) is not None
    assert Message("orders", 0, 5, b"v").trace_context is None
    assert Message("orders", 0, 5, b"v", headers={"x": b"1"}).trace_context is None
    assert extract_context({"traceparent": b"garbage"}) is None
    assert extract_context({"traceparent": b"\xff\xfe"}) is None
    assert extract_context(None) is None


# ------------------------------------------------------------------ consumer spans


def test_consumer_span_links_to_the_producer(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    span, headers = tracer.start("orders", "c-6", None)
    tracer.finish(span, ack())
    msg = Message("orders", 2, 41, b"v", subject="orders.2", headers=headers)
    with consumer_span(msg, tracer_provider=provider, group="billing") as current:
        assert current is not None and trace.get_current_span() is current
    producer, consumer = exporter.get_finished_spans()
    assert consumer.name == "process orders" and consumer.kind is SpanKind.CONSUMER
    assert producer.context is not None and consumer.context is not None
    (link,) = consumer.links
    assert link.context.trace_id == producer.context.trace_id
    assert link.context.span_id == producer.context.span_id
    # Linked, not a child: the consumer's trace is its own.
    assert consumer.parent is None
    assert consumer.context.trace_id != producer.context.trace_id
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "liftbridge",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.destination.partition.id": "2",
        "messaging.liftbridge.offset": 41,
        "messaging.liftbridge.subject": "orders.2",
        "messaging.consumer.group.name": "billing",
    }


def test_consumer_span_as_child_of_the_producer(traced: Traced) -> None:
    provider, exporter = traced
    msg = Message("orders", 0, 1, b"v", headers={"traceparent": TRACEPARENT.encode()})
    with consumer_span(msg, tracer_provider=provider, child_of_producer=True):
        pass
    (consumer,) = exporter.get_finished_spans()
    assert consumer.parent is not None and consumer.parent.span_id == 0xB7AD6B7169203331
    assert consumer.context is not None
    assert consumer.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C


def test_consumer_span_records_an_exception_and_lets_it_through(traced: Traced) -> None:
    provider, exporter = traced
    msg = Message("orders", 0, 1, b"v")
    with pytest.raises(KeyError), consumer_span(msg, tracer_provider=provider):
        raise KeyError("boom")
    (consumer,) = exporter.get_finished_spans()
    assert consumer.links == ()  # nothing to link to
    assert consumer.status.status_code is StatusCode.ERROR
    assert dict(consumer.attributes or {})["error.type"] == "builtins.KeyError"


def test_context_from_a_spark_rows_headers() -> None:
    # The Spark source's headers column is map<string,binary>: PySpark hands rows'
    # binary values over as bytearray.
    headers = {"subject": bytearray(b"orders"), "traceparent": bytearray(TRACEPARENT.encode())}
    ctx = extract_context(headers)
    assert ctx is not None
    remote = trace.get_current_span(ctx).get_span_context()
    assert (remote.trace_id, remote.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )


def test_consumer_span_over_a_batch_links_to_each_producer(traced: Traced) -> None:
    provider, exporter = traced
    tracer = publish_tracer(provider)
    assert tracer is not None
    headers = []
    for cid in ("c-1", "c-2"):
        span, carried = tracer.start("orders", cid, None)
        tracer.finish(span)
        headers.append(carried)
    batch = [
        Message("orders", 1, 7, b"a", headers=headers[0]),
        Message("orders", 1, 8, b"b"),  # published without a context
        Message("orders", 1, 9, b"c", headers=headers[1]),
        Message("orders", 1, 10, b"d", headers=headers[1]),  # the same producer span again
    ]
    with consumer_span(batch, tracer_provider=provider, group="billing"):
        pass
    *producers, consumer = exporter.get_finished_spans()
    assert consumer.name == "process orders" and consumer.kind is SpanKind.CONSUMER
    assert [(link.context.trace_id, link.context.span_id) for link in consumer.links] == [
        (p.context.trace_id, p.context.span_id) for p in producers if p.context is not None
    ]
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "liftbridge",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.batch.message_count": 4,
        "messaging.destination.name": "orders",
        "messaging.destination.partition.id": "1",
        "messaging.consumer.group.name": "billing",
    }
    # Messages of several streams: no destination, and the span is named for the
    # operation alone, as the conventions ask.
    with consumer_span(
        (Message("orders", 0, 1, b"a"), Message("refunds", 0, 1, b"b")), tracer_provider=provider
    ):
        pass
    mixed = exporter.get_finished_spans()[-1]
    assert mixed.name == "process" and mixed.links == ()
    assert "messaging.destination.name" not in dict(mixed.attributes or {})


def test_consumer_span_refuses_an_empty_batch_and_a_batch_as_child(traced: Traced) -> None:
    provider, exporter = traced
    empty = consumer_span([], tracer_provider=provider)
    with pytest.raises(InvalidArgumentError, match="non-empty"), empty:
        pass
    as_child = consumer_span(
        [Message("s", 0, 0, b"v")], tracer_provider=provider, child_of_producer=True
    )
    with pytest.raises(InvalidArgumentError, match="single message"), as_child:
        pass
    assert exporter.get_finished_spans() == ()


# ------------------------------------------------------------------ global provider, no otel


def test_without_an_sdk_nothing_is_traced_until_one_is_configured() -> None:
    run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from liftbridge_nats._tracing import publish_tracer, sdk_configured
        from liftbridge_nats import Message
        from liftbridge_nats.tracing import consumer_span

        tracer = publish_tracer(True)
        assert tracer is not None and not tracer.active and not sdk_configured()
        msg = Message("s", 0, 0, b"v")
        with consumer_span(msg) as span:
            assert span is trace.INVALID_SPAN and not span.is_recording()

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        assert not tracer.active  # looked up at refresh() only, never per message
        assert tracer.refresh() and tracer.active
        span, headers = tracer.start("s", "c", None)
        tracer.finish(span)
        with consumer_span(Message("s", 0, 0, b"v", headers=headers)):
            pass
        assert [s.name for s in exporter.get_finished_spans()] == ["publish s", "process s"]
        """
    )


def test_without_opentelemetry_everything_is_a_no_op() -> None:
    run(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if not installed
        from liftbridge_nats._metrics import Metrics
        from liftbridge_nats._tracing import otel_available, publish_tracer, sdk_configured
        from liftbridge_nats import Message
        from liftbridge_nats.tracing import consumer_span, extract_context, inject_context

        assert not otel_available() and not sdk_configured()
        assert publish_tracer(True) is None and publish_tracer(False) is None
        try:
            publish_tracer(object())
        except TypeError:
            pass
        else:
            raise AssertionError("a non-provider was accepted")
        tp = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        msg = Message("s", 0, 0, b"v", headers={"traceparent": tp})
        assert msg.trace_context is None and extract_context(msg.headers) is None
        assert inject_context({"a": b"b"}) == {"a": b"b"}
        with consumer_span(msg) as span:
            assert span is None
        metrics = Metrics()
        assert not metrics.enabled and metrics.ack_latency() is None
        metrics.read_cell("s", 0).messages += 1
        """
    )
