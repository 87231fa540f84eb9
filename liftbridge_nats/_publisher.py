"""The Publisher: Liftbridge messages straight onto NATS, acks matched by correlation id.

::

    async with Publisher(nc) as pub:                      # nc: a connected nats-py client
        ack = await pub.publish("orders", b"v", key=b"k")   # -> Ack (offset, partition, ...)
        fut = await pub.publish_async("orders", b"w")       # pipelined: await fut later
        acks = await pub.publish_batch("orders", [b"a", b"b"])

The names follow one rule, as on the gRPC :class:`~liftbridge_nats.Client`: ``publish``
takes a NATS subject, ``publish_to_stream`` a stream (with ``partition`` or
``partitioner``; it needs ``Publisher(nc, client=...)``), and the ``_async`` variants
return the ack's future instead of the ack (as nats-py JetStream's ``publish_async``).

How it fits together (the split follows aiokafka's producer): this module is the public
face; :mod:`._inflight` is the ledger of messages waiting for their ack (deadlines,
backpressure); :mod:`._acks` is the one subscription that receives acks; :mod:`._sender`
is the one background task, for messages that cannot go at once (NATS disconnected,
re-sends); :class:`~liftbridge_nats.wire.PublishEncoder` builds the envelopes;
:mod:`._checks` checks arguments. All of them reach NATS through one seam, a
:class:`~liftbridge_nats._transport.PublishTransport` (as httpx's client reaches the
network): over nats-py in production (its private parts confined to
:mod:`._natscompat`), in memory in unit tests. A started publisher holds them in one
session object, built whole by :meth:`Publisher.start`. The hot path of
``publish_async`` is one join of the envelope's pieces, one future, one tuple, one dict
entry and one append to nats-py's outgoing buffer: no timer, no task and no
``wait_for`` per message (one ``loop.call_at`` timer serves every deadline). When that
buffer is over nats-py's pending limit, messages wait in order in the sender's bounded
outbox, and the sender hands them to the same fast path as nats-py's flusher catches up.
``publish`` returns the ack's future itself (a :class:`~._inflight.PublishCall`); when
``max_inflight`` messages already wait for their ack, that call waits in the ledger's
queue (no task of its own) and the ledger sends it as acks free room. The ack is read
from its protobuf lazily.

Acks: Liftbridge acks a message on the inbox it carries; the first ack of a correlation
id settles its future. When several streams record the same subject each of them acks:
the later acks are counted in ``stats.acks_unmatched``. With the server's default
replication settings the first ALL acks on a new replicated stream can take seconds
(followers idle up to ``clustering.replica.max.idle.wait``, 10 s): give such publishes
an ``ack_timeout`` above that.

Delivery guarantees, in short:

* a returned :class:`~liftbridge_nats.Ack` means the server stored the message
  under the requested policy; an error means it was not acked: only
  :class:`~liftbridge_nats.NoRespondersError` and the rejections
  (``PublishRejectedError`` and its subclasses) mean it was certainly not stored;
* every publish ends by its deadline (``timeout``; by default ``ack_timeout``, or
  ``retry_deadline`` with ``retry=True``; counted from the call), with an ack or an
  error: also while it waits for room under ``max_inflight`` (it is then never sent),
  while NATS is disconnected (messages wait in a bounded buffer and are sent after
  the reconnect) and when nobody listens;
* with ``retry=True`` the same bytes (same correlation id) are sent again after a
  no-responders report or an ack timeout, until the deadline: at-least-once delivery
  (exactly-once with ``expected_offset`` on a stream with optimistic concurrency).

Plain NATS publishes (no envelope, ``nc.publish(subject, data)``) remain the way to make
existing subjects durable without changing their publishers: Liftbridge stores such a
message as a plain value with no key, no headers and no ack.
"""

from __future__ import annotations

# The public API takes `timeout=` arguments, as the rest of the SDK does.
import asyncio
import contextlib
import functools
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from ._acks import AckListener, AckStats, no_responders_exception
from ._checks import (
    check_correlation_id,
    check_headers,
    check_message,
    check_publisher_args,
    check_subject,
    is_subject_token,
)
from ._errors import (
    AckLostError,
    AckTimeoutError,
    InvalidArgumentError,
    LiftbridgeError,
    NotConnectedError,
    PublisherClosedError,
    PublishError,
    ReadonlyPartitionError,
    UnsentTimeoutError,
)
from ._inflight import (
    ATTEMPT,
    CID,
    DATA,
    FINAL,
    REPLY,
    SUBJECT,
    AckFuture,
    Flight,
    InflightLedger,
    future_factory,
    next_attempt,
)
from ._log import RateLimitedLog, get_logger
from ._messages import Ack, AckPolicy, K, V
from ._metrics import DEFAULT_LATENCY_INTERVAL, AckLatency, Metrics, PublishCounts, metrics_for
from ._partitioning import PartitionerLike, choose_partition, partition_subject
from ._sender import Outgoing, Sender
from ._tracing import PublishTracer, publish_tracer
from ._transport import FastPath, NatsTransport, PublishTransport, log_choice, too_large_error
from .serializers import serialize
from .wire import PublishEncoder, header_fields

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["FastPath", "PublishRecord", "Publisher", "PublisherStats"]

_log = get_logger("publisher")

DEFAULT_MAX_INFLIGHT = 16_384
DEFAULT_MAX_BUFFERED_BYTES = 32 * 1024 * 1024

_OPEN, _CLOSING, _CLOSED, _NEW = range(4)
# Enum members looked up once: on Python 3.11 every `AckPolicy.NONE` costs a
# descriptor call, and _prepare runs once per message.
_NO_ACK = AckPolicy.NONE
# A caller publishing in a tight loop never has to wait for anything, so nats-py's
# flusher and reader would run only once the ledger is full: the server would get the
# messages in bursts of max_inflight and the acks would come back the same way.
# Letting the event loop run once every 256 messages (before a message is prepared, so
# a cancellation there sends nothing) keeps the pipeline flowing. 256 is a tuning
# constant: `make bench` measures publish_async with it (bench/RESULTS.md).
_YIELD_MASK = 255
# Valid subjects are remembered (up to this many) so each is checked once; so are the
# checked and encoded headers of the key+headers path.
_SUBJECT_CACHE_LIMIT = 4096
_HEADERS_CACHE_LIMIT = 1024
# Resend back-off after a no-responders report (retry=True): 25 ms doubling to 500 ms.
_BACKOFF_FIRST = 0.025
_BACKOFF_MAX = 0.5
# How often a started publisher looks again whether an OpenTelemetry SDK was
# configured (tracing, ack latency) when it reports to the global providers: a timer,
# so that no message pays for the look.
_TELEMETRY_REFRESH = 1.0
# Re-sends are logged at most once per this many seconds (a fail-over re-sends in bulk).
_RESEND_LOG_INTERVAL = 10.0
_NEVER = float("inf")


def _collect(
    future: AckFuture, results: list[Any], first_error: BaseException | None
) -> BaseException | None:
    """Append a settled future's ack (or error) to ``results``; track the first error."""
    exc = future.exception()
    if exc is None:
        results.append(future.result())
        return first_error
    results.append(exc)
    return first_error or exc


def _unsent_error(flight: Flight) -> PublishError:
    """The error for a message still waiting for NATS when the publisher closed."""
    if flight[ATTEMPT] > 0:  # a re-send: an earlier copy went out
        return _ack_lost_error(flight)
    return PublisherClosedError(
        f"the publisher closed before the message for {flight[SUBJECT]!r} could be sent "
        "(NATS was disconnected); it was not sent",
        subject=flight[SUBJECT],
        correlation_id=flight[CID],
    )


def _ack_lost_error(flight: Flight) -> AckLostError:
    """The error for a message sent and still unacked when the publisher closed."""
    return AckLostError(
        f"the publisher closed before the ack for the message on {flight[SUBJECT]!r} "
        f"(correlation id {flight[CID]}) arrived; it may or may not have been stored. "
        "Close with a longer timeout to wait for acks, or check the partition before "
        "publishing it again.",
        subject=flight[SUBJECT],
        correlation_id=flight[CID],
    )


async def _wait_settled(futures: list[AckFuture], timeout: float | None) -> int:
    """Wait until every future is done or ``timeout`` passed; return how many are not.

    (``asyncio.wait`` refuses the futures :meth:`Publisher.publish` returns: they are
    coroutines too.)
    """
    pending = [f for f in futures if not f.done()]
    if not pending:
        return 0
    all_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = len(pending)

    def one_done(_: object) -> None:
        nonlocal left
        left -= 1
        if not left and not all_done.done():
            all_done.set_result(None)

    for future in pending:
        future.add_done_callback(one_done)
    try:
        await asyncio.wait([all_done], timeout=timeout)
    finally:
        for future in pending:
            future.remove_done_callback(one_done)
    return sum(1 for f in pending if not f.done())


async def _raising(exc: BaseException) -> Any:
    raise exc


# publish()'s arguments, serialized: subject, value, key, headers, ack policy,
# correlation id, expected offset, timeout.
_PublishArgs = tuple[
    str, Any, Any, Mapping[str, bytes] | None, AckPolicy, str | None, int | None, float | None
]


def _same(call: AckFuture) -> AckFuture:
    """The future a queued publish is sent with: the call returned to its caller."""
    return call


class _Queued:
    """A :meth:`Publisher.publish` call waiting in the ledger's queue for room (a
    :class:`~._inflight.QueuedPublish`): its arguments, the call its caller awaits, and
    the deadline of that call. Woken, it is sent at once; cancelled (the call), it is
    skipped; still waiting at its deadline, it fails, never sent. ``args`` is None once
    it no longer waits."""

    __slots__ = ("args", "call", "deadline", "owner")

    def __init__(
        self, call: AckFuture, owner: Publisher[Any, Any], args: _PublishArgs, deadline: float
    ) -> None:
        self.call = call
        self.owner = owner
        self.args: _PublishArgs | None = args
        self.deadline = deadline

    def done(self) -> bool:
        return self.args is None or self.call.done()

    def set_result(self, _: None, /) -> None:
        self.owner._submit_queued(self)

    def set_exception(self, exception: BaseException, /) -> None:
        # The publisher closed while it waited: raised where the call is awaited.
        self.args = None
        self.call.refuse(exception)

    def expire(self) -> None:
        self.owner._expire_queued(self)


def _not_started(*_: object) -> Any:
    raise PublisherClosedError("the publisher is not started: use `async with Publisher(nc)`")


@dataclass(frozen=True, slots=True)
class PublishRecord(Generic[V, K]):
    """One message of :meth:`Publisher.publish_batch` when it needs more than a value
    (``value`` and ``key`` of the publisher's serializers' input types, bytes without)."""

    value: V
    key: K | None = None
    headers: Mapping[str, bytes] | None = None
    correlation_id: str | None = None
    expected_offset: int | None = None


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Counters of a :class:`Publisher` since it started (a snapshot)."""

    published: int
    """Messages handed to NATS (first sends; re-sends are in ``resent``)."""
    acked: int
    """Messages settled by a successful ack."""
    rejected: int
    """Messages settled by an ack carrying an error."""
    timed_out: int
    """Messages that failed with AckTimeoutError (no ack by their deadline)."""
    no_responders: int
    """NATS reports that nobody received one of our messages (503)."""
    resent: int
    """Re-sends (retry=True, or publish_to_stream after resuming a paused partition)."""
    acks_unmatched: int
    """Acks for unknown correlation ids: late, duplicate (several streams on one
    subject), cancelled, or foreign."""
    malformed: int
    """Undecodable messages on the ack inbox."""
    foreign: int
    """Envelopes of other types and unexpected status messages on the ack inbox."""
    pending: int
    """Messages waiting for their ack now."""
    buffered: int
    """Messages waiting for NATS to reconnect now."""
    fast_path_sent: int = 0
    """Messages (and re-sends) appended straight to nats-py's outgoing buffer."""
    public_api_sent: int = 0
    """Messages (and re-sends) sent through nats-py's public ``publish``: all of them
    when the fast path is off, otherwise only those sent after a reconnect."""


class _Session:
    """Everything a started publisher works with, built whole by :meth:`Publisher.start`
    and torn down as one by :meth:`Publisher.close`."""

    __slots__ = (
        "closed",
        "encoder",
        "ledger",
        "listener",
        "loop",
        "queued",
        "refresh",
        "resumes",
        "sender",
        "timers",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ledger: InflightLedger,
        listener: AckListener,
        encoder: PublishEncoder,
        sender: Sender,
    ) -> None:
        self.loop = loop
        self.ledger = ledger
        self.listener = listener
        self.encoder = encoder
        self.sender = sender
        # Re-sends waiting for their back-off (retry after a no-responders report).
        self.timers: dict[str, asyncio.TimerHandle] = {}
        # Background resumes of paused partitions (publish_to_stream_async), by partition.
        self.resumes: dict[tuple[str, int], asyncio.Task[None]] = {}
        # Queued publishes the fast path refused once woken, sent the slow way.
        self.queued: set[asyncio.Task[None]] = set()
        # The telemetry refresh (see _TELEMETRY_REFRESH), when one is needed.
        self.refresh: asyncio.TimerHandle | None = None
        self.closed = asyncio.Event()


class _MetricSource:
    """What the metrics registry reads a publisher through (held weakly there, strongly
    by the publisher): the registry gets a snapshot of counters the publisher keeps
    anyway, on the metric reader's thread."""

    __slots__ = ("__weakref__", "_publisher")

    def __init__(self, publisher: Publisher[Any, Any]) -> None:
        self._publisher = publisher

    def metric_counts(self) -> PublishCounts:
        """The publisher's counters now (plain reads: no lock, no iteration)."""
        return self._publisher._metric_counts()


class Publisher(Generic[V, K]):
    """Publishes Liftbridge messages over a connected nats-py client and matches acks.

    ``ack_timeout`` is the default deadline of a publish (seconds). ``max_inflight``
    bounds the messages waiting for their ack: when it is reached ``publish_async``
    waits (backpressure). ``crc`` adds a CRC-32C to every envelope. ``client`` (a
    :class:`~liftbridge_nats.Client`) is needed only to publish to streams
    (:meth:`publish_to_stream`, :meth:`publish_to_stream_async`).

    ``retry``: send a message again (same bytes, same correlation id) after NATS reports
    that nobody received it, or after ``ack_timeout`` without an ack, until its deadline
    (``retry_deadline``, by default 3 x ``ack_timeout``). At-least-once: a message whose
    ack was lost can be stored twice, unless it carries ``expected_offset`` on a stream
    with optimistic concurrency control (then the copy is refused).

    ``no_responders`` sets a NATS reply subject on every message so that NATS reports at
    once a message nobody received (no stream, paused partition, fail-over in
    progress): :class:`NoRespondersError` instead of a wait for the deadline. Liftbridge
    stores the reply subject with the message (``Message.reply_subject``).

    ``max_buffered_bytes`` bounds the messages kept while NATS is disconnected; they are
    sent after the reconnect. ``resume_paused``: :meth:`publish_to_stream` resumes
    paused partitions (see there), :meth:`publish_to_stream_async` in the background.

    ``fast_path`` (default on; the environment variable ``LIFTBRIDGE_NATS_FAST_PATH=0``
    changes the default): messages go straight into nats-py's outgoing buffer and acks
    are read off the connection's incoming bytes (other frames still go to nats-py's
    parser, in order), without nats-py's per-message parsing, coroutine, message
    object, queue and task. This leans on nats-py internals, checked once here;
    when the client does not look as expected the publisher uses nats-py's public API
    (same bytes, same results, slower) and :attr:`fast_path` says why.
    ``fast_path=False`` always uses the public API.

    ``tracing`` (with the ``otel`` extra): a PRODUCER span per message, its context in
    the message's headers (W3C ``traceparent``; a header you set under that name is
    kept). ``True`` traces through the global tracer provider, and costs nothing until
    an OpenTelemetry SDK is configured (a publisher notices one configured after its
    start within a second); a ``TracerProvider`` traces through that one; ``False``
    never traces. ``metrics`` likewise: ``True`` reports the publisher's counters to
    the global meter provider, a ``MeterProvider`` to that one, ``False`` nowhere (see
    the Metrics section of the observability guide for the instruments).

    ``value_serializer`` / ``key_serializer``: callables turning the values (keys) you
    publish into bytes, applied before anything else happens (see
    :mod:`liftbridge_nats.serializers`); a value they refuse raises
    :class:`~liftbridge_nats.SerializationError` and nothing is sent. The
    publisher is generic in their input types: ``Publisher(nc,
    value_serializer=StringSerializer())`` is a ``Publisher[str, bytes]`` for mypy, and
    one without serializers a ``Publisher[bytes, bytes]``. A key of None stays None.

    ``nc`` may also be a transport (see :mod:`liftbridge_nats._transport`), as tests do.
    """

    def __init__(
        self,
        nc: Any,
        *,
        ack_timeout: float = 5.0,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        crc: bool = False,
        client: Any = None,
        retry: bool = False,
        retry_deadline: float | None = None,
        no_responders: bool = True,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        resume_paused: bool = True,
        fast_path: bool | None = None,
        tracing: bool | TracerProvider = True,
        metrics: bool | MeterProvider = True,
        value_serializer: Callable[[V], bytes] | None = None,
        key_serializer: Callable[[K], bytes] | None = None,
    ) -> None:
        check_publisher_args(
            nc,
            client,
            ack_timeout,
            retry_deadline,
            nc_is_transport=isinstance(nc, PublishTransport),
        )
        if not isinstance(ack_timeout, int | float) or not ack_timeout > 0:
            raise InvalidArgumentError(f"ack_timeout must be > 0 seconds, got {ack_timeout!r}")
        if not isinstance(max_inflight, int) or max_inflight < 1:
            raise InvalidArgumentError(f"max_inflight must be an int >= 1, got {max_inflight!r}")
        if retry_deadline is not None and not retry_deadline > 0:
            raise InvalidArgumentError(f"retry_deadline must be > 0, got {retry_deadline!r}")
        if not isinstance(max_buffered_bytes, int) or max_buffered_bytes < 0:
            raise InvalidArgumentError(
                f"max_buffered_bytes must be an int >= 0, got {max_buffered_bytes!r}"
            )
        for name, serializer in (
            ("value_serializer", value_serializer),
            ("key_serializer", key_serializer),
        ):
            if serializer is not None and not callable(serializer):
                raise TypeError(f"{name} must be a callable returning bytes, got {serializer!r}")
        # Both raise TypeError for a wrong argument now rather than at start().
        self._tracer = publish_tracer(tracing)
        self._metrics: Metrics | None = metrics_for(metrics)
        if isinstance(nc, PublishTransport):
            self._transport: PublishTransport = nc
        else:
            self._transport = NatsTransport(nc, fast_path=fast_path)
        self._ack_timeout = float(ack_timeout)
        self._max_inflight = max_inflight
        self._crc = crc
        self._client = client
        self._retry = retry
        self._retry_deadline = float(retry_deadline or 3 * ack_timeout)
        self._no_responders = no_responders
        self._max_buffered_bytes = max_buffered_bytes
        self._resume_paused = resume_paused
        self._state = _NEW
        self._session: _Session | None = None
        # Bound methods looked up once for the hot path (set by start()).
        self._encode: Callable[..., bytes] = _not_started
        self._encode_plain: Callable[[bytes, bytes, AckPolicy], bytes] = _not_started
        self._encode_keyed: Callable[..., bytes] = _not_started
        self._header_fields: dict[tuple[tuple[str, bytes], ...], bytes] = {}
        self._ledger_add: Callable[[AckFuture, bool], None] = _not_started
        self._must_wait: Callable[[], bool] = _not_started
        # The ledger's futures and room waiters, read without a call on the hot path.
        self._inflight: Mapping[str, AckFuture] = {}
        self._room_waiters: Sized = ()
        self._write: Callable[[str, bytes, bytes], bool] = _not_started
        self._defer: Callable[[AckFuture], bool] = _not_started
        self._discard: Callable[[str, AckFuture], None] = _not_started
        self._fast = False
        self._create_future: Callable[[], AckFuture] = _not_started
        self._create_call: Callable[[], AckFuture] = _not_started
        self._time: Callable[[], float] = _not_started
        self._reply_prefix = b""
        self._max_payload = 0
        # Correlation ids: a random prefix per publisher and a counter.
        self._cid_prefix = os.urandom(6).hex() + "-"
        self._cid_counter = itertools.count(1)
        self._valid_subjects: set[str] = set()
        # Messages waiting for NATS (the sender's own deque, set by start()).
        self._outbox: deque[Outgoing] = deque()
        self._routes: dict[str, tuple[str, int]] = {}
        # Partition subjects publish_to_stream_async sent to: (stream, partition).
        self._stream_subjects: dict[str, tuple[str, int]] = {}
        self._published = 0
        self._timed_out = 0
        self._resent = 0
        self._value_serializer = value_serializer
        self._key_serializer = key_serializer
        self._serializing = value_serializer is not None or key_serializer is not None
        # The tracer while it records spans, else None: the one test a message pays.
        self._trace: PublishTracer | None = None
        # Ack latency: the next message published at or after this time (monotonic) is
        # timed to its ack; never while no meter provider keeps the values.
        self._latency: AckLatency | None = None
        self._sample_at = _NEVER
        # Failed publishes by error.type, counted by the ack futures themselves.
        self._failed: dict[str, int] = {}
        self._metric_source = _MetricSource(self)
        self._resend_log = RateLimitedLog(_log, logging.WARNING, _RESEND_LOG_INTERVAL)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Publisher[V, K]:
        """Subscribe to the ack inbox and start the sender (``async with`` does this)."""
        if self._state == _OPEN:
            return self
        if self._state != _NEW:
            raise PublisherClosedError("this publisher was closed; create a new one")
        transport = self._transport
        if transport.closed:
            raise NotConnectedError("the NATS connection is closed; connect before publishing")
        loop = asyncio.get_running_loop()
        transport.bind(loop)
        ledger = InflightLedger(loop, max_inflight=self._max_inflight, on_expired=self._on_expired)
        listener = AckListener(transport, ledger, on_no_responders=self._on_no_responders)
        sender = Sender(
            transport,
            ledger,
            loop,
            max_buffered_bytes=self._max_buffered_bytes,
            is_open=lambda: self._state == _OPEN,
        )
        try:
            await listener.start()
        except BaseException:
            # Failed or cancelled: leave no subscription (and its nats-py task) behind.
            await listener.stop()
            self._state = _CLOSED
            raise
        session = _Session(
            loop, ledger, listener, PublishEncoder(listener.inbox, crc=self._crc), sender
        )
        self._session = session
        self._encode = session.encoder.encode
        self._encode_plain = session.encoder.encode_plain
        self._encode_keyed = session.encoder.encode_keyed
        self._ledger_add = ledger.add
        self._must_wait = ledger.must_wait
        self._inflight, self._room_waiters = ledger.live_views()
        self._write = transport.write
        self._defer = sender.defer
        self._discard = ledger.discard
        self._fast = bool(transport.fast_path)
        self._create_future = future_factory(loop, ledger.discard, call=False, failed=self._failed)
        self._create_call = future_factory(loop, ledger.discard, call=True, failed=self._failed)
        # asyncio's own loops read time.monotonic(): calling it directly spares a frame.
        self._time = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        self._reply_prefix = listener.reply_prefix.encode() if self._no_responders else b""
        self._max_payload = transport.max_payload
        self._outbox = sender.outbox
        sender.start()
        log_choice(transport.fast_path)
        if self._tracer is not None or self._metrics is not None:
            self._refresh_telemetry()
            session.refresh = loop.call_later(_TELEMETRY_REFRESH, self._on_refresh, session)
        if self._metrics is not None:
            self._metrics.register_publisher(self._metric_source)
        self._state = _OPEN
        return self

    def _refresh_telemetry(self) -> None:
        """Look whether spans and ack latencies would be kept now (an SDK configured)."""
        tracer = self._tracer
        if tracer is not None:
            self._trace = tracer if tracer.refresh() else None
        if self._metrics is not None:
            # The publisher samples by itself (see _sample_latency): record every value.
            latency = self._metrics.ack_latency(0.0)
            if latency is None:
                self._latency, self._sample_at = None, _NEVER
            elif self._latency is None:
                self._latency, self._sample_at = latency, 0.0

    def _on_refresh(self, session: _Session) -> None:
        if self._session is not session or self._state != _OPEN:
            return
        self._refresh_telemetry()
        session.refresh = session.loop.call_later(_TELEMETRY_REFRESH, self._on_refresh, session)

    async def __aenter__(self) -> Publisher[V, K]:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._state in (_CLOSING, _CLOSED)

    @property
    def fast_path(self) -> FastPath:
        """Whether this publisher uses the fast path to nats-py (true in a boolean
        context), and ``reason`` why not when it does not."""
        return self._transport.fast_path

    @property
    def pending(self) -> int:
        """Messages published and not yet settled (acked, failed, or timed out)."""
        return len(self._session.ledger) if self._session is not None else 0

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._live().listener.inbox

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the publisher's counters."""
        session = self._session
        ack = session.listener.stats if session is not None else AckStats()
        sender = session.sender if session is not None else None
        return PublisherStats(
            published=self._published,
            acked=ack.acks_matched - ack.acks_rejected,
            rejected=ack.acks_rejected,
            timed_out=self._timed_out,
            no_responders=ack.no_responders,
            resent=self._resent + (sender.resent if sender is not None else 0),
            acks_unmatched=ack.acks_unmatched,
            malformed=ack.malformed,
            foreign=ack.foreign,
            pending=self.pending,
            buffered=sender.waiting() if sender is not None else 0,
            fast_path_sent=self._transport.fast_sent,
            public_api_sent=self._transport.public_sent,
        )

    def _metric_counts(self) -> PublishCounts:
        """The counters the metrics report: plain reads, safe from the metric reader's
        thread (the dict copy is one C call)."""
        session = self._session
        if session is None:
            return PublishCounts(published=self._published, resent=self._resent)
        ack = session.listener.stats
        return PublishCounts(
            published=self._published,
            acked=ack.acks_matched - ack.acks_rejected,
            resent=self._resent + session.sender.resent,
            no_responders=ack.no_responders,
            failed=self._failed.copy(),
            inflight=len(session.ledger),
            buffered_bytes=session.sender.buffered_bytes,
        )

    async def close(self, timeout: float | None = None) -> None:
        """Stop publishing; wait for outstanding acks, then fail what is left.

        New publishes raise :class:`PublisherClosedError` at once. Messages still
        waiting for their ack get up to ``timeout`` seconds (default: ``ack_timeout``)
        to be acked; after that their futures fail with :class:`AckLostError` (they may
        or may not have been stored), and those still waiting for NATS to reconnect, never
        sent, with :class:`PublisherClosedError`. The ack subscription, the sender task
        and every timer are gone when this returns. Idempotent; concurrent calls wait
        for the first one.
        """
        session = self._session
        if self._state == _CLOSED or session is None:
            self._state = _CLOSED
            return
        if self._state == _CLOSING:
            await session.closed.wait()
            return
        self._state = _CLOSING
        ledger = session.ledger
        ledger.reject_waiters()
        wait = self._ack_timeout if timeout is None else max(0.0, timeout)
        try:
            futures = ledger.futures()
            if futures and wait > 0:
                await _wait_settled(futures, wait)
        finally:
            await self._teardown(session)

    async def _teardown(self, session: _Session) -> None:
        ledger = session.ledger
        ledger.close()
        for timer in session.timers.values():
            timer.cancel()
        session.timers.clear()
        if session.refresh is not None:
            session.refresh.cancel()
            session.refresh = None
        tasks = [*session.resumes.values(), *session.queued]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # First what never left (it fails as not sent), then what went out unacked.
        await session.sender.stop(_unsent_error)
        for future in ledger.drain():
            if not future.done():
                future.set_exception(_ack_lost_error(future.flight))
        await session.listener.stop()
        if self._metrics is not None:
            # Its final counts stay in the process totals.
            self._metrics.retire_publisher(self._metric_source)
        self._state = _CLOSED
        session.closed.set()

    # ------------------------------------------------------------------ publishing

    def publish(
        self,
        subject: str,
        value: V,
        *,
        key: K | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
    ) -> Coroutine[Any, Any, Ack | None]:
        """Publish one message and wait for its ack (None for ``AckPolicy.NONE``).

        Use as ``ack = await pub.publish(...)``, in ``asyncio.gather``, or in a task.
        The message goes out when ``publish`` is called, or, when it must wait for room
        in ``max_inflight``, as soon as acks free room (in call order, whether or not the
        awaitable was awaited yet); the awaitable returned gives its ack. ``expected_offset``
        asks a stream with optimistic concurrency control to store the message only at
        that offset (:class:`IncorrectOffsetError` otherwise). ``timeout`` (default:
        the publisher's ``ack_timeout``, or ``retry_deadline`` with ``retry=True``)
        bounds the whole call, from the moment ``publish`` is called: a wait for room
        uses it up, and a message still waiting at its deadline is never sent. Raises
        (when awaited) :class:`AckTimeoutError` when no ack came (the message may or may
        not be stored; when it timed out before it could be sent, the error says so and
        its ``maybe_stored`` is false), :class:`NoRespondersError` when nobody listens
        on ``subject``, a
        :class:`PublishRejectedError` subclass when the server refused the message
        (:class:`MaxBytesExceededError` for one over the server's size limit),
        :class:`MaxPayloadExceededError` before sending a message larger than the NATS
        connection takes (catch both with :class:`MessageTooLargeError`),
        :class:`~liftbridge_nats.SerializationError` before sending a value or key the
        publisher's serializers refuse. Cancelling the call forgets the message (it may
        still be stored).
        """
        # The common case returns the ack's future itself (it is also a coroutine): no
        # coroutine frame and, in asyncio.gather, no task per message.
        try:
            if self._serializing:
                value, key = self._serialize(subject, value, key)
            future = self._submit_now(
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                self._create_call,
            )
        except Exception as exc:
            return _raising(exc)  # errors surface where the call is awaited, as before
        if future is not None:
            return future  # type: ignore[return-value]  # made by _create_call
        if self._fast and self._state == _OPEN:
            # No room in the ledger (only that stops the fast path here, or waiters are
            # ahead): wait in its queue as a PublishCall, sent when room frees. Its
            # deadline runs from now: the timeout bounds the whole call.
            try:
                deadline = self._time() + self._budget(timeout)
            except InvalidArgumentError as exc:
                return _raising(exc)
            call: Any = self._create_call()
            self._live().ledger.enqueue(
                _Queued(
                    call,
                    self,
                    (
                        subject,
                        value,
                        key,
                        headers,
                        ack_policy,
                        correlation_id,
                        expected_offset,
                        timeout,
                    ),
                    deadline,
                )
            )
            return call  # type: ignore[no-any-return]
        # The slow way runs when the coroutine is first awaited, which may be long after
        # this call: its deadline is fixed here, as the queued fast path's is above.
        try:
            deadline = self._time() + self._budget(timeout)
        except Exception as exc:  # not started, or a bad timeout: raised when awaited
            return _raising(exc)
        return self._publish_waiting(
            subject,
            value,
            key,
            headers,
            ack_policy,
            correlation_id,
            expected_offset,
            timeout,
            deadline=deadline,
        )

    def _submit_queued(self, queued: _Queued) -> None:
        """Send a publish that waited in the ledger's queue, now that it has room.

        Runs from the ledger (in an ack handler, the deadline timer, or a cancel);
        whatever goes wrong settles the call, never the caller of the ledger.
        """
        call, args = queued.call, queued.args
        queued.args = None  # no longer waiting (its deadline's mark is dead now)
        if args is None or call.done():  # cancelled while it waited: forgotten
            return
        left = queued.deadline - self._time()
        if left <= 0:  # due, and woken before the timer ran
            self._fail_unsent(call, args[0], args[5])
            return
        # Sent with the rest of the call's time as its timeout: the deadline stays.
        args = (*args[:7], left)
        try:
            sent = self._submit_now(*args, functools.partial(_same, call), queued=True)
        except Exception as exc:
            call.refuse(exc)  # an argument refused, raised where the call is awaited
            return
        if sent is None:
            # The fast path refused it after all (NATS disconnected and the reconnect
            # buffer full): the slow way, in a task of the publisher's.
            session = self._live()
            task = session.loop.create_task(self._send_queued(call, args))
            session.queued.add(task)
            task.add_done_callback(session.queued.discard)

    def _expire_queued(self, queued: _Queued) -> None:
        """Ledger callback: a queued publish still waited for room at its deadline."""
        call, args = queued.call, queued.args
        queued.args = None
        if args is not None and not call.done():
            self._fail_unsent(call, args[0], args[5])

    def _fail_unsent(self, future: AckFuture, subject: str, correlation_id: str | None) -> None:
        """Fail a publish whose deadline passed before it could be sent."""
        self._timed_out += 1
        future.set_exception(
            UnsentTimeoutError(
                f"the message for {subject!r} waited for room until the deadline its timeout "
                f"set at the call: {self._max_inflight} messages (max_inflight) already "
                "waited for their acks. It was never sent, so it was not stored, and "
                "publishing it again is safe. Give it a longer timeout, raise max_inflight, "
                "or publish fewer messages at once.",
                subject=subject,
                correlation_id=correlation_id,
            )
        )

    def _budget(self, timeout: float | None) -> float:
        """The seconds a publish has from its call to its end (``timeout`` checked)."""
        if timeout is None:
            return self._retry_deadline if self._retry else self._ack_timeout
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}")
        return float(timeout)

    async def _send_queued(self, call: AckFuture, args: _PublishArgs) -> None:
        try:
            await self._submit_waiting(*args, make=functools.partial(_same, call))
        except Exception as exc:
            call.refuse(exc)  # as publish() raises what it meets at once
        except asyncio.CancelledError:
            call.refuse(self._closed_error())
            raise

    async def _publish_waiting(
        self,
        subject: str,
        value: Any,
        key: Any,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        correlation_id: str | None,
        expected_offset: int | None,
        timeout: float | None,
        traced: bool = False,
        *,
        deadline: float | None = None,
    ) -> Ack | None:
        future = await self._submit_waiting(
            subject,
            value,
            key,
            headers,
            ack_policy,
            correlation_id,
            expected_offset,
            timeout,
            traced,
            deadline=deadline,
        )
        # Cancelling this wait cancels the future, which forgets the message.
        return await future

    def _serialize(self, subject: str, value: Any, key: Any) -> tuple[Any, Any]:
        """The value and key as the serializers make them (SerializationError when one
        refuses); a key of None stays None."""
        if self._value_serializer is not None:
            value = serialize(self._value_serializer, value, subject=subject)
        if key is not None and self._key_serializer is not None:
            key = serialize(self._key_serializer, key, what="key", subject=subject)
        return value, key

    async def publish_async(
        self,
        subject: str,
        value: V,
        *,
        key: K | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
    ) -> AckFuture:
        """Publish one message and return the future of its ack at once.

        The call awaits for backpressure (``max_inflight`` messages already wait for
        their ack), while NATS is disconnected and the reconnect buffer is full, and
        once every 256 messages to let the event loop run (nats-py writes and reads).
        The future gives what :meth:`publish` would return or raise, within the same
        deadline, counted from this call: when no room freed by then, the call returns
        a future already failed with :class:`AckTimeoutError` (the message was never
        sent; ``maybe_stored`` is false). Arguments are
        checked before anything is sent (:class:`InvalidArgumentError`,
        :class:`MaxPayloadExceededError`, :class:`~liftbridge_nats.SerializationError`).
        """
        if not self._published & _YIELD_MASK:
            await asyncio.sleep(0)
        if self._serializing:
            value, key = self._serialize(subject, value, key)
        return self._submit_now(
            subject,
            value,
            key,
            headers,
            ack_policy,
            correlation_id,
            expected_offset,
            timeout,
            self._create_future,
        ) or await self._submit_waiting(
            subject, value, key, headers, ack_policy, correlation_id, expected_offset, timeout
        )

    async def publish_batch(
        self,
        subject: str,
        items: Iterable[V | PublishRecord[V, K]],
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Publish many messages pipelined and return their acks, in order.

        ``items`` are values or :class:`PublishRecord`. Every message is given the
        chance to be acked; then the first error is raised, unless
        ``return_exceptions`` puts errors in the list in place of their acks.
        """
        submitted: deque[AckFuture] = deque()
        results: list[Any] = []
        first_error: BaseException | None = None
        publish_async = self.publish_async
        try:
            for item in items:
                if isinstance(item, PublishRecord):
                    future = await publish_async(
                        subject,
                        item.value,
                        key=item.key,
                        headers=item.headers,
                        ack_policy=ack_policy,
                        correlation_id=item.correlation_id,
                        expected_offset=item.expected_offset,
                        timeout=timeout,
                    )
                else:
                    future = await publish_async(
                        subject, item, ack_policy=ack_policy, timeout=timeout
                    )
                submitted.append(future)
                # Collect settled messages as we go: their futures need not stay alive.
                while submitted[0].done():
                    first_error = _collect(submitted.popleft(), results, first_error)
                    if not submitted:
                        break
            while submitted:
                future = submitted[0]
                if not future.done():
                    with contextlib.suppress(Exception):  # errors are collected below
                        await future
                first_error = _collect(submitted.popleft(), results, first_error)
        except BaseException:
            for future in submitted:
                future.cancel()  # forgets its message
            raise
        if first_error is not None and not return_exceptions:
            raise first_error
        return results

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message published so far is settled (acked or failed).

        Errors stay with the messages' futures. Raises :class:`AckTimeoutError` when
        some are still pending after ``timeout`` seconds (default: wait for them all;
        each ends by its own deadline anyway).
        """
        ledger = self._live().ledger
        futures = ledger.futures()
        futures.extend(f for f, _ in self._outbox if not f.done())
        # publish() calls waiting for room were published too: they go out on their own.
        futures.extend(w.call for w in ledger.queued() if isinstance(w, _Queued) and not w.done())
        if not futures:
            return
        pending = await _wait_settled(futures, timeout)
        if pending:
            raise AckTimeoutError(f"{pending} message(s) still wait for their ack after {timeout}s")

    # ------------------------------------------------------------------ hot path

    def _submit_now(
        self,
        subject: str,
        value: Any,
        key: Any,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        correlation_id: str | None,
        expected_offset: int | None,
        timeout: float | None,
        make: Callable[[], AckFuture],
        traced: bool = False,
        queued: bool = False,
    ) -> AckFuture | None:
        """Publish one message without awaiting anything and return its future; None
        (and nothing done) when that is not possible: no room in the ledger, the fast
        path off, or the reconnect buffer full.

        ``value`` and ``key`` are bytes once serialized (the checks refuse anything
        else); ``traced``: the caller started the message's span (publish_to_stream);
        ``queued``: the ledger woke this message from its queue (it has room, whoever
        still waits behind it).
        """
        if (
            (len(self._inflight) >= self._max_inflight or self._room_waiters) and not queued
        ) or not self._fast:
            return None
        if correlation_id is None and expected_offset is None and timeout is None:
            future = self._prepare_fast(subject, value, key, headers, ack_policy, make)
        else:
            future = self._prepare(
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                make,
                traced,
            )
        flight = future.flight
        if (
            flight[DATA]  # empty: already sent (see _prepare)
            and (self._outbox or not self._write(subject, flight[REPLY], flight[DATA]))
            and not self._defer(future)
        ):
            # Neither sent nor queued: undone, for the caller to await _submit_waiting.
            # (A span started for it is never ended, so never exported: the message
            # gets its one span when it is prepared again.)
            self._discard(flight[CID], future)
            return None
        self._published += 1
        if flight[ATTEMPT] < 0:  # AckPolicy.NONE: done once handed to NATS
            future.set_result(None)
        return future

    async def _submit_waiting(
        self,
        subject: str,
        value: Any,
        key: Any,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        correlation_id: str | None,
        expected_offset: int | None,
        timeout: float | None,
        traced: bool = False,
        make: Callable[[], AckFuture] | None = None,
        *,
        deadline: float | None = None,
    ) -> AckFuture:
        """:meth:`_submit_now` for when something must be awaited first or instead.

        A wait for room counts against the publish's time: its deadline runs from
        ``deadline`` (the call's, loop time) or else from here, and a message that found
        no room by then fails, never sent, in the future returned.
        """
        if make is None:
            make = self._create_future
        if deadline is not None or self._must_wait():
            final = self._time() + self._budget(timeout) if deadline is None else deadline
            if self._must_wait():
                with contextlib.suppress(TimeoutError):  # then no time is left, below
                    await self._wait_for_room(final)
            left = final - self._time()
            if left <= 0:
                future = make()
                self._fail_unsent(future, subject, correlation_id)
                return future
            timeout = left  # the rest of the call's time
        if correlation_id is None and expected_offset is None and timeout is None:
            future = self._prepare_fast(subject, value, key, headers, ack_policy, make)
        else:
            future = self._prepare(
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                make,
                traced,
            )
        flight = future.flight
        if flight[DATA] and (self._outbox or not self._write(subject, flight[REPLY], flight[DATA])):
            await self._live().sender.send(future)
        self._published += 1
        if flight[ATTEMPT] < 0:
            future.set_result(None)
        return future

    async def _wait_for_room(self, deadline: float) -> None:
        """Wait for room in the ledger until ``deadline`` (loop time; TimeoutError)."""
        async with asyncio.timeout_at(deadline):
            await self._live().ledger.wait_for_room()
        self._check_open()

    def _prepare_fast(
        self,
        subject: str,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        make: Callable[[], AckFuture],
    ) -> AckFuture:
        """:meth:`_prepare` for the common messages: a value, perhaps a key and headers,
        and no correlation id, expected offset or timeout of their own (anything unusual
        goes to _prepare). Headers are checked and encoded once per distinct set. Sent
        at once as by _prepare."""
        if self._state != _OPEN:
            self._check_open()
        if (
            type(value) is not bytes
            or type(ack_policy) is not AckPolicy
            or ack_policy is _NO_ACK
            or subject not in self._valid_subjects
            or self._trace is not None
        ):
            return self._prepare(subject, value, key, headers, ack_policy, None, None, None, make)
        fields: bytes | None = None
        if key is not None or headers is not None:
            if (
                not value
                or (key is not None and type(key) is not bytes)
                or (headers is not None and type(headers) is not dict)
                or self._crc
            ):
                return self._prepare(
                    subject, value, key, headers, ack_policy, None, None, None, make
                )
            fields = b""
            if headers:
                items = tuple(headers.items())
                try:
                    fields = self._header_fields.get(items)
                except TypeError:  # an unhashable value: no bytes, refused by _prepare
                    return self._prepare(
                        subject, value, key, headers, ack_policy, None, None, None, make
                    )
                if fields is None:
                    fields = self._remember_headers(items, headers)
        cid = f"{self._cid_prefix}{next(self._cid_counter)}"
        cid_bytes = cid.encode()
        if fields is None:
            data = self._encode_plain(value, cid_bytes, ack_policy)
        else:
            data = self._encode_keyed(value, cid_bytes, key, fields, ack_policy)
        if len(data) > self._max_payload:
            raise too_large_error(subject, cid, len(data), self._max_payload)
        reply = self._reply_prefix + cid_bytes if self._reply_prefix else b""
        now = self._time()
        deadline = now + self._ack_timeout
        if self._retry:
            final = now + self._retry_deadline
        else:
            final = deadline
            if not self._outbox and self._write(subject, reply, data):
                data = reply = b""  # sent (see _prepare)
        future = make()
        future.flight = (cid, subject, data, deadline, reply, final, 0)
        if now >= self._sample_at:
            self._sample_latency(future, now)
        self._ledger_add(future, True)
        return future

    def _remember_headers(
        self, items: tuple[tuple[str, bytes], ...], headers: Mapping[str, bytes]
    ) -> bytes:
        check_headers(headers)
        if len(self._header_fields) >= _HEADERS_CACHE_LIMIT:
            self._header_fields.clear()
        fields = self._header_fields[items] = header_fields(headers)
        return fields

    def _prepare(
        self,
        subject: str,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, bytes] | None,
        ack_policy: AckPolicy,
        correlation_id: str | None,
        expected_offset: int | None,
        timeout: float | None,
        make: Callable[[], AckFuture],
        traced: bool = False,
    ) -> AckFuture:
        """Check, encode and (unless AckPolicy.NONE) enter a message in the ledger; its
        future carries its flight. Unless re-sends are on (or it is AckPolicy.NONE, never
        sent again anyway), the message is also handed to the fast path here when it
        takes it: its flight then carries no bytes (``flight[DATA]`` and
        ``flight[REPLY]`` are empty).

        While tracing, the message's PRODUCER span starts here (unless ``traced``: the
        caller started it), its context goes into the headers, and the span ends with
        the ack's future (offset or error).
        """
        if self._state != _OPEN:
            self._check_open()
        if subject not in self._valid_subjects:
            self._check_subject(subject)
        if (
            type(value) is not bytes
            or key is not None
            or headers is not None
            or expected_offset is not None
            or timeout is not None
            or type(ack_policy) is not AckPolicy
        ):
            value = check_message(value, key, headers, ack_policy, expected_offset, timeout)
        if correlation_id is None:
            cid = self._cid_prefix + str(next(self._cid_counter))
            reply = self._reply_prefix + cid.encode() if self._reply_prefix else b""
        else:
            cid = check_correlation_id(correlation_id)
            if cid in self._live().ledger:
                raise InvalidArgumentError(
                    f"correlation id {cid!r} is already in flight; ids must be unique"
                )
            # A caller's id that is no subject token cannot end a reply subject.
            reply = (
                self._reply_prefix + cid.encode()
                if self._reply_prefix and is_subject_token(cid)
                else b""
            )
        span: Span | None = None
        if self._trace is not None and not traced:
            span, headers = self._trace.start(subject, cid, headers)
        try:
            data = self._encode(value, cid.encode(), key, headers, ack_policy, expected_offset)
            if len(data) > self._max_payload:
                raise too_large_error(subject, cid, len(data), self._max_payload)
        except BaseException as exc:
            if span is not None:
                PublishTracer.finish(span, error=exc)
            raise
        future = make()
        if span is not None:
            future.add_done_callback(PublishTracer.finisher(span))
        if ack_policy is _NO_ACK:
            if not self._outbox and self._write(subject, b"", data):
                data = b""  # sent, and never sent again
            future.flight = (cid, subject, data, 0.0, b"", 0.0, -1)
            return future
        now = self._time()
        if now >= self._sample_at:
            self._sample_latency(future, now)
        if timeout is None:
            if self._retry:
                final = now + self._retry_deadline
                deadline = now + self._ack_timeout
            else:
                final = deadline = now + self._ack_timeout
        else:
            final = now + timeout
            deadline = min(final, now + self._ack_timeout) if self._retry else final
        if not self._retry and not self._outbox and self._write(subject, reply, data):
            # Sent. Keeping the bytes until the ack (a round trip, thousands of messages
            # later) would only keep cold memory busy.
            data = reply = b""
        future.flight = (cid, subject, data, deadline, reply, final, 0)
        self._ledger_add(future, timeout is None)
        return future

    def _sample_latency(self, future: AckFuture, sent: float) -> None:
        """Time this message to its ack: at most one message per interval is timed,
        since recording a value costs the SDK about as much as publishing a message (see
        AckLatency)."""
        self._sample_at = sent + DEFAULT_LATENCY_INTERVAL
        future.add_done_callback(functools.partial(self._record_latency, sent))

    def _record_latency(self, sent: float, future: AckFuture) -> None:
        latency = self._latency
        if latency is not None and not future.cancelled() and future.exception() is None:
            latency.observe(self._time(), sent)

    def _resend(self, future: AckFuture) -> None:
        self._live().sender.resend(future)

    # ------------------------------------------------------------------ settling

    def _on_expired(self, future: AckFuture) -> None:
        """Ledger callback: a message's attempt deadline passed without an ack."""
        if future.done():
            return
        flight = future.flight
        now = self._time()
        if self._retry and now < flight[FINAL] and self._state == _OPEN:
            again = next_attempt(flight, now + self._ack_timeout)
            future.flight = again
            self._live().ledger.add(future, False)
            self._resend(future)
            self._resend_log.log(
                "no ack for a message on %r within ack_timeout (%.3g s): sent again "
                "(attempt %d, correlation id %s)",
                flight[SUBJECT],
                self._ack_timeout,
                again[ATTEMPT] + 1,
                flight[CID],
            )
            return
        self._timed_out += 1
        future.set_exception(
            AckTimeoutError(
                f"no ack for the message published on {flight[SUBJECT]!r} (correlation id "
                f"{flight[CID]}) before its deadline: no stream may be attached to the "
                "subject, or its partition may be readonly, paused or without a leader. The "
                "message may or may not have been stored. Check the stream (publish_to_stream "
                "names readonly partitions and resumes paused ones), raise the timeout, or "
                "publish again.",
                subject=flight[SUBJECT],
                correlation_id=flight[CID],
            )
        )

    def _on_no_responders(self, future: AckFuture) -> None:
        """Listener callback: NATS reports that nobody received this message."""
        flight = future.flight
        session = self._live()
        now = session.loop.time()
        if self._stream_subjects and self._resume_paused and self._state == _OPEN:
            where = self._stream_subjects.get(flight[SUBJECT])
            if where is not None and where not in session.resumes:
                session.resumes[where] = session.loop.create_task(self._resume_later(*where))
        if self._retry and self._state == _OPEN:
            delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * (2 ** flight[ATTEMPT]))
            if now + delay < flight[FINAL]:
                # This attempt, too, waits ack_timeout for its ack once sent.
                again = next_attempt(flight, now + delay + self._ack_timeout)
                # Back in the ledger at once: the deadline keeps running meanwhile.
                future.flight = again
                session.ledger.add(future, False)
                old = session.timers.pop(flight[CID], None)
                if old is not None:
                    old.cancel()
                session.timers[flight[CID]] = session.loop.call_later(
                    delay, self._resend_later, future, again
                )
                self._resend_log.log(
                    "nobody listens on %r (no stream, paused partition, or a fail-over in "
                    "progress): sending the message again in %.3g s (attempt %d, correlation "
                    "id %s)",
                    flight[SUBJECT],
                    delay,
                    again[ATTEMPT] + 1,
                    flight[CID],
                )
                return
        future.set_exception(no_responders_exception(flight[SUBJECT], flight[CID]))

    def _resend_later(self, future: AckFuture, flight: Flight) -> None:
        session = self._live()
        session.timers.pop(flight[CID], None)
        if session.sender.is_live(future, flight):  # not settled, expired or sent again
            self._resend(future)

    # ------------------------------------------------------------------ streams

    async def publish_to_stream(
        self,
        stream: str,
        value: V,
        *,
        key: K | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
        partition: int | None = None,
        partitioner: PartitionerLike | None = None,
    ) -> Ack | None:
        """Publish to a partition of ``stream``, found through the ``client``, and wait
        for the ack.

        The stream's subject and partition count come from the control-plane client
        given as ``Publisher(client=...)`` and are cached (refreshed when a partition
        is out of range or a publish gets no answer). ``partition`` picks one;
        otherwise ``partitioner`` does (see :class:`~liftbridge_nats.Partitioner`); with
        neither the message goes to partition 0, as with the Go client.

        Paused partitions: Liftbridge drops NATS messages to a paused partition (no
        ack, nothing stored) and resumes it only on a gRPC request. When NATS reports
        that nobody received the message (a paused partition has no NATS subscriber),
        the message was certainly not stored: the partition is resumed through the
        client and the same message (same correlation id) is sent again, until the
        deadline. That is the only case of an automatic re-send here. After a plain ack
        timeout the message may have been stored; then the partition is resumed if it
        reports paused, and :class:`AckTimeoutError` is raised for the caller to decide;
        when the partition reports readonly (it stores and acks nothing), the timeout
        becomes a :class:`ReadonlyPartitionError`, as over gRPC.

        The value and key are serialized first (a ``partitioner`` sees their bytes), and
        a traced message gets one PRODUCER span however often it is sent, with the
        stream and partition in its attributes.
        """
        data, key_data, target, partition = await self._routed(
            stream, value, key, partition, partitioner
        )
        budget = self._ack_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        cid = correlation_id or (self._cid_prefix + str(next(self._cid_counter)))
        span, headers = self._stream_span(target, cid, headers, stream, partition)
        attempt = 0
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    ack = await self._publish_waiting(
                        target,
                        data,
                        key_data,
                        headers,
                        ack_policy,
                        cid,
                        expected_offset,
                        max(left, 0.001),
                        span is not None,
                    )
                    break
                except AckTimeoutError as exc:
                    # No ack by the deadline: find out why (readonly), resume a paused one.
                    self._routes.pop(stream, None)
                    await self._after_timeout(stream, partition, exc)
                    raise
                except PublishError as exc:
                    # Only an error that says "not stored, and a retry can help once the
                    # metadata is fresh" (nobody listened: the partition may be paused) is
                    # worth the same bytes again; a rejection or a lost ack is not.
                    if exc.maybe_stored or not (exc.retriable and exc.invalid_metadata):
                        raise
                    if not self._resume_paused or time.monotonic() >= deadline:
                        raise
                    await self._resume_if_paused(stream, partition, deadline)
                    self._routes.pop(stream, None)
                    await asyncio.sleep(min(_BACKOFF_MAX, _BACKOFF_FIRST * (2**attempt)))
                    attempt += 1
                    self._resent += 1
        except BaseException as exc:
            if span is not None:
                PublishTracer.finish(span, error=exc)
            raise
        if span is not None:
            PublishTracer.finish(span, ack)
        return ack

    async def publish_to_stream_async(
        self,
        stream: str,
        value: V,
        *,
        key: K | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
        partition: int | None = None,
        partitioner: PartitionerLike | None = None,
    ) -> AckFuture:
        """Publish to a partition of ``stream`` and return the future of its ack.

        The partition is chosen as by :meth:`publish_to_stream` (from the cached
        route: after the first message of a stream no call to the server is made), then
        the message goes out as by :meth:`publish_async`, whose backpressure and
        errors apply. Unlike :meth:`publish_to_stream` this sends every message once:
        a paused partition fails the future with :class:`NoRespondersError` (the
        publisher resumes the partition in the background when ``resume_paused`` is
        on, so that a later message, or a re-send with ``Publisher(retry=True)``,
        gets through) and a readonly one with :class:`AckTimeoutError`. The value and
        key are serialized first, and a traced message's span names the stream and
        partition, as with :meth:`publish_to_stream`.
        """
        data, key_data, target, partition = await self._routed(
            stream, value, key, partition, partitioner
        )
        if target not in self._stream_subjects:
            if len(self._stream_subjects) >= _SUBJECT_CACHE_LIMIT:
                self._stream_subjects.clear()
            self._stream_subjects[target] = (stream, partition)
        span: Span | None = None
        if self._trace is not None:
            correlation_id = correlation_id or (self._cid_prefix + str(next(self._cid_counter)))
            span, headers = self._stream_span(target, correlation_id, headers, stream, partition)
        # publish_async's body for bytes already serialized (it is the hot path: no
        # frame of its own for a shared helper).
        try:
            if not self._published & _YIELD_MASK:
                await asyncio.sleep(0)
            future = self._submit_now(
                target,
                data,
                key_data,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                self._create_future,
                span is not None,
            ) or await self._submit_waiting(
                target,
                data,
                key_data,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                span is not None,
            )
        except BaseException as exc:
            if span is not None:
                PublishTracer.finish(span, error=exc)
            raise
        if span is not None:
            future.add_done_callback(PublishTracer.finisher(span))
        return future

    async def _routed(
        self,
        stream: str,
        value: V,
        key: K | None,
        partition: int | None,
        partitioner: PartitionerLike | None,
    ) -> tuple[Any, Any, str, int]:
        """The value and key as bytes (serialized when the Publisher has serializers; the
        checks refuse anything else), the NATS subject and the partition they go to."""
        data: Any = value
        key_data: Any = key
        if self._serializing:
            data, key_data = self._serialize(stream, value, key)
        target, chosen = await self._target(stream, key_data, data, partition, partitioner)
        return data, key_data, target, chosen

    async def _target(
        self,
        stream: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        partitioner: PartitionerLike | None,
    ) -> tuple[str, int]:
        """The NATS subject and number of the partition of ``stream`` a message goes to
        (``key`` and ``value`` serialized: a partitioner sees bytes)."""
        if self._client is None:
            raise InvalidArgumentError(
                "publishing to a stream needs a control-plane client: "
                "Publisher(nc, client=Client(...))"
            )
        subject, count = await self._route(stream)
        if partition is None:
            partition = (
                choose_partition(partitioner, stream, key, value, count) if partitioner else 0
            )
        elif not isinstance(partition, int) or partition < 0:
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        elif partition >= count:
            subject, count = await self._route(stream, refresh=True)
            if partition >= count:
                raise InvalidArgumentError(
                    f"stream {stream!r} has {count} partition(s); partition {partition} "
                    "does not exist"
                )
        return partition_subject(subject, partition), partition

    def _stream_span(
        self,
        target: str,
        cid: str,
        headers: Mapping[str, bytes] | None,
        stream: str,
        partition: int,
    ) -> tuple[Span | None, Mapping[str, bytes] | None]:
        """The PRODUCER span of a message to a stream, and the headers carrying its
        context (no span, the headers as they are, while nothing traces)."""
        trace = self._trace
        if trace is None:
            return None, headers
        if headers is not None:
            check_headers(headers)  # before they are copied into the carrier
        return trace.start(target, cid, headers, stream=stream, partition=partition)

    async def _route(self, stream: str, *, refresh: bool = False) -> tuple[str, int]:
        route = None if refresh else self._routes.get(stream)
        if route is None:
            assert self._client is not None
            info = await self._client.stream_info(stream, refresh=refresh)
            route = (info.subject, max(1, len(info.partitions)))
            self._routes[stream] = route
        return route

    async def _after_timeout(self, stream: str, partition: int, exc: AckTimeoutError) -> None:
        """Explain an ack timeout: a readonly partition raises ReadonlyPartitionError (it
        stores nothing and acks nothing); a paused one is resumed (``resume_paused``)."""
        assert self._client is not None
        try:
            part = (await self._client.stream_info(stream, refresh=True)).partitions.get(partition)
        except LiftbridgeError:
            return
        if part is not None and part.readonly:
            raise ReadonlyPartitionError(
                f"partition {partition} of stream {stream!r} is readonly: it stores no new "
                "messages and acks none, so this one was not acked. Make it writable "
                "(Client.set_stream_readonly(..., readonly=False)) or publish elsewhere.",
                code="FAILED_PRECONDITION",
            ) from exc
        if part is not None and part.paused and self._resume_paused:
            with contextlib.suppress(LiftbridgeError):
                await self._client.resume_stream(stream, [partition], timeout=5)
                _log.info(
                    "resumed paused partition %d of stream %r after an ack timeout",
                    partition,
                    stream,
                )

    async def _resume_later(self, stream: str, partition: int) -> None:
        """Resume a partition that NATS found nobody listening on, in the background
        (for :meth:`publish_to_stream_async`, which does not wait for it)."""
        try:
            await self._resume_if_paused(stream, partition, time.monotonic() + self._ack_timeout)
            self._routes.pop(stream, None)
        except LiftbridgeError as exc:
            _log.info("could not resume partition %d of stream %r: %s", partition, stream, exc)
        finally:
            session = self._session
            if session is not None:
                session.resumes.pop((stream, partition), None)

    async def _resume_if_paused(self, stream: str, partition: int, deadline: float) -> bool:
        """Resume ``partition`` if the metadata leader reports it paused.

        Metadata comes from the metadata leader (a paused partition has no running
        leader to ask). v1.9.0 may keep reporting ``paused`` after a resume; resuming a
        running partition changes nothing on the server, so that costs one extra call.
        """
        assert self._client is not None
        info = await self._client.stream_info(stream, refresh=True)
        part = info.partitions.get(partition)
        if part is None or not part.paused:
            return False
        left = max(0.5, deadline - time.monotonic())
        await self._client.resume_stream(stream, [partition], timeout=left)
        _log.info(
            "resumed paused partition %d of stream %r: nobody received a message published "
            "to it; sending it again",
            partition,
            stream,
        )
        return True

    # ------------------------------------------------------------------ checks

    def _check_open(self) -> None:
        if self._state != _OPEN:
            raise self._closed_error()

    def _closed_error(self) -> PublisherClosedError:
        if self._state == _NEW:
            return PublisherClosedError(
                "the publisher is not started: use `async with Publisher(nc) as pub` "
                "or `await pub.start()`"
            )
        return PublisherClosedError("the publisher is closed; create a new one to publish")

    def _live(self) -> _Session:
        """The session of a started publisher (also while it closes)."""
        session = self._session
        if session is None:
            raise self._closed_error()
        return session

    def _check_subject(self, subject: str) -> None:
        check_subject(subject)
        if len(self._valid_subjects) >= _SUBJECT_CACHE_LIMIT:
            self._valid_subjects.clear()
        self._valid_subjects.add(subject)
