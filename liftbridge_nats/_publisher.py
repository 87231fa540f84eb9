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
face (lifecycle, the publish calls, flush, stats); :mod:`._pipeline` is the hot path
behind it: one :data:`~._pipeline.PublishArgs` tuple per message, prepared (checked,
encoded by :class:`~liftbridge_nats.wire.PublishEncoder`) and handed to NATS, or queued
for room; :mod:`._inflight` is the ledger of messages waiting for their ack (deadlines,
backpressure); :mod:`._acks` is the one subscription that receives acks; :mod:`._sender`
is the one background task, for messages that cannot go at once (NATS disconnected,
re-sends), and the retry policy (what an ack timeout or a no-responders report
becomes); :mod:`._routes` maps a stream and partition to a NATS subject and recovers
paused partitions (the gRPC :class:`~liftbridge_nats.Client` routes through it too);
:mod:`._checks` checks arguments. All of them reach NATS through one seam, a
:class:`~liftbridge_nats._transport.PublishTransport` (as httpx's client reaches the
network): over nats-py in production (its private parts confined to
:mod:`._natscompat`), in memory in unit tests. :meth:`Publisher.start` builds the
pipeline's parts whole. The hot path of ``publish_async`` is one join of the envelope's
pieces, one future, one tuple for the arguments and one for the flight, one dict entry
and one append to nats-py's outgoing buffer: no timer, no task and no ``wait_for`` per
message (one ``loop.call_at`` timer serves every deadline). When that buffer is over
nats-py's pending limit, messages wait in order in the sender's bounded outbox, and the
sender hands them to the same fast path as nats-py's flusher catches up. ``publish``
returns the ack's future itself (a :class:`~._inflight.PublishCall`); when
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
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from ._acks import AckStats
from ._checks import check_headers, check_publisher_args
from ._errors import (
    AckTimeoutError,
    InvalidArgumentError,
    NotConnectedError,
    PublisherClosedError,
    PublishError,
)
from ._inflight import AckFuture
from ._messages import Ack, AckPolicy, K, V
from ._metrics import Metrics, PublishCounts, metrics_for
from ._partitioning import PartitionerLike
from ._pipeline import CLOSED, CLOSING, NEW, OPEN, Pipeline, PublishArgs, raising
from ._routes import StreamRoutes
from ._sender import BACKOFF_FIRST, BACKOFF_MAX
from ._tracing import PublishTracer, publish_tracer
from ._transport import FastPath, NatsTransport, PublishTransport, log_choice

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["FastPath", "PublishRecord", "Publisher", "PublisherStats"]

DEFAULT_MAX_INFLIGHT = 16_384
DEFAULT_MAX_BUFFERED_BYTES = 32 * 1024 * 1024

# How often a started publisher looks again whether an OpenTelemetry SDK was
# configured (tracing, ack latency) when it reports to the global providers: a timer,
# so that no message pays for the look.
_TELEMETRY_REFRESH = 1.0


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


async def _wait_settled(futures: list[AckFuture], timeout: float | None) -> int:
    """Wait until every future is done or ``timeout`` passed; return how many are not.
    Callbacks added to the futures before the call run before it returns, also those of
    futures settled just before it (scheduled, not run yet): it always lets the loop
    run once.

    (``asyncio.wait`` refuses the futures :meth:`Publisher.publish` returns: they are
    coroutines too.)
    """
    pending = [f for f in futures if not f.done()]
    if not pending:
        await asyncio.sleep(0)
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


def _one_transport(nc: Any, transport: Any) -> PublishTransport | None:
    """The transport a Publisher publishes through when it is given one (``transport=``,
    or ``nc`` that is one); None for a nats-py client. Exactly one of the two."""
    if transport is None:
        if nc is None:
            raise TypeError(
                "nc must be a connected nats-py client (`nc = await nats.connect(url)`), "
                "or give a publish transport, Publisher(transport=...); got neither"
            )
        return nc if isinstance(nc, PublishTransport) else None
    if nc is not None:
        raise InvalidArgumentError(
            "give the Publisher either a nats-py client (nc) or transport=, not both"
        )
    if not isinstance(transport, PublishTransport):
        raise TypeError(
            "transport must be a PublishTransport (such as the in-memory transport), got "
            f"{type(transport).__name__}"
        )
    return transport


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

    ``transport``: publish through a
    :class:`~liftbridge_nats._transport.PublishTransport` instead of a nats-py client
    (``Publisher(transport=t)``, with no ``nc``), such as the in-memory one of tests;
    ``nc`` may be a transport too.
    """

    def __init__(
        self,
        nc: Any = None,
        *,
        transport: PublishTransport | None = None,
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
        transport = _one_transport(nc, transport)
        check_publisher_args(
            nc if transport is None else transport,
            client,
            ack_timeout,
            retry_deadline,
            nc_is_transport=transport is not None,
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
        if transport is None:
            transport = NatsTransport(nc, fast_path=fast_path)
        self._transport = transport
        self._ack_timeout = float(ack_timeout)
        self._client = client
        self._resume_paused = resume_paused
        self._pipeline = Pipeline(
            self._transport,
            ack_timeout=self._ack_timeout,
            max_inflight=max_inflight,
            crc=crc,
            retry=retry,
            retry_deadline=float(retry_deadline or 3 * ack_timeout),
            no_responders=no_responders,
            max_buffered_bytes=max_buffered_bytes,
            value_serializer=value_serializer,
            key_serializer=key_serializer,
        )
        self._routes = StreamRoutes(client, resume_paused=resume_paused)
        # Re-sends of publish_to_stream (after resuming a paused partition).
        self._resent = 0
        # The telemetry refresh (see _TELEMETRY_REFRESH), when one is needed.
        self._refresh: asyncio.TimerHandle | None = None
        self._closed = asyncio.Event()
        self._metric_source = _MetricSource(self)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Publisher[V, K]:
        """Subscribe to the ack inbox and start the sender (``async with`` does this)."""
        pipeline = self._pipeline
        if pipeline.state == OPEN:
            return self
        if pipeline.state != NEW:
            raise PublisherClosedError("this publisher was closed; create a new one")
        if self._transport.closed:
            raise NotConnectedError("the NATS connection is closed; connect before publishing")
        # Only publish_to_stream_async's subjects are known to the routes, and only with
        # a client: a no-responders report on one resumes its partition if paused.
        nobody_listened = self._routes.nobody_listened if self._client is not None else None
        await pipeline.start(nobody_listened)
        log_choice(self._transport.fast_path)
        if self._tracer is not None or self._metrics is not None:
            pipeline.refresh_telemetry(self._tracer, self._metrics)
            self._refresh = pipeline.loop.call_later(_TELEMETRY_REFRESH, self._on_refresh)
        if self._metrics is not None:
            self._metrics.register_publisher(self._metric_source)
        pipeline.state = OPEN
        return self

    def _on_refresh(self) -> None:
        pipeline = self._pipeline
        if pipeline.state != OPEN:
            return
        pipeline.refresh_telemetry(self._tracer, self._metrics)
        self._refresh = pipeline.loop.call_later(_TELEMETRY_REFRESH, self._on_refresh)

    async def __aenter__(self) -> Publisher[V, K]:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._pipeline.state in (CLOSING, CLOSED)

    @property
    def fast_path(self) -> FastPath:
        """Whether this publisher uses the fast path to nats-py (true in a boolean
        context), and ``reason`` why not when it does not."""
        return self._transport.fast_path

    @property
    def pending(self) -> int:
        """Messages published and not yet settled (acked, failed, or timed out)."""
        pipeline = self._pipeline
        return len(pipeline.ledger) if pipeline.started else 0

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._live().listener.inbox

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the publisher's counters."""
        pipeline = self._pipeline
        started = pipeline.started
        ack = pipeline.listener.stats if started else AckStats()
        sender = pipeline.sender if started else None
        return PublisherStats(
            published=pipeline.published,
            acked=ack.acks_matched - ack.acks_rejected,
            rejected=ack.acks_rejected,
            timed_out=pipeline.timed_out + (sender.timed_out if sender is not None else 0),
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
        pipeline = self._pipeline
        if not pipeline.started:
            return PublishCounts(published=pipeline.published, resent=self._resent)
        ack = pipeline.listener.stats
        return PublishCounts(
            published=pipeline.published,
            acked=ack.acks_matched - ack.acks_rejected,
            resent=self._resent + pipeline.sender.resent,
            no_responders=ack.no_responders,
            failed=pipeline.failed.copy(),
            inflight=len(pipeline.ledger),
            buffered_bytes=pipeline.sender.buffered_bytes,
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
        pipeline = self._pipeline
        if pipeline.state == CLOSED or not pipeline.started:
            pipeline.state = CLOSED
            return
        if pipeline.state == CLOSING:
            await self._closed.wait()
            return
        pipeline.state = CLOSING
        ledger = pipeline.ledger
        ledger.reject_waiters()
        wait = self._ack_timeout if timeout is None else max(0.0, timeout)
        try:
            futures = ledger.futures()
            if futures and wait > 0:
                await _wait_settled(futures, wait)
        finally:
            await self._teardown()

    async def _teardown(self) -> None:
        pipeline = self._pipeline
        pipeline.halt()
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        await pipeline.stop(self._routes.close())
        if self._metrics is not None:
            # Its final counts stay in the process totals.
            self._metrics.retire_publisher(self._metric_source)
        pipeline.state = CLOSED
        self._closed.set()

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
        pipeline = self._pipeline
        args = (
            subject,
            value,
            key,
            headers,
            ack_policy,
            correlation_id,
            expected_offset,
            timeout,
            False,
        )
        try:
            if pipeline.serializing:
                args = pipeline.serialized(args)
            future = pipeline.submit_now(args, pipeline.create_call)
        except Exception as exc:
            return raising(exc)  # errors surface where the call is awaited
        if future is not None:
            return future  # type: ignore[return-value]  # made by create_call
        return pipeline.call_waiting(args)

    def publish_async(
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
    ) -> Coroutine[Any, Any, AckFuture]:
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
        # The pipeline's coroutine itself, shared with publish_to_stream_async: no
        # coroutine frame of this method's own (await it as any coroutine function's).
        return self._pipeline.submit(
            (
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                False,
            )
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
        """Wait until every message published so far is settled (acked or failed), and
        the callbacks added to their futures before this call have run.

        Errors stay with the messages' futures. Raises :class:`AckTimeoutError` when
        some are still pending after ``timeout`` seconds (default: wait for them all;
        each ends by its own deadline anyway).
        """
        pending = await _wait_settled(self._live().unsettled(), timeout)
        if pending:
            raise AckTimeoutError(f"{pending} message(s) still wait for their ack after {timeout}s")

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
        pipeline, routes = self._pipeline, self._routes
        data, key_data, target, partition = await self._routed(
            stream, value, key, partition, partitioner
        )
        budget = self._ack_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        cid = correlation_id or pipeline.new_correlation_id()
        span, headers = self._stream_span(target, cid, headers, stream, partition)
        attempt = 0
        try:
            while True:
                left = deadline - time.monotonic()
                args: PublishArgs = (
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
                try:
                    ack = await pipeline.publish_waiting(args)
                    break
                except AckTimeoutError as exc:
                    # No ack by the deadline: find out why (readonly), resume a paused one.
                    routes.forget(stream)
                    await routes.explain_timeout(stream, partition, exc)
                    raise
                except PublishError as exc:
                    # Only an error that says "not stored, and a retry can help once the
                    # metadata is fresh" (nobody listened: the partition may be paused) is
                    # worth the same bytes again; a rejection or a lost ack is not.
                    if exc.maybe_stored or not (exc.retriable and exc.invalid_metadata):
                        raise
                    if not self._resume_paused or time.monotonic() >= deadline:
                        raise
                    await routes.resume_if_paused(stream, partition, deadline)
                    routes.forget(stream)
                    await asyncio.sleep(min(BACKOFF_MAX, BACKOFF_FIRST * (2**attempt)))
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
        pipeline = self._pipeline
        data, key_data, target, partition = await self._routed(
            stream, value, key, partition, partitioner
        )
        self._routes.note(target, stream, partition)
        span: Span | None = None
        if pipeline.trace is not None:
            correlation_id = correlation_id or pipeline.new_correlation_id()
            span, headers = self._stream_span(target, correlation_id, headers, stream, partition)
        args = (
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
        try:
            # publish_async's own body, for bytes already serialized.
            future = await pipeline.submit(args, True)
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
        if self._pipeline.serializing:
            data, key_data = self._pipeline.serialize(stream, value, key)
        target, chosen = await self._routes.target(stream, key_data, data, partition, partitioner)
        return data, key_data, target, chosen

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
        trace = self._pipeline.trace
        if trace is None:
            return None, headers
        if headers is not None:
            check_headers(headers)  # before they are copied into the carrier
        return trace.start(target, cid, headers, stream=stream, partition=partition)

    # ------------------------------------------------------------------ checks

    def _live(self) -> Pipeline:
        """The pipeline of a started publisher (also while it closes)."""
        pipeline = self._pipeline
        if not pipeline.started:
            raise pipeline.closed_error()
        return pipeline
