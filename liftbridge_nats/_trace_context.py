"""Trace context in message headers, and the optional opentelemetry modules.

``opentelemetry-api`` is optional (the ``otel`` extra) and imported on first use only
(:class:`Otel`). This module carries a span's context across Liftbridge: injected into
the headers a message is published with, extracted from the headers it is read back
with (``Message.trace_context``). It depends on nothing else of the package, so that
the message records can use it; spans themselves are :mod:`._tracing`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "SCOPE",
    "SETTER",
    "Otel",
    "extract_context",
    "inject_context",
    "otel_available",
    "scope_version",
    "sdk_configured",
]

SCOPE: Final = "liftbridge_nats"
"""The instrumentation scope (tracer and meter name) of the SDK."""


class Otel:
    """The opentelemetry modules, imported once on first use (None: not installed)."""

    loaded = False
    trace: Any = None
    propagate: Any = None
    baggage: Any = None
    tracer: Any = None  # a ProxyTracer of the global provider: follows a late SDK set-up

    @classmethod
    def load(cls) -> bool:
        """Import the modules on the first call; True when they are installed."""
        if not cls.loaded:
            cls.loaded = True
            try:
                from opentelemetry import baggage, propagate, trace
            except ImportError:
                return False
            cls.trace, cls.propagate, cls.baggage = trace, propagate, baggage
            cls.tracer = trace.get_tracer(SCOPE, scope_version())
        return cls.trace is not None


def scope_version() -> str:
    """The package version, as the instrumentation scope's version."""
    from . import __version__

    return __version__


def otel_available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    return Otel.load()


def sdk_configured() -> bool:
    """True when a real tracer provider (an SDK) is installed globally.

    Costs a function call and an environment lookup: call it once, not per message.
    """
    if not Otel.load():
        return False
    trace = Otel.trace
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


# ------------------------------------------------------------------ propagation


class _HeaderSetter:
    """Writes propagation fields into Liftbridge headers (str -> bytes), never replacing
    a header the caller set (names compared case-insensitively, as HTTP does)."""

    def set(self, carrier: MutableMapping[str, bytes], key: str, value: str) -> None:
        if key in carrier:
            return
        lowered = key.lower()
        if any(name.lower() == lowered for name in carrier):
            return
        carrier[key] = value.encode()


class _HeaderGetter:
    """Reads propagation fields from Liftbridge headers; undecodable values are ignored."""

    def get(self, carrier: Mapping[str, bytes | bytearray], key: str) -> list[str] | None:
        data = carrier.get(key)
        if data is None:
            lowered = key.lower()
            for name, value in carrier.items():
                if name.lower() == lowered:
                    data = value
                    break
            else:
                return None
        try:
            return [bytes(data).decode()]
        except (UnicodeDecodeError, TypeError):
            return None

    def keys(self, carrier: Mapping[str, bytes | bytearray]) -> list[str]:
        return list(carrier)


SETTER = _HeaderSetter()
_GETTER = _HeaderGetter()


def inject_context(
    headers: Mapping[str, bytes] | None = None, context: Context | None = None
) -> dict[str, bytes]:
    """Headers with the trace context of ``context`` (default: the current one) added.

    Returns a new dict (``headers`` is not changed). The global propagator decides the
    fields (W3C ``traceparent``, ``tracestate`` and ``baggage`` by default); a header
    already present under one of those names is kept as it is. Without
    ``opentelemetry-api``, or without an active span, the headers come back unchanged.
    """
    carrier = dict(headers) if headers else {}
    if Otel.load():
        Otel.propagate.inject(carrier, context=context, setter=SETTER)
    return carrier


def extract_context(headers: Mapping[str, bytes | bytearray] | None) -> Context | None:
    """The OpenTelemetry context carried in a message's headers, or None when they carry
    no valid span context and no baggage (or ``opentelemetry-api`` is not installed).

    Header values may be bytes or bytearray (a Spark row's ``headers`` column)."""
    if not headers or not Otel.load():
        return None
    # Most messages carry none: one pass over the names answers that for a tenth of
    # what the propagator's extract costs.
    fields = Otel.propagate.get_global_textmap().fields
    if not any(name in fields or name.lower() in fields for name in headers):
        return None
    ctx = Otel.propagate.extract(headers, getter=_GETTER)
    if Otel.trace.get_current_span(ctx).get_span_context().is_valid:
        return ctx  # type: ignore[no-any-return]
    if Otel.baggage.get_all(ctx):
        return ctx  # type: ignore[no-any-return]
    return None
