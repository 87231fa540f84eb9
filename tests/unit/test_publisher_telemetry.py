"""The Publisher's tracing, metrics, serializers and logs over the in-memory transport.

Spans go to the OpenTelemetry SDK's in-memory exporter and metrics to its in-memory
reader, each test with providers of its own (the global ones are set in subprocesses
only). The integration tests prove the same against real servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any, TypeAlias

import msgspec
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from liftbridge_nats import (
    AckError,
    AckPolicy,
    AckTimeoutError,
    IncorrectOffsetError,
    NoRespondersError,
    Publisher,
    PublishRecord,
    SerializationError,
)
from liftbridge_nats._memtransport import MemoryTransport, Sent, auto_ack
from liftbridge_nats._tracing import error_type
from liftbridge_nats.serializers import JsonSerializer, MsgspecSerializer, StringSerializer

# The suite's `traced`, `metered` and `metric_values` fixtures (tests/conftest.py).
Traced: TypeAlias = tuple[TracerProvider, InMemorySpanExporter]
Metered: TypeAlias = tuple[MeterProvider, InMemoryMetricReader]
MetricValues: TypeAlias = Callable[[InMemoryMetricReader], dict[str, dict[str, Any]]]


def producer_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.PRODUCER]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def traceparent_of(span: ReadableSpan) -> bytes:
    ctx = span.context
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}".encode()


def run(code: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)


# ------------------------------------------------------------------ tracing


async def test_each_message_gets_a_producer_span_whose_context_travels_in_its_headers(
    traced: Traced,
) -> None:
    provider, exporter = traced
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, tracing=provider, metrics=False) as pub:
        with provider.get_tracer("app").start_as_current_span("checkout") as request:
            first = await pub.publish("orders", b"a")
            keyed = await pub.publish("orders", b"b", key=b"k", headers={"app": b"shop"})
            await pub.publish("orders", b"c", ack_policy=AckPolicy.NONE)
            future = await pub.publish_async("orders", b"d", correlation_id="mine-1")
            await future
    assert first is not None and keyed is not None
    spans = producer_spans(exporter)
    assert len(spans) == 4
    sent = [s.published for s in transport.delivered]
    trace_id = request.get_span_context().trace_id
    for span, message in zip(spans, sent, strict=True):
        assert span.name == "publish orders"
        assert span.context is not None and span.context.trace_id == trace_id
        assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
        assert span.status.status_code is StatusCode.UNSET
        attrs = attributes(span)
        assert attrs["messaging.system"] == "liftbridge"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == "orders"
        assert attrs["messaging.message.id"] == message.correlation_id
        assert message.message.headers["traceparent"] == traceparent_of(span)
    assert [attributes(s).get("messaging.liftbridge.offset") for s in spans] == [0, 1, None, 2]
    assert attributes(spans[3])["messaging.message.id"] == "mine-1"
    assert sent[1].message.key == b"k" and sent[1].message.headers["app"] == b"shop"


async def test_a_header_of_the_same_name_is_never_overwritten(traced: Traced) -> None:
    provider, exporter = traced
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, tracing=provider, metrics=False) as pub:
        await pub.publish("s", b"x", headers={"TraceParent": b"set-by-caller"})
    (span,) = producer_spans(exporter)
    headers = transport.delivered[0].published.message.headers
    assert headers == {"TraceParent": b"set-by-caller"}  # no second, lower-case copy
    assert span.status.status_code is StatusCode.UNSET


async def test_errors_are_recorded_on_the_span(traced: Traced) -> None:
    provider, exporter = traced

    def answer(transport: MemoryTransport, sent: Sent) -> None:
        value = sent.published.message.value
        if value == b"nobody":
            transport.no_responders(sent)
        elif value == b"refused":
            transport.ack(sent, error=AckError.INCORRECT_OFFSET)
        elif value != b"silence":
            transport.ack(sent)

    transport = MemoryTransport(responder=answer)
    async with Publisher(transport, tracing=provider, metrics=False, ack_timeout=0.05) as pub:
        for value, error in (
            (b"nobody", NoRespondersError),
            (b"refused", IncorrectOffsetError),
            (b"silence", AckTimeoutError),
        ):
            with pytest.raises(error):
                await pub.publish("s", value)
        waiting = asyncio.ensure_future(pub.publish("s", b"silence", timeout=5))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    spans = producer_spans(exporter)
    assert [attributes(s)["error.type"] for s in spans] == [
        "liftbridge_nats.NoRespondersError",
        "liftbridge_nats.IncorrectOffsetError",
        "liftbridge_nats.AckTimeoutError",
        "cancelled",
    ]
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    assert [e.name for e in spans[0].events] == ["exception"]
    assert "messaging.liftbridge.offset" not in attributes(spans[0])


async def test_a_message_sent_again_keeps_its_one_span(traced: Traced) -> None:
    provider, exporter = traced
    attempts: list[Sent] = []

    def second_time_lucky(transport: MemoryTransport, sent: Sent) -> None:
        attempts.append(sent)
        if len(attempts) == 1:
            transport.no_responders(sent)
        else:
            transport.ack(sent)

    transport = MemoryTransport(responder=second_time_lucky)
    async with Publisher(transport, tracing=provider, metrics=False, retry=True) as pub:
        ack = await pub.publish("s", b"x")
    assert ack is not None and len(attempts) == 2
    assert attempts[0].data == attempts[1].data  # the same bytes: the same traceparent
    (span,) = producer_spans(exporter)
    assert attributes(span)["messaging.liftbridge.offset"] == 0
    assert span.status.status_code is StatusCode.UNSET


async def test_a_message_too_large_for_nats_records_the_error_and_sends_nothing(
    traced: Traced,
) -> None:
    provider, exporter = traced
    transport = MemoryTransport(responder=auto_ack, max_payload=200)
    async with Publisher(transport, tracing=provider, metrics=False) as pub:
        with pytest.raises(Exception, match="max_payload") as raised:
            await pub.publish("s", b"x" * 300)
        assert pub.pending == 0
    (span,) = producer_spans(exporter)
    assert attributes(span)["error.type"].endswith(type(raised.value).__name__)
    assert not transport.delivered


async def test_tracing_off_sends_the_headers_as_given(traced: Traced) -> None:
    provider, exporter = traced
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, tracing=False, metrics=False) as pub:
        with provider.get_tracer("app").start_as_current_span("job"):
            await pub.publish("s", b"x")
            await pub.publish("s", b"y", headers={"app": b"1"})
    assert [s.published.message.headers for s in transport.delivered] == [{}, {"app": b"1"}]
    assert not producer_spans(exporter)


def test_an_sdk_configured_after_start_is_noticed_without_a_restart() -> None:
    # The global tracer provider is the API's proxy until an SDK is set: nothing is
    # injected then; the publisher notices the SDK at its next telemetry refresh.
    run(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from liftbridge_nats import _publisher as publisher
        from liftbridge_nats._memtransport import MemoryTransport, auto_ack

        publisher._TELEMETRY_REFRESH = 0.02

        async def main():
            transport = MemoryTransport(responder=auto_ack)
            async with publisher.Publisher(transport) as pub:
                await pub.publish("s", b"before")
                exporter = InMemorySpanExporter()
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(exporter))
                trace.set_tracer_provider(provider)
                await asyncio.sleep(0.1)
                with trace.get_tracer("app").start_as_current_span("job"):
                    await pub.publish("s", b"after")
            before, after = (s.published.message.headers for s in transport.delivered)
            assert before == {}, before
            assert "traceparent" in after, after
            assert [s.name for s in exporter.get_finished_spans()] == ["publish s", "job"]

        asyncio.run(main())
        """
    )


def test_without_opentelemetry_installed_everything_still_works() -> None:
    run(
        """
        import asyncio, sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, Blocker())
        from liftbridge_nats._memtransport import MemoryTransport, auto_ack
        from liftbridge_nats import Publisher

        async def main():
            transport = MemoryTransport(responder=auto_ack)
            async with Publisher(transport, tracing=True, metrics=True) as pub:
                acks = await asyncio.gather(*(pub.publish("s", b"x") for _ in range(300)))
            assert [a.offset for a in acks] == list(range(300))
            assert transport.delivered[0].published.message.headers == {}
            assert not any(m.startswith("opentelemetry") for m in sys.modules)

        asyncio.run(main())
        """
    )


async def test_wrong_telemetry_and_serializer_arguments_are_type_errors() -> None:
    transport = MemoryTransport()
    with pytest.raises(TypeError, match="tracing must be"):
        Publisher(transport, tracing="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metrics must be"):
        Publisher(transport, metrics=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value_serializer must be a callable"):
        Publisher(transport, value_serializer=b"json")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key_serializer must be a callable"):
        Publisher(transport, key_serializer="utf-8")  # type: ignore[arg-type]


# ------------------------------------------------------------------ metrics


async def test_metrics_report_the_publishers_counters(
    metered: Metered, metric_values: MetricValues
) -> None:
    provider, reader = metered

    def answer(transport: MemoryTransport, sent: Sent) -> None:
        value = sent.published.message.value
        if value == b"nobody":
            transport.no_responders(sent)
        elif value == b"refused":
            transport.ack(sent, error=AckError.INCORRECT_OFFSET)
        elif value != b"held":
            transport.ack(sent)

    transport = MemoryTransport(responder=answer)
    pub = Publisher(transport, metrics=provider, tracing=False, ack_timeout=0.05)
    async with pub:
        values = [b"ok"] * 20 + [b"nobody"] * 3 + [b"refused"] * 2 + [b"held"]
        results = await asyncio.gather(
            *(pub.publish("s", v) for v in values), return_exceptions=True
        )
        assert sum(isinstance(r, Exception) for r in results) == 6
        held = await pub.publish_async("s", b"held", timeout=30)
        transport.disconnect()
        # Its own deadline: the publisher's 0.05 s could pass during the sleep below
        # on a loaded machine, and fail it before the gauges are read.
        waiting = await pub.publish_async("s", b"x" * 100, timeout=30)
        await asyncio.sleep(0.03)
        seen = metric_values(reader)
        assert seen["messaging.client.sent.messages"] == {"": 28}
        assert seen["liftbridge.publisher.acked"] == {"": 20}
        assert seen["liftbridge.publisher.failed"] == {
            "liftbridge_nats.NoRespondersError": 3,
            "liftbridge_nats.IncorrectOffsetError": 2,
            "liftbridge_nats.AckTimeoutError": 1,
        }
        assert seen["liftbridge.publisher.no_responders"] == {"": 3}
        assert seen["liftbridge.publisher.resent"] == {"": 0}
        assert seen["liftbridge.publisher.inflight"] == {"": 2}  # held + waiting
        buffered = seen["liftbridge.publisher.buffered"][""]
        latency = seen["messaging.client.operation.duration"][""]
        assert isinstance(latency, HistogramDataPoint) and latency.count >= 1
        assert 0 < latency.max < 1
        transport.reconnect()
        await waiting
        assert buffered == len(transport.delivered[-1].data)  # the envelope that waited
        held.cancel()  # forgotten: neither acked nor failed
    seen = metric_values(reader)
    # Closed: its counts stay in the totals, its gauges are gone.
    assert seen["messaging.client.sent.messages"] == {"": 28}
    assert seen["liftbridge.publisher.acked"] == {"": 21}
    assert seen["liftbridge.publisher.inflight"] == {"": 0}
    assert seen["liftbridge.publisher.buffered"] == {"": 0}
    assert sum(seen["liftbridge.publisher.failed"].values()) == 6


async def test_ack_latency_is_sampled_at_most_once_a_millisecond(
    metered: Metered, metric_values: MetricValues
) -> None:
    provider, reader = metered
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, metrics=provider, tracing=False) as pub:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(pub.publish("s", b"x") for _ in range(3000)))
        elapsed = loop.time() - started
    point = metric_values(reader)["messaging.client.operation.duration"][""]
    assert isinstance(point, HistogramDataPoint)
    assert 1 <= point.count <= elapsed / 0.001 + 1 and point.count < 3000
    assert metric_values(reader)["liftbridge.publisher.acked"] == {"": 3000}


async def test_closing_with_messages_unacked_counts_them_as_failed(
    metered: Metered, metric_values: MetricValues
) -> None:
    provider, reader = metered
    transport = MemoryTransport()  # nobody answers
    async with Publisher(transport, metrics=provider, tracing=False) as pub:
        futures = [await pub.publish_async("s", b"x") for _ in range(5)]
        await pub.close(timeout=0)
    errors = {error_type(e) for f in futures if (e := f.exception()) is not None}
    assert len(errors) == 1  # every one failed, all alike
    assert metric_values(reader)["liftbridge.publisher.failed"] == {errors.pop(): 5}


# ------------------------------------------------------------------ serializers


class Order(msgspec.Struct):
    id: int
    item: str


async def test_values_and_keys_are_serialized_on_every_publish_path() -> None:
    transport = MemoryTransport(responder=auto_ack)
    pub = Publisher(
        transport,
        value_serializer=JsonSerializer(sort_keys=True),
        key_serializer=StringSerializer(),
    )
    async with pub:
        await pub.publish("s", {"b": 1, "a": [2]}, key="k1")
        await (await pub.publish_async("s", None))
        await pub.publish_batch(
            "s", [{"n": 1}, PublishRecord({"n": 2}, key="k2", headers={"h": b"v"})]
        )
    sent = [s.published.message for s in transport.delivered]
    assert [m.value for m in sent] == [b'{"a":[2],"b":1}', b"null", b'{"n":1}', b'{"n":2}']
    assert [m.key for m in sent] == [b"k1", None, None, b"k2"]  # None is never serialized
    assert sent[3].headers == {"h": b"v"}


def test_the_publisher_is_typed_by_its_serializers() -> None:
    # Checked by mypy --strict: the publish methods take what the serializers take.
    transport = MemoryTransport()
    plain: Publisher[bytes, bytes] = Publisher(transport)
    strings: Publisher[str, str] = Publisher(
        transport, value_serializer=StringSerializer(), key_serializer=StringSerializer()
    )
    anything: Publisher[Any, bytes] = Publisher(transport, value_serializer=MsgspecSerializer())
    assert all(p.closed is False for p in (plain, strings, anything))


async def test_msgspec_structs_go_out_as_their_encoding() -> None:
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, value_serializer=MsgspecSerializer("msgpack")) as pub:
        await pub.publish("s", Order(7, "pear"))
    value = transport.delivered[0].published.message.value
    assert msgspec.msgpack.decode(value, type=Order) == Order(7, "pear")


async def test_a_value_the_serializer_refuses_sends_nothing(
    metered: Metered, metric_values: MetricValues
) -> None:
    provider, reader = metered
    transport = MemoryTransport(responder=auto_ack)
    async with Publisher(transport, value_serializer=JsonSerializer(), metrics=provider) as pub:
        with pytest.raises(SerializationError, match="set") as raised:
            await pub.publish("s", {1, 2})
        assert raised.value.what == "value" and raised.value.subject == "s"
        with pytest.raises(SerializationError):
            await pub.publish_async("s", object())
        with pytest.raises(SerializationError):
            await pub.publish_batch("s", [{"ok": 1}, float("nan")])
        assert pub.pending == 0
    # The batch's first message went out; nothing of the refused ones did.
    assert [s.published.message.value for s in transport.delivered] == [b'{"ok":1}']
    assert pub.stats.published == 1
    seen = metric_values(reader)
    assert seen["messaging.client.sent.messages"] == {"": 1}
    assert "liftbridge.publisher.failed" not in seen or not seen["liftbridge.publisher.failed"]


async def test_a_serializer_returning_no_bytes_is_refused() -> None:
    transport = MemoryTransport(responder=auto_ack)

    def not_bytes(value: object) -> bytes:
        return json.dumps(value)  # type: ignore[return-value]  # the mistake under test

    async with Publisher(transport, value_serializer=not_bytes, key_serializer=str.encode) as pub:
        with pytest.raises(SerializationError, match="returned a str, not bytes"):
            await pub.publish("s", {"a": 1}, key="k")
    assert not transport.delivered


# ------------------------------------------------------------------ logs


async def test_resends_are_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def silent_twice(transport: MemoryTransport, sent: Sent) -> None:
        if sent.published.message.value == b"late":
            return
        transport.no_responders(sent)

    transport = MemoryTransport(responder=silent_twice)
    caplog.set_level(logging.INFO, logger="liftbridge_nats")
    async with Publisher(transport, retry=True, retry_deadline=0.3, ack_timeout=0.1) as pub:
        results = await asyncio.gather(
            *(pub.publish("s", b"x") for _ in range(5)), pub.publish("s", b"late"),
            return_exceptions=True,
        )  # fmt: skip
    assert all(isinstance(r, NoRespondersError | AckTimeoutError) for r in results)
    resends = [r for r in caplog.records if r.name == "liftbridge_nats.publisher"]
    resends = [r for r in resends if "again" in r.getMessage()]
    assert len(resends) == 1 and resends[0].levelno == logging.WARNING
    assert pub.stats.resent > 5  # every message was re-sent, one line said so


async def test_junk_on_the_ack_inbox_is_logged_by_count_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = MemoryTransport(responder=auto_ack)
    caplog.set_level(logging.WARNING, logger="liftbridge_nats")
    async with Publisher(transport) as pub:
        for _ in range(50):
            transport.deliver(pub.ack_inbox, b"secret-token-in-junk")
        await pub.publish("s", b"x")
    (record,) = [r for r in caplog.records if r.name == "liftbridge_nats.acks"]
    text = record.getMessage()
    assert pub.ack_inbox in text and "1 malformed" in text
    assert "secret" not in text
    assert pub.stats.malformed == 50


async def test_an_outage_is_logged_once_and_the_reconnect_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = MemoryTransport(responder=auto_ack)
    caplog.set_level(logging.INFO, logger="liftbridge_nats")
    async with Publisher(transport) as pub:
        transport.disconnect()
        futures = [await pub.publish_async("s", b"x") for _ in range(10)]
        await asyncio.sleep(0.1)
        transport.reconnect()
        await asyncio.gather(*futures)
    lines = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "liftbridge_nats.publisher"
    ]
    outage = [line for line in lines if "disconnected" in line[1]]
    back = [line for line in lines if "connected again" in line[1]]
    assert len(outage) == 1 and outage[0][0] == logging.WARNING
    assert len(back) == 1 and back[0][0] == logging.INFO and "10 message(s)" in back[0][1]
