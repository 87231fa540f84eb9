"""OpenTelemetry tracing for publishing and reading, free when nobody traces.

``opentelemetry-api`` is optional (the ``otel`` extra) and imported on first use only.
Who pays what:

* not installed, or ``tracing=False``: :func:`publish_tracer` returns None and the
  publisher tests one attribute per message;
* installed but no SDK configured (the global tracer provider is still the API's proxy
  or no-op provider): the :class:`PublishTracer` exists but is inactive, which is the
  same single test per message. Whether an SDK was configured meanwhile is looked up
  again by :meth:`PublishTracer.refresh`, which the publisher calls where it already
  pauses (at start and every few hundred messages), never per message;
* SDK configured: one PRODUCER span per message (OpenTelemetry messaging semantic
  conventions), its context injected into the message headers with the global
  propagator (W3C ``traceparent``/``tracestate``, and baggage, by default); a header the
  caller set is never overwritten.

On the read side :func:`extract_context` (also ``Message.trace_context``; it lives in
:mod:`._trace_context`, with the lazy import of opentelemetry) recovers the producer's
context from the stored headers, and :func:`consumer_span` starts a CONSUMER
span linked to the producer's span (or, for a batch, to each message's producer span).
Extraction needs only the API, no SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ._errors import InvalidArgumentError
from ._messages import Message
from ._trace_context import (
    SCOPE,
    SETTER,
    Otel,
    extract_context,
    inject_context,
    otel_available,
    scope_version,
    sdk_configured,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ._messages import Ack

__all__ = [
    "SCOPE",
    "PublishTracer",
    "consumer_span",
    "error_type",
    "extract_context",
    "inject_context",
    "otel_available",
    "publish_tracer",
    "scope_version",
    "sdk_configured",
]

# OpenTelemetry messaging semantic conventions (v1.27+ names).
SYSTEM: Final = "messaging.system"
OPERATION_TYPE: Final = "messaging.operation.type"
OPERATION_NAME: Final = "messaging.operation.name"
DESTINATION: Final = "messaging.destination.name"
PARTITION: Final = "messaging.destination.partition.id"
MESSAGE_ID: Final = "messaging.message.id"
GROUP: Final = "messaging.consumer.group.name"
BATCH_COUNT: Final = "messaging.batch.message_count"
ERROR_TYPE: Final = "error.type"
# Liftbridge's own, in the system's namespace as the conventions ask.
LB_SUBJECT: Final = "messaging.liftbridge.subject"
LB_STREAM: Final = "messaging.liftbridge.stream"
LB_OFFSET: Final = "messaging.liftbridge.offset"
LIFTBRIDGE: Final = "liftbridge"


def error_type(exc: BaseException) -> str:
    """The ``error.type`` of an exception: its fully qualified class name."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


# ------------------------------------------------------------------ publishing


class PublishTracer:
    """The publisher's tracing: a PRODUCER span per message while :attr:`active`.

    ``provider``: a tracer provider of its own (tests, or a process with several); by
    default the global one, in which case the tracer is active only once an SDK is
    configured (see :meth:`refresh`).
    """

    __slots__ = ("_explicit", "_tracer", "active")

    def __init__(self, provider: TracerProvider | None = None) -> None:
        if not Otel.load():
            raise RuntimeError("opentelemetry-api is not installed")
        self._explicit = provider is not None
        self._tracer: Tracer = (
            provider.get_tracer(SCOPE, scope_version()) if provider is not None else Otel.tracer
        )
        self.active = False
        self.refresh()

    def refresh(self) -> bool:
        """Look again whether spans would be recorded (an SDK configured); cheap enough
        for every few hundred messages, not for every one."""
        self.active = self._explicit or sdk_configured()
        return self.active

    def start(
        self,
        subject: str,
        correlation_id: str,
        headers: Mapping[str, bytes] | None,
        *,
        stream: str | None = None,
        partition: int | None = None,
    ) -> tuple[Span, dict[str, bytes]]:
        """Start a message's PRODUCER span; return it and the headers to send (the
        caller's, plus the span's context).

        The destination is ``stream`` when the caller named one (the subject is then
        in ``messaging.liftbridge.subject``), else ``subject``; the stream that stored
        the message and its offset are added from the ack by :meth:`finish`.
        """
        # Only what the conventions require or recommend: the SDK copies and checks
        # every attribute of every span (the body size is opt-in there, so left out).
        attributes: dict[str, str] = {
            SYSTEM: LIFTBRIDGE,
            OPERATION_TYPE: "send",
            OPERATION_NAME: "publish",
            MESSAGE_ID: correlation_id,
        }
        if stream is None:
            destination = attributes[DESTINATION] = subject
        else:
            destination = attributes[DESTINATION] = stream
            attributes[LB_SUBJECT] = subject
        if partition is not None:
            attributes[PARTITION] = str(partition)
        trace = Otel.trace
        span = self._tracer.start_span(
            f"publish {destination}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        )
        carrier = dict(headers) if headers else {}
        Otel.propagate.inject(carrier, context=trace.set_span_in_context(span), setter=SETTER)
        return span, carrier

    @staticmethod
    def finish(span: Span, ack: Ack | None = None, error: BaseException | None = None) -> None:
        """End a PRODUCER span with the message's ack (offset, stream) or its error
        (a cancellation is marked ``cancelled``, as :meth:`finisher` does)."""
        if isinstance(error, asyncio.CancelledError):
            _record_cancelled(span)
        elif error is not None:
            _record_error(span, error)
        elif ack is not None:
            span.set_attribute(LB_OFFSET, ack.offset)
            span.set_attribute(LB_STREAM, ack.stream)
        span.end()

    @staticmethod
    def finisher(span: Span) -> Callable[[asyncio.Future[Any]], None]:
        """A done-callback for the message's ack future that ends ``span``."""

        def done(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                _record_cancelled(span)
                span.end()
                return
            exc = future.exception()
            PublishTracer.finish(span, future.result() if exc is None else None, exc)

        return done


def _record_cancelled(span: Span) -> None:
    span.set_attribute(ERROR_TYPE, "cancelled")
    span.set_status(Otel.trace.Status(Otel.trace.StatusCode.ERROR, "cancelled"))


def _record_error(span: Span, error: BaseException) -> None:
    trace = Otel.trace
    span.set_attribute(ERROR_TYPE, error_type(error))
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))


def publish_tracer(tracing: object) -> PublishTracer | None:
    """What the publisher's ``tracing`` argument asks for.

    ``True``: trace through the global tracer provider when ``opentelemetry-api`` is
    installed (None when it is not); ``False``: None; a ``TracerProvider``: trace
    through that one. Anything else is a TypeError.
    """
    if tracing is False:
        return None
    if tracing is True:
        return PublishTracer() if Otel.load() else None
    if Otel.load() and isinstance(tracing, Otel.trace.TracerProvider):
        return PublishTracer(tracing)
    raise TypeError(
        f"tracing must be True, False or an OpenTelemetry TracerProvider, got {tracing!r}"
    )


# ------------------------------------------------------------------ reading


@contextlib.contextmanager
def consumer_span(
    message: Message[Any, Any] | Sequence[Message[Any, Any]],
    *,
    tracer_provider: TracerProvider | None = None,
    group: str | None = None,
    child_of_producer: bool = False,
) -> Iterator[Span | None]:
    """Process ``message`` under a CONSUMER span linked to its producer's span.

    ::

        async for msg in subscription:
            with consumer_span(msg) as span:
                handle(msg)

        for tp, messages in (await consumer.getmany(timeout=1.0)).items():
            with consumer_span(messages, group=consumer.group_id):
                handle_batch(messages)

    The span (``process <stream>``) is current inside the block, carries the messaging
    attributes (stream, partition, offset, subject, ``group`` when given), links to the
    span that published the message when its headers carry one, and records an
    exception leaving the block. ``child_of_producer=True`` also makes the producer's
    span its parent (one trace from publish to processing) instead of the current span.

    Given a non-empty sequence of messages (a batch, as ``getmany`` returns), the one
    span links to every distinct producer span among them and carries
    ``messaging.batch.message_count`` (and the stream and partition when all share
    them); ``child_of_producer`` needs a single message.

    Yields None, and does nothing, when ``opentelemetry-api`` is not installed; yields
    a non-recording span, and does nothing else, when no SDK is configured.
    """
    batch: Sequence[Message[Any, Any]] | None = None
    if not isinstance(message, Message):
        batch = list(message)
        if not batch or not all(isinstance(m, Message) for m in batch):
            raise InvalidArgumentError(
                "consumer_span needs a Message or a non-empty sequence of them"
            )
        if child_of_producer:
            raise InvalidArgumentError(
                "child_of_producer=True needs a single message: a batch can only link "
                "to its producers"
            )
    if not Otel.load():
        yield None
        return
    trace = Otel.trace
    if tracer_provider is None and not sdk_configured():
        yield trace.INVALID_SPAN
        return
    tracer: Tracer = (
        tracer_provider.get_tracer(SCOPE, scope_version())
        if tracer_provider is not None
        else Otel.tracer
    )
    attributes: dict[str, str | int] = {
        SYSTEM: LIFTBRIDGE,
        OPERATION_TYPE: "process",
        OPERATION_NAME: "process",
    }
    producer = None
    if batch is None:
        assert isinstance(message, Message)
        producer = extract_context(message.headers)
        links = _links([producer])
        attributes[DESTINATION] = message.stream
        attributes[PARTITION] = str(message.partition)
        attributes[LB_OFFSET] = message.offset
        if message.subject:
            attributes[LB_SUBJECT] = message.subject
    else:
        links = _links(extract_context(m.headers) for m in batch)
        attributes[BATCH_COUNT] = len(batch)
        if len({m.stream for m in batch}) == 1:
            attributes[DESTINATION] = batch[0].stream
            if len({m.partition for m in batch}) == 1:
                attributes[PARTITION] = str(batch[0].partition)
    if group is not None:
        attributes[GROUP] = group
    stream = attributes.get(DESTINATION)
    with tracer.start_as_current_span(
        "process" if stream is None else f"process {stream}",
        context=producer if child_of_producer else None,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_attribute(ERROR_TYPE, error_type(exc))
            raise


def _links(contexts: Iterable[Context | None]) -> list[Any]:
    """A link to each distinct valid span context among ``contexts``."""
    trace = Otel.trace
    links = []
    seen = set()
    for ctx in contexts:
        if ctx is None:
            continue
        span_context = trace.get_current_span(ctx).get_span_context()
        key = (span_context.trace_id, span_context.span_id)
        if span_context.is_valid and key not in seen:
            seen.add(key)
            links.append(trace.Link(span_context))
    return links
