"""OpenTelemetry metrics of publishers and readers, read from counters they keep anyway.

The hot paths add nothing for metrics: publishers and subscriptions already count what
they do (``Publisher.stats``), and the instruments here are *observable* ones whose
callbacks read those counters when the metric reader collects (every few seconds, on
the reader's own thread). Only the ack-latency histogram needs values from the hot
path; it is fed only while a real meter provider (an SDK) is configured, so without
one it costs the publisher one attribute test per ack, and with one at most a
thousand values a second (see :class:`AckLatency`).

Instruments (names follow the OpenTelemetry messaging conventions where one exists):

=========================================  ==================  ===========================
``messaging.client.sent.messages``          counter             messages handed to NATS
``liftbridge.publisher.acked``              counter             settled by a successful ack
``liftbridge.publisher.failed``             counter             failed, by ``error.type``
``liftbridge.publisher.resent``             counter             re-sends
``liftbridge.publisher.no_responders``      counter             NATS "no responders" reports
``liftbridge.publisher.inflight``           gauge               waiting for their ack
``liftbridge.publisher.buffered``           gauge (By)          bytes waiting for NATS
``messaging.client.operation.duration``     histogram (s)       publish to ack (sampled)
``messaging.client.consumed.messages``      counter             read, per stream/partition
``liftbridge.client.consumed.bytes``        counter (By)        message bytes read, likewise
=========================================  ==================  ===========================

Counters are cumulative for the process: a publisher that closes hands its final counts
to the registry (:meth:`Metrics.retire_publisher`), so the totals never go down.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard

from ._tracing import (
    DESTINATION,
    ERROR_TYPE,
    GROUP,
    LIFTBRIDGE,
    OPERATION_NAME,
    OPERATION_TYPE,
    PARTITION,
    SCOPE,
    SYSTEM,
    scope_version,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

__all__ = [
    "ACK_LATENCY_BUCKETS",
    "DEFAULT_LATENCY_INTERVAL",
    "AckLatency",
    "Metrics",
    "PublishCounts",
    "PublishSource",
    "ReadCell",
    "default_metrics",
    "metrics_for",
]

ACK_LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Histogram bucket bounds in seconds: acks take from a fraction of a millisecond
(LEADER, idle node) to seconds (ALL on a fresh replicated stream)."""

DEFAULT_LATENCY_INTERVAL: Final = 0.001
"""Record at most one ack latency per this many seconds (per publisher)."""

_BASE: Final[Mapping[str, str]] = {SYSTEM: LIFTBRIDGE}
_PUBLISH: Final[Mapping[str, str]] = {
    SYSTEM: LIFTBRIDGE,
    OPERATION_TYPE: "send",
    OPERATION_NAME: "publish",
}


class AckLatency:
    """Feeds the ack-latency histogram, at most once per ``min_interval`` seconds.

    Recording one value costs the OpenTelemetry SDK about as much CPU as publishing the
    message, or more (``otel.ack_latency`` of ``make bench-micro``, beside the client
    CPU per message in bench/RESULTS.md): a publisher recording every ack would spend
    half its time there. So below 1000 acks/s (the default interval) every ack is
    recorded, and above that a steady sample of them: the distribution stays true, only
    the histogram's count is not the number of acks (``liftbridge.publisher.acked`` is).
    """

    __slots__ = ("_next", "_record", "min_interval")

    def __init__(self, record: Callable[..., None], min_interval: float) -> None:
        self._record = record
        self._next = float("-inf")
        self.min_interval = min_interval

    def observe(self, now: float, sent: float) -> None:
        """An ack arrived at ``now`` for a message sent at ``sent`` (same clock,
        seconds)."""
        if now >= self._next:
            self._next = now + self.min_interval
            self._record(now - sent, _PUBLISH)


@dataclass(frozen=True, slots=True)
class PublishCounts:
    """What a publisher reports to the metrics registry (a snapshot of its counters)."""

    published: int = 0
    acked: int = 0
    resent: int = 0
    no_responders: int = 0
    failed: Mapping[str, int] = field(default_factory=dict)
    """Failed messages by ``error.type`` (see :func:`._tracing.error_type`)."""
    inflight: int = 0
    buffered_bytes: int = 0


class PublishSource(Protocol):
    """Anything that can report :class:`PublishCounts` (the Publisher)."""

    def metric_counts(self) -> PublishCounts:
        """A snapshot of the counters; called on the metric reader's thread."""
        ...


@dataclass(slots=True)
class ReadCell:
    """Counters of one (stream, partition[, group]) read by this process.

    ``messages`` counts the messages readers handed to their consumer (one that
    failed to deserialize included); ``bytes`` their size as the broker sent them (the
    encoded record: value, key, headers, subject...; no gRPC or HTTP/2 framing).
    Readers add in bulk, from the flow-control accounting they keep anyway: when
    their buffer drains, when they grant window back (every half window at most)
    and when their call ends. Cells live as long as the registry, so totals survive
    resubscribes.
    """

    messages: int = 0
    bytes: int = 0


class Metrics:
    """The instruments of one meter provider and the sources they read.

    ``meter_provider``: by default the global one (instruments are created through the
    API's proxy, so a provider configured later still gets them). Without
    ``opentelemetry-api`` everything here is a no-op.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        self._lock = threading.Lock()
        # By id: sources need not be hashable; entries vanish when a source is collected.
        self._publishers: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._retired = PublishCounts()
        self._cells: dict[tuple[str, int, str | None], ReadCell] = {}
        self._explicit = meter_provider is not None
        self._histogram: Any = None
        self._otel: Any = None
        try:
            from opentelemetry import metrics as otel_metrics
        except ImportError:
            return
        self._otel = otel_metrics
        if meter_provider is None:
            meter = otel_metrics.get_meter(SCOPE, scope_version())
        else:
            meter = meter_provider.get_meter(SCOPE, scope_version())
        self._create(meter)

    @property
    def enabled(self) -> bool:
        """True when ``opentelemetry-api`` is installed (instruments exist)."""
        return self._otel is not None

    # ------------------------------------------------------------------ sources

    def register_publisher(self, source: PublishSource) -> None:
        """Report ``source``'s counters until :meth:`retire_publisher` (held weakly)."""
        if self._otel is None:
            return
        with self._lock:
            self._publishers[id(source)] = source

    def retire_publisher(self, source: PublishSource) -> None:
        """Stop reading ``source``; keep its final counts in the process totals."""
        if self._otel is None:
            return
        with self._lock:
            if self._publishers.get(id(source)) is source:
                del self._publishers[id(source)]
                self._retired = _add(self._retired, source.metric_counts(), gauges=False)

    def read_cell(self, stream: str, partition: int, group: str | None = None) -> ReadCell:
        """The counters a reader of ``stream``/``partition`` adds to (shared by readers
        of the same partition and group)."""
        key = (stream, partition, group)
        cell = self._cells.get(key)
        if cell is None:
            with self._lock:
                cell = self._cells.setdefault(key, ReadCell())
        return cell

    def ack_latency(self, min_interval: float = DEFAULT_LATENCY_INTERVAL) -> AckLatency | None:
        """The ack-latency histogram's recorder, or None while no meter provider would
        keep the values (then the publisher skips the per-ack call altogether).

        Call it again now and then (not per ack) to notice a provider configured late.
        """
        if self._histogram is None or not (self._explicit or _sdk_meter_configured(self._otel)):
            return None
        return AckLatency(self._histogram.record, min_interval)

    # ------------------------------------------------------------------ instruments

    def _create(self, meter: Any) -> None:
        def counter(
            name: str, unit: str, description: str, read: Callable[[PublishCounts], int]
        ) -> None:
            def callback(_: CallbackOptions) -> Iterable[Observation]:
                return [self._otel.Observation(read(self._totals()), _BASE)]

            meter.create_observable_counter(name, [callback], unit, description)

        counter(
            "messaging.client.sent.messages",
            "{message}",
            "Messages handed to NATS by publishers (first sends).",
            lambda t: t.published,
        )
        counter(
            "liftbridge.publisher.acked",
            "{message}",
            "Messages settled by a successful ack.",
            lambda t: t.acked,
        )
        counter(
            "liftbridge.publisher.resent",
            "{message}",
            "Messages sent again (retry, resumed partition, reconnect).",
            lambda t: t.resent,
        )
        counter(
            "liftbridge.publisher.no_responders",
            "{message}",
            "Messages NATS reported nobody received (nothing stored).",
            lambda t: t.no_responders,
        )
        meter.create_observable_counter(
            "liftbridge.publisher.failed",
            [self._observe_failed],
            "{message}",
            "Messages that ended with an error, by error.type.",
        )
        meter.create_observable_gauge(
            "liftbridge.publisher.inflight",
            [lambda _: [self._otel.Observation(self._totals().inflight, _BASE)]],
            "{message}",
            "Messages published and waiting for their ack.",
        )
        meter.create_observable_gauge(
            "liftbridge.publisher.buffered",
            [lambda _: [self._otel.Observation(self._totals().buffered_bytes, _BASE)]],
            "By",
            "Bytes of messages waiting for NATS to (re)connect.",
        )
        self._histogram = meter.create_histogram(
            "messaging.client.operation.duration",
            "s",
            "Time from publish to ack.",
            explicit_bucket_boundaries_advisory=ACK_LATENCY_BUCKETS,
        )
        meter.create_observable_counter(
            "messaging.client.consumed.messages",
            [lambda _: self._observe_cells(lambda c: c.messages)],
            "{message}",
            "Messages delivered by subscriptions and consumers, per stream and partition.",
        )
        meter.create_observable_counter(
            "liftbridge.client.consumed.bytes",
            [lambda _: self._observe_cells(lambda c: c.bytes)],
            "By",
            "Bytes of the messages delivered by subscriptions and consumers (as the broker "
            "sent them), per stream and partition.",
        )

    def _totals(self) -> PublishCounts:
        with self._lock:
            live = list(self._publishers.values())
            totals = self._retired
        for source in live:
            totals = _add(totals, source.metric_counts(), gauges=True)
        return totals

    def _observe_failed(self, _: CallbackOptions) -> Iterable[Observation]:
        Observation = self._otel.Observation
        return [
            Observation(count, {SYSTEM: LIFTBRIDGE, ERROR_TYPE: name})
            for name, count in sorted(self._totals().failed.items())
        ]

    def _observe_cells(self, read: Callable[[ReadCell], int]) -> Iterable[Observation]:
        Observation = self._otel.Observation
        with self._lock:
            cells = list(self._cells.items())
        observations = []
        for (stream, partition, group), cell in cells:
            attributes = {SYSTEM: LIFTBRIDGE, DESTINATION: stream, PARTITION: str(partition)}
            if group is not None:
                attributes[GROUP] = group
            observations.append(Observation(read(cell), attributes))
        return observations


def _add(total: PublishCounts, counts: PublishCounts, *, gauges: bool) -> PublishCounts:
    """``total`` plus ``counts``; the gauges (in flight, buffered) only when ``gauges``:
    a retired publisher holds nothing any more."""
    failed = dict(total.failed)
    for name, count in counts.failed.items():
        failed[name] = failed.get(name, 0) + count
    return PublishCounts(
        total.published + counts.published,
        total.acked + counts.acked,
        total.resent + counts.resent,
        total.no_responders + counts.no_responders,
        failed,
        total.inflight + counts.inflight if gauges else total.inflight,
        total.buffered_bytes + counts.buffered_bytes if gauges else total.buffered_bytes,
    )


# The API exports no proxy class for meter providers (unlike tracer providers): these
# are the names of the ones that keep nothing.
_NOOP_METER_PROVIDERS: Final = frozenset(
    {"_ProxyMeterProvider", "ProxyMeterProvider", "NoOpMeterProvider", "_DefaultMeterProvider"}
)


def _sdk_meter_configured(otel_metrics: Any) -> bool:
    provider = otel_metrics.get_meter_provider()
    return type(provider).__name__ not in _NOOP_METER_PROVIDERS


_default: Metrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> Metrics:
    """The process's registry on the global meter provider (created on first use)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Metrics()
    return _default


# One registry per explicit meter provider: instruments are registered once per
# provider, and every client and publisher given that provider reports through them.
_by_provider: weakref.WeakKeyDictionary[Any, Metrics] = weakref.WeakKeyDictionary()


def metrics_for(setting: object) -> Metrics | None:
    """What a ``metrics`` argument (of a client or publisher) asks for.

    ``True``: the process's registry on the global meter provider, or None when
    ``opentelemetry-api`` is not installed (nothing would read the counters);
    ``False``: None; an OpenTelemetry ``MeterProvider``: that provider's registry
    (the same object for every caller giving the same provider). Anything else is a
    TypeError.
    """
    if setting is False:
        return None
    if setting is True:
        registry = default_metrics()
        return registry if registry.enabled else None
    if _is_meter_provider(setting):
        with _default_lock:
            found = _by_provider.get(setting)
            if found is None:
                found = _by_provider[setting] = Metrics(setting)
        return found
    raise TypeError(
        f"metrics must be True, False or an OpenTelemetry MeterProvider, got {setting!r}"
    )


def _is_meter_provider(obj: object) -> TypeGuard[MeterProvider]:
    try:
        from opentelemetry.metrics import MeterProvider as ApiMeterProvider
    except ImportError:
        return False
    return isinstance(obj, ApiMeterProvider)
