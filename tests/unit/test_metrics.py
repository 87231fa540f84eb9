"""Metrics through the OpenTelemetry SDK's in-memory reader (no servers).

The sources are small counter holders implementing the registry's ``metric_counts``
protocol, as the Publisher does; each test has a meter provider of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.util.types import AttributeValue

from liftbridge_nats._metrics import (
    ACK_LATENCY_BUCKETS,
    Metrics,
    PublishCounts,
    default_metrics,
    metrics_for,
)


@dataclass
class Counts:
    """A publisher's counters, as the registry reads them."""

    published: int = 0
    acked: int = 0
    resent: int = 0
    no_responders: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    inflight: int = 0
    buffered_bytes: int = 0

    def metric_counts(self) -> PublishCounts:
        return PublishCounts(
            self.published,
            self.acked,
            self.resent,
            self.no_responders,
            dict(self.failed),
            self.inflight,
            self.buffered_bytes,
        )


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[reader])
    yield provider
    provider.shutdown()


# (attributes, the value of a counter or gauge, or a histogram's point)
Point: TypeAlias = tuple[dict[str, AttributeValue], int | float | HistogramDataPoint]


def collect(reader: InMemoryMetricReader) -> dict[str, list[Point]]:
    """name -> [(attributes, value or histogram point)]"""
    data = reader.get_metrics_data()
    out: dict[str, list[Point]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "liftbridge_nats"
            for metric in scope.metrics:
                points = out.setdefault(metric.name, [])
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if isinstance(point, NumberDataPoint):
                        points.append((attributes, point.value))
                    else:
                        assert isinstance(point, HistogramDataPoint), point
                        points.append((attributes, point))
    return out


def only(points: list[Point]) -> int | float | HistogramDataPoint:
    (point,) = points
    assert point[0]["messaging.system"] == "liftbridge"
    return point[1]


def test_publisher_counters_are_read_from_the_sources(
    reader: InMemoryMetricReader, provider: MeterProvider
) -> None:
    metrics = Metrics(provider)
    a = Counts(published=10, acked=7, resent=2, no_responders=1, inflight=3, buffered_bytes=50)
    a.failed["liftbridge_nats.AckTimeoutError"] = 1
    b = Counts(published=5, acked=5)
    b.failed["liftbridge_nats.AckTimeoutError"] = 2
    b.failed["liftbridge_nats.MessageTooLargeError"] = 1
    metrics.register_publisher(a)
    metrics.register_publisher(b)
    seen = collect(reader)
    assert only(seen["messaging.client.sent.messages"]) == 15
    assert only(seen["liftbridge.publisher.acked"]) == 12
    assert only(seen["liftbridge.publisher.resent"]) == 2
    assert only(seen["liftbridge.publisher.no_responders"]) == 1
    assert only(seen["liftbridge.publisher.inflight"]) == 3
    assert only(seen["liftbridge.publisher.buffered"]) == 50
    failed = {attrs["error.type"]: value for attrs, value in seen["liftbridge.publisher.failed"]}
    assert failed == {
        "liftbridge_nats.AckTimeoutError": 3,
        "liftbridge_nats.MessageTooLargeError": 1,
    }
    # Counting goes on between collections: the next one sees the new totals.
    a.published += 100
    assert only(collect(reader)["messaging.client.sent.messages"]) == 115


def test_a_retired_publisher_keeps_its_counts_and_drops_its_gauges(
    reader: InMemoryMetricReader, provider: MeterProvider
) -> None:
    metrics = Metrics(provider)
    a = Counts(published=10, acked=9, inflight=4, buffered_bytes=8)
    a.failed["x.Error"] = 1
    metrics.register_publisher(a)
    assert only(collect(reader)["liftbridge.publisher.inflight"]) == 4
    metrics.retire_publisher(a)
    metrics.retire_publisher(a)  # twice is harmless: counted once
    del a
    seen = collect(reader)
    assert only(seen["messaging.client.sent.messages"]) == 10  # never goes down
    assert only(seen["liftbridge.publisher.acked"]) == 9
    assert only(seen["liftbridge.publisher.inflight"]) == 0
    assert only(seen["liftbridge.publisher.buffered"]) == 0
    assert [v for _, v in seen["liftbridge.publisher.failed"]] == [1]
    b = Counts(published=1)
    metrics.register_publisher(b)
    assert only(collect(reader)["messaging.client.sent.messages"]) == 11


def test_read_counters_per_stream_partition_and_group(
    reader: InMemoryMetricReader, provider: MeterProvider
) -> None:
    metrics = Metrics(provider)
    cell = metrics.read_cell("orders", 0)
    assert metrics.read_cell("orders", 0) is cell  # shared, survives resubscribes
    for size in (10, 20, 30):
        cell.messages += 1
        cell.bytes += size
    grouped = metrics.read_cell("orders", 1, "billing")
    grouped.messages += 2
    grouped.bytes += 4
    seen = collect(reader)
    messages = {
        (a["messaging.destination.name"], a["messaging.destination.partition.id"]): (
            a.get("messaging.consumer.group.name"),
            v,
        )
        for a, v in seen["messaging.client.consumed.messages"]
    }
    assert messages == {("orders", "0"): (None, 3), ("orders", "1"): ("billing", 2)}
    volume = {
        a["messaging.destination.partition.id"]: v
        for a, v in seen["liftbridge.client.consumed.bytes"]
    }
    assert volume == {"0": 60, "1": 4}


def test_ack_latency_histogram_and_its_sampling(
    reader: InMemoryMetricReader, provider: MeterProvider
) -> None:
    metrics = Metrics(provider)
    latency = metrics.ack_latency(min_interval=0.001)
    assert latency is not None
    # 1000 acks within 0.1 s: at most one per millisecond is recorded.
    for i in range(1000):
        now = 10.0 + i * 0.0001
        latency.observe(now, now - 0.002)
    (attrs, point) = collect(reader)["messaging.client.operation.duration"][0]
    assert isinstance(point, HistogramDataPoint)
    assert attrs == {
        "messaging.system": "liftbridge",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
    }
    assert 99 <= point.count <= 101
    sampled = point.count
    assert point.min == pytest.approx(0.002) and point.max == pytest.approx(0.002)
    assert tuple(point.explicit_bounds) == ACK_LATENCY_BUCKETS
    # Slow acks are all recorded.
    every = metrics.ack_latency(min_interval=0.001)
    assert every is not None
    for i in range(10):
        every.observe(20.0 + i, 20.0 + i - 0.5)
    (_, point) = collect(reader)["messaging.client.operation.duration"][0]
    assert isinstance(point, HistogramDataPoint)
    assert point.count == sampled + 10  # cumulative
    assert point.max == pytest.approx(0.5)


def test_the_global_registry_needs_an_sdk_for_the_histogram() -> None:
    code = """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from liftbridge_nats._metrics import default_metrics

        registry = default_metrics()
        assert registry is default_metrics() and registry.enabled
        assert registry.ack_latency() is None  # no SDK: the publisher skips it per ack
        registry.read_cell("s", 0).messages += 5
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        assert registry.ack_latency() is not None
        # Instruments made before the SDK existed report through it now.
        names = {
            m.name
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert "messaging.client.consumed.messages" in names, names
        """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


def test_metrics_argument(reader: InMemoryMetricReader, provider: MeterProvider) -> None:
    assert metrics_for(False) is None
    assert metrics_for(True) is default_metrics()
    registry = metrics_for(provider)
    assert registry is not None and registry is not default_metrics()
    # One registry per provider: instruments are registered once, and a client and a
    # publisher given the same provider add up in the same counters.
    assert metrics_for(provider) is registry
    registry.read_cell("orders", 0).messages += 1
    other = metrics_for(MeterProvider())
    assert other is not None and other is not registry
    assert {
        a["messaging.destination.name"]: v
        for a, v in collect(reader)["messaging.client.consumed.messages"]
    } == {"orders": 1}
    for wrong in (None, 1, "yes", object()):
        with pytest.raises(TypeError, match="metrics must be True, False or an OpenTelemetry"):
            metrics_for(wrong)


def test_metrics_argument_without_opentelemetry() -> None:
    code = """
        import sys
        sys.modules["opentelemetry"] = None  # as if not installed
        from liftbridge_nats._metrics import metrics_for

        assert metrics_for(True) is None and metrics_for(False) is None
        try:
            metrics_for(object())
        except TypeError:
            pass
        else:
            raise AssertionError("a non-provider was accepted")
        """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)
