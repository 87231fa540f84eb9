"""OpenTelemetry trace context for Liftbridge messages (needs the ``otel`` extra).

A :class:`~liftbridge_nats.Publisher` traces by itself once an OpenTelemetry SDK is
configured: one PRODUCER span per message, its context in the message headers. This
module is the other end, and the manual way for anything that publishes otherwise::

    from liftbridge_nats.tracing import consumer_span, extract_context, inject_context

    headers = inject_context({"app": b"1"})          # traceparent/tracestate added
    ...
    async for msg in subscription:
        with consumer_span(msg, group="billing"):    # CONSUMER span linked to the producer
            handle(msg)

Every function is a no-op (returning None or the headers unchanged) when
``opentelemetry-api`` is not installed.
"""

from ._tracing import consumer_span, extract_context, inject_context

__all__ = ["consumer_span", "extract_context", "inject_context"]
