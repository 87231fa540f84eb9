"""The publish pipeline: from a publish call's arguments to bytes in NATS's buffer.

The :class:`~liftbridge_nats.Publisher` is the face; this module is the hot path
behind it (as aiokafka's producer hands records to its accumulator). One publish is
one :data:`PublishArgs` (the call's arguments, once serialized) and goes:

1. :meth:`Pipeline.submit_now`: room in the ledger and the fast path on? Then
   :meth:`Pipeline.prepare` checks and encodes the message, enters its future (with
   its flight: correlation id, subject, bytes, deadlines) in the
   :class:`~._inflight.InflightLedger` and writes the bytes into nats-py's outgoing
   buffer, or else hands them to the :class:`~._sender.Sender`'s outbox (NATS
   disconnected, or its buffer full). Nothing is awaited.
2. Otherwise :meth:`Pipeline.submit_waiting` (a coroutine) waits for room first, or
   sends through the transport's public API; an awaited :meth:`Publisher.publish
   <liftbridge_nats.Publisher.publish>` that finds no room waits instead in the
   ledger's queue as a :class:`_Queued` (no task of its own) and is sent from there by
   :meth:`Pipeline.submit_queued` as acks free room.

:meth:`Pipeline.prepare` is the one place that chooses between the common message (a
bytes value, perhaps a key and headers, nothing of its own: a few type checks, cached
subject and header checks, one join) and anything else (every argument checked,
tracing, a caller's correlation id, expected offset or timeout). Both build the same
bytes. The pipeline holds the started publisher's parts (ledger, ack listener, sender,
encoder) and the bound methods the hot path calls, looked up once by
:meth:`Pipeline.start`.

:data:`PublishArgs` is a plain tuple: on the hot path it is one more object per message,
and of the records measured for it (per message, in CPU time and in instructions) a
tuple costs least: a NamedTuple, even built with ``tuple.__new__`` (no Python frame),
and a slotted class each cost more than the publish path can spare.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sized
from typing import TYPE_CHECKING, Any, Final

from ._acks import CALLER_ID_MARK, InflightAckListener
from ._checks import (
    check_correlation_id,
    check_headers,
    check_message,
    check_subject,
    is_subject_token,
)
from ._errors import (
    AckLostError,
    InvalidArgumentError,
    PublisherClosedError,
    PublishError,
    UnsentTimeoutError,
)
from ._ids import CorrelationIds
from ._inflight import (
    ATTEMPT,
    CID,
    DATA,
    REPLY,
    SUBJECT,
    AckFuture,
    Flight,
    InflightLedger,
    future_factory,
)
from ._messages import Ack, AckPolicy
from ._metrics import DEFAULT_LATENCY_INTERVAL, AckLatency, Metrics
from ._sender import Outgoing, Sender
from ._tracing import PublishTracer
from ._transport import PublishTransport, too_large_error
from .serializers import serialize
from .wire import PublishEncoder, header_fields

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "ARG_CID",
    "ARG_KEY",
    "ARG_SUBJECT",
    "ARG_TIMEOUT",
    "ARG_VALUE",
    "CLOSED",
    "CLOSING",
    "NEW",
    "OPEN",
    "Pipeline",
    "PublishArgs",
    "raising",
]

OPEN, CLOSING, CLOSED, NEW = range(4)
# Enum members looked up once: on Python 3.11 every `AckPolicy.NONE` costs a
# descriptor call, and prepare() runs once per message.
_NO_ACK = AckPolicy.NONE
# Valid subjects are remembered (up to this many) so each is checked once; so are the
# checked and encoded headers of the key+headers path.
_SUBJECT_CACHE_LIMIT = 4096
_HEADERS_CACHE_LIMIT = 1024
_NEVER = float("inf")
# A caller publishing in a tight loop never has to wait for anything, so nats-py's
# flusher and reader would run only once the ledger is full: the server would get the
# messages in bursts of max_inflight and the acks would come back the same way.
# Letting the event loop run once every 256 messages (before a message is prepared, so
# a cancellation there sends nothing) keeps the pipeline flowing. 256 is a tuning
# constant: `make bench` measures publish_async with it (bench/RESULTS.md).
_YIELD_MASK = 255

_CALLER_ID_MARK = CALLER_ID_MARK.encode()


# One publish call's arguments, the one record that travels through the pipeline (built
# by the caller, unpacked once by prepare()): subject, value, key, headers, ack policy,
# correlation id, expected offset, timeout, and whether the caller started the message's
# span (a stream publish: no span of its own). Value and key are bytes once serialized.
# A plain tuple: the cheapest record to build (see the module docstring).
PublishArgs = tuple[
    str, Any, Any, Mapping[str, bytes] | None, AckPolicy, str | None, int | None, float | None, bool
]
ARG_SUBJECT: Final = 0
ARG_VALUE: Final = 1
ARG_KEY: Final = 2
ARG_CID: Final = 5
ARG_TIMEOUT: Final = 7


def _with_timeout(args: PublishArgs, timeout: float) -> PublishArgs:
    """``args`` with the rest of the call's time as its timeout."""
    return (*args[:7], timeout, args[8])


async def raising(exc: BaseException) -> Any:
    """A coroutine raising ``exc`` where it is awaited."""
    raise exc


def _same(call: AckFuture) -> AckFuture:
    """The future a queued publish is sent with: the call returned to its caller."""
    return call


def _not_started(*_: object) -> Any:
    raise PublisherClosedError("the publisher is not started: use `async with Publisher(nc)`")


def unsent_error(flight: Flight) -> PublishError:
    """The error for a message still waiting for NATS when the publisher closed."""
    if flight[ATTEMPT] > 0:  # a re-send: an earlier copy went out
        return ack_lost_error(flight)
    return PublisherClosedError(
        f"the publisher closed before the message for {flight[SUBJECT]!r} could be sent "
        "(NATS was disconnected); it was not sent",
        subject=flight[SUBJECT],
        correlation_id=flight[CID],
    )


def ack_lost_error(flight: Flight) -> AckLostError:
    """The error for a message sent and still unacked when the publisher closed."""
    return AckLostError(
        f"the publisher closed before the ack for the message on {flight[SUBJECT]!r} "
        f"(correlation id {flight[CID]}) arrived; it may or may not have been stored. "
        "Close with a longer timeout to wait for acks, or check the partition before "
        "publishing it again.",
        subject=flight[SUBJECT],
        correlation_id=flight[CID],
    )


class _Queued:
    """A :meth:`Publisher.publish` call waiting in the ledger's queue for room (a
    :class:`~._inflight.QueuedPublish`): its arguments, the call its caller awaits, and
    the deadline of that call. Woken, it is sent at once; cancelled (the call), it is
    skipped; still waiting at its deadline, it fails, never sent. ``args`` is None once
    it no longer waits."""

    __slots__ = ("args", "call", "deadline", "owner")

    def __init__(
        self, call: AckFuture, owner: Pipeline, args: PublishArgs, deadline: float
    ) -> None:
        self.call = call
        self.owner = owner
        self.args: PublishArgs | None = args
        self.deadline = deadline

    def __call__(self) -> AckFuture:
        # The future factory of its send: its call's own future, made when it queued.
        return self.call

    def done(self) -> bool:
        return self.args is None or self.call.done()

    def set_result(self, _: None, /) -> None:
        self.owner.submit_queued(self)

    def set_exception(self, exception: BaseException, /) -> None:
        # The publisher closed while it waited: raised where the call is awaited.
        self.args = None
        self.call.refuse(exception)

    def expire(self) -> None:
        self.owner.expire_queued(self)


class Pipeline:
    """The hot path of one :class:`~liftbridge_nats.Publisher`: preparation, submission
    and the calls waiting for room, over the started publisher's parts.

    Built with the publisher (its settings); :meth:`start` builds the ledger, the ack
    listener, the sender and the encoder, and looks up the bound methods the hot path
    calls. ``state`` is the publisher's (NEW, OPEN, CLOSING, CLOSED), kept here
    because every message reads it.
    """

    ledger: InflightLedger
    listener: InflightAckListener
    sender: Sender
    loop: asyncio.AbstractEventLoop

    def __init__(
        self,
        transport: PublishTransport,
        *,
        ack_timeout: float,
        max_inflight: int,
        crc: bool,
        retry: bool,
        retry_deadline: float,
        no_responders: bool,
        max_buffered_bytes: int,
        value_serializer: Callable[[Any], bytes] | None,
        key_serializer: Callable[[Any], bytes] | None,
    ) -> None:
        self.transport = transport
        self.ack_timeout = ack_timeout
        self.max_inflight = max_inflight
        self.retry = retry
        self.retry_deadline = retry_deadline
        self._crc = crc
        self._no_responders = no_responders
        self._max_buffered_bytes = max_buffered_bytes
        self._value_serializer = value_serializer
        self._key_serializer = key_serializer
        self.serializing = value_serializer is not None or key_serializer is not None
        self.state = NEW
        self.started = False
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
        self.create_future: Callable[[], AckFuture] = _not_started
        self.create_call: Callable[[], AckFuture] = _not_started
        self.time: Callable[[], float] = _not_started
        self._reply_prefix = b""
        self._max_payload = 0
        # The publisher's own correlation ids (see CorrelationIds), made inline on the
        # fast path; the reply subject (see InflightAckListener) carries only the counter.
        self._ids = ids = CorrelationIds()
        self._cid_prefix = ids.prefix
        self._cid_counter = ids.counter
        self._valid_subjects: set[str] = set()
        # Messages waiting for NATS (the sender's own deque, set by start()).
        self._outbox: deque[Outgoing] = deque()
        # Queued publishes the fast path refused once woken, sent the slow way.
        self.queued: set[asyncio.Task[None]] = set()
        self.published = 0
        self.timed_out = 0
        # Failed publishes by error.type, counted by the ack futures themselves.
        self.failed: dict[str, int] = {}
        # The tracer while it records spans, else None: the one test a message pays.
        self.trace: PublishTracer | None = None
        # Ack latency: the next message published at or after this time (monotonic) is
        # timed to its ack; never while no meter provider keeps the values.
        self._latency: AckLatency | None = None
        self._sample_at = _NEVER

    # ------------------------------------------------------------------ lifecycle

    async def start(self, nobody_listened: Callable[[str, float], None] | None) -> None:
        """Subscribe to the ack inbox, build the ledger, sender and encoder, and look up
        the hot path's callables; the sender task starts too (``nobody_listened``: see
        :class:`~._sender.Sender`). On failure (or cancellation) no subscription is left
        behind and the state is CLOSED."""
        transport = self.transport
        loop = asyncio.get_running_loop()
        transport.bind(loop)
        ledger = InflightLedger(loop, max_inflight=self.max_inflight, on_expired=_not_started)
        sender = Sender(
            transport,
            ledger,
            loop,
            max_buffered_bytes=self._max_buffered_bytes,
            is_open=self.is_open,
            ack_timeout=self.ack_timeout,
            retry=self.retry,
            nobody_listened=nobody_listened,
        )
        listener = InflightAckListener(
            transport, ledger, cid_prefix=self._cid_prefix, on_no_responders=sender.on_no_responders
        )
        try:
            await listener.start()
        except BaseException:
            # Failed or cancelled: leave no subscription (and its nats-py task) behind.
            await listener.stop()
            self.state = CLOSED
            raise
        encoder = PublishEncoder(listener.inbox, crc=self._crc)
        self.loop, self.ledger, self.listener, self.sender = loop, ledger, listener, sender
        self.started = True
        self._encode = encoder.encode
        self._encode_plain = encoder.encode_plain
        self._encode_keyed = encoder.encode_keyed
        self._ledger_add = ledger.add
        self._must_wait = ledger.must_wait
        self._inflight, self._room_waiters = ledger.live_views()
        self._write = transport.write
        self._defer = sender.defer
        self._discard = ledger.discard
        self._fast = bool(transport.fast_path)
        self.create_future = future_factory(loop, ledger.discard, call=False, failed=self.failed)
        self.create_call = future_factory(loop, ledger.discard, call=True, failed=self.failed)
        # asyncio's own loops read time.monotonic(): calling it directly spares a frame.
        self.time = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        self._reply_prefix = listener.reply_prefix.encode() if self._no_responders else b""
        self._max_payload = transport.max_payload
        self._outbox = sender.outbox
        sender.start()

    def refresh_telemetry(self, tracer: PublishTracer | None, metrics: Metrics | None) -> None:
        """Look whether spans and ack latencies would be kept now (an SDK configured)."""
        if tracer is not None:
            self.trace = tracer if tracer.refresh() else None
        if metrics is not None:
            # The pipeline samples by itself (see _sample_latency): record every value.
            latency = metrics.ack_latency(0.0)
            if latency is None:
                self._latency, self._sample_at = None, _NEVER
            elif self._latency is None:
                self._latency, self._sample_at = latency, 0.0

    def halt(self) -> None:
        """First step of closing: no deadline timer and no re-send runs any more."""
        self.ledger.close()
        self.sender.stop_retries()

    async def stop(self, *others: Coroutine[Any, Any, Any]) -> None:
        """Last step of closing (after :meth:`halt`): end the queued publishes' tasks and
        ``others`` (the routes' background work), fail what never left (not sent),
        then what went out unacked (maybe stored), and leave the ack inbox."""
        tasks = list(self.queued)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *others, return_exceptions=True)
        # First what never left (it fails as not sent), then what went out unacked.
        await self.sender.stop(unsent_error)
        for future in self.ledger.drain():
            if not future.done():
                future.set_exception(ack_lost_error(future.flight))
        await self.listener.stop()

    def unsettled(self) -> list[AckFuture]:
        """The futures of every message published and not settled yet: in flight,
        waiting for NATS, or waiting for room (those go out on their own)."""
        ledger = self.ledger
        futures = ledger.futures()
        futures.extend(f for f, _ in self._outbox if not f.done())
        futures.extend(w.call for w in ledger.queued() if isinstance(w, _Queued) and not w.done())
        return futures

    # ------------------------------------------------------------------ entry points

    def call_waiting(self, args: PublishArgs) -> Coroutine[Any, Any, Ack | None]:
        """What :meth:`Publisher.publish <liftbridge_nats.Publisher.publish>` returns
        for a message :meth:`submit_now` could not send at once: a call queued in the
        ledger for room (sent when acks free it), or the slow way's coroutine. Errors
        surface where it is awaited."""
        if self._fast and self.state == OPEN:
            # No room in the ledger (only that stops the fast path here, or waiters are
            # ahead): wait in its queue as a PublishCall, sent when room frees. Its
            # deadline runs from now: the timeout bounds the whole call.
            try:
                deadline = self.time() + self.budget(args[ARG_TIMEOUT])
            except InvalidArgumentError as exc:
                return raising(exc)
            call: Any = self.create_call()
            # The default timeout is the same for every call, so such calls are queued
            # in deadline order.
            self.ledger.enqueue(
                _Queued(call, self, args, deadline), ordered=args[ARG_TIMEOUT] is None
            )
            return call  # type: ignore[no-any-return]
        # The slow way runs when the coroutine is first awaited, which may be long after
        # this call: its deadline is fixed here, as the queued fast path's is above.
        try:
            deadline = self.time() + self.budget(args[ARG_TIMEOUT])
        except Exception as exc:  # not started, or a bad timeout: raised when awaited
            return raising(exc)
        return self.publish_waiting(args, deadline=deadline)

    async def submit(self, args: PublishArgs, serialized: bool = False) -> AckFuture:
        """The body of ``publish_async`` and ``publish_to_stream_async`` (``serialized``:
        the stream's router serialized the value and key already). Lets the event loop
        run once every 256 messages (see _YIELD_MASK)."""
        if not self.published & _YIELD_MASK:
            await asyncio.sleep(0)
        if self.serializing and not serialized:
            args = self.serialized(args)
        return self.submit_now(args, self.create_future) or await self.submit_waiting(args)

    async def publish_waiting(
        self, args: PublishArgs, *, deadline: float | None = None
    ) -> Ack | None:
        """Publish the slow way and wait for the ack."""
        future = await self.submit_waiting(args, deadline=deadline)
        # Cancelling this wait cancels the future, which forgets the message.
        return await future

    def serialized(self, args: PublishArgs) -> PublishArgs:
        """``args`` with the value and key serialized (see :meth:`serialize`)."""
        value, key = self.serialize(args[ARG_SUBJECT], args[ARG_VALUE], args[ARG_KEY])
        return (args[0], value, key, *args[3:])

    def serialize(self, target: str, value: Any, key: Any) -> tuple[Any, Any]:
        """The value and key as the serializers make them (SerializationError, naming
        ``target``, a subject or stream, when one refuses); a key of None stays None."""
        if self._value_serializer is not None:
            value = serialize(self._value_serializer, value, subject=target)
        if key is not None and self._key_serializer is not None:
            key = serialize(self._key_serializer, key, what="key", subject=target)
        return value, key

    # ------------------------------------------------------------------ submission

    def submit_now(
        self,
        args: PublishArgs,
        make: Callable[[], AckFuture],
        queued: bool = False,
        final: float | None = None,
    ) -> AckFuture | None:
        """Publish one message without awaiting anything and return its future; None
        (and nothing done) when that is not possible: no room in the ledger, the fast
        path off, or the reconnect buffer full. ``queued``: the ledger woke this message
        from its queue (it has room, whoever still waits behind it); ``final``: see
        :meth:`prepare`."""
        if (
            (len(self._inflight) >= self.max_inflight or self._room_waiters) and not queued
        ) or not self._fast:
            return None
        future = self.prepare(args, make, final)
        flight = future.flight
        if (
            flight[DATA]  # empty: already sent (see prepare)
            and (self._outbox or not self._write(flight[SUBJECT], flight[REPLY], flight[DATA]))
            and not self._defer(future)
        ):
            # Neither sent nor queued: undone, for the caller to await submit_waiting.
            # (A span started for it is never ended, so never exported: the message
            # gets its one span when it is prepared again.)
            self._discard(flight[CID], future)
            return None
        self.published += 1
        if flight[ATTEMPT] < 0:  # AckPolicy.NONE: done once handed to NATS
            future.set_result(None)
        return future

    async def submit_waiting(
        self,
        args: PublishArgs,
        make: Callable[[], AckFuture] | None = None,
        *,
        deadline: float | None = None,
    ) -> AckFuture:
        """:meth:`submit_now` for when something must be awaited first or instead.

        A wait for room counts against the publish's time: its deadline runs from
        ``deadline`` (the call's, loop time) or else from here, and a message that found
        no room by then fails, never sent, in the future returned.
        """
        if make is None:
            make = self.create_future
        if deadline is not None or self._must_wait():
            final = self.time() + self.budget(args[ARG_TIMEOUT]) if deadline is None else deadline
            if self._must_wait():
                with contextlib.suppress(TimeoutError):  # then no time is left, below
                    await self._wait_for_room(final)
            left = final - self.time()
            if left <= 0:
                future = make()
                self.fail_unsent(future, args[ARG_SUBJECT], args[ARG_CID])
                return future
            args = _with_timeout(args, left)  # the rest of the call's time
        future = self.prepare(args, make)
        flight = future.flight
        if flight[DATA] and (
            self._outbox or not self._write(flight[SUBJECT], flight[REPLY], flight[DATA])
        ):
            await self.sender.send(future)
        self.published += 1
        if flight[ATTEMPT] < 0:
            future.set_result(None)
        return future

    async def _wait_for_room(self, deadline: float) -> None:
        """Wait for room in the ledger until ``deadline`` (loop time; TimeoutError)."""
        async with asyncio.timeout_at(deadline):
            await self.ledger.wait_for_room()
        self.check_open()

    def submit_queued(self, queued: _Queued) -> None:
        """Send a publish that waited in the ledger's queue, now that it has room.

        Runs from the ledger (in an ack handler, the deadline timer, or a cancel);
        whatever goes wrong settles the call, never the caller of the ledger.
        """
        call, args = queued.call, queued.args
        queued.args = None  # no longer waiting (its deadline's mark is dead now)
        if args is None or call.done():  # cancelled while it waited: forgotten
            return
        left = queued.deadline - self.time()
        if left <= 0:  # due, and woken before the timer ran
            self.fail_unsent(call, args[ARG_SUBJECT], args[ARG_CID])
            return
        # The call's deadline stays. A call without a timeout of its own (the common
        # one) keeps the fast way, told that deadline; any other is sent with the rest
        # of its time as its timeout, which the checked way reads.
        final = queued.deadline if args[ARG_TIMEOUT] is None else None
        try:
            sent = self.submit_now(
                _with_timeout(args, left) if final is None else args,
                queued,
                queued=True,
                final=final,
            )
        except Exception as exc:
            call.refuse(exc)  # an argument refused, raised where the call is awaited
            return
        if sent is None:
            # The fast path refused it after all (NATS disconnected and the reconnect
            # buffer full): the slow way, in a task of the pipeline's.
            task = self.loop.create_task(self._send_queued(call, _with_timeout(args, left)))
            self.queued.add(task)
            task.add_done_callback(self.queued.discard)

    def expire_queued(self, queued: _Queued) -> None:
        """Ledger callback: a queued publish still waited for room at its deadline."""
        call, args = queued.call, queued.args
        queued.args = None
        if args is not None and not call.done():
            self.fail_unsent(call, args[ARG_SUBJECT], args[ARG_CID])

    async def _send_queued(self, call: AckFuture, args: PublishArgs) -> None:
        try:
            await self.submit_waiting(args, functools.partial(_same, call))
        except Exception as exc:
            call.refuse(exc)  # as publish() raises what it meets at once
        except asyncio.CancelledError:
            call.refuse(self.closed_error())
            raise

    def fail_unsent(self, future: AckFuture, subject: str, correlation_id: str | None) -> None:
        """Fail a publish whose deadline passed before it could be sent."""
        self.timed_out += 1
        future.set_exception(
            UnsentTimeoutError(
                f"the message for {subject!r} waited for room until the deadline its timeout "
                f"set at the call: {self.max_inflight} messages (max_inflight) already "
                "waited for their acks. It was never sent, so it was not stored, and "
                "publishing it again is safe. Give it a longer timeout, raise max_inflight, "
                "or publish fewer messages at once.",
                subject=subject,
                correlation_id=correlation_id,
            )
        )

    def budget(self, timeout: float | None) -> float:
        """The seconds a publish has from its call to its end (``timeout`` checked)."""
        if timeout is None:
            return self.retry_deadline if self.retry else self.ack_timeout
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}")
        return float(timeout)

    def new_correlation_id(self) -> str:
        """A correlation id of this publisher's own."""
        return self._ids.new()

    def _reply_subject(self, cid: str) -> bytes:
        """The NATS reply subject of a message the checked way (see
        :class:`InflightAckListener`): the counter of an id of ours (made here, or
        before the send by :meth:`new_correlation_id`, as ``publish_to_stream`` does),
        else the mark and the caller's id; none for an id that is no subject token."""
        count = cid[len(self._cid_prefix) :]
        if cid.startswith(self._cid_prefix) and count.isascii() and count.isdigit():
            return self._reply_prefix + count.encode()
        if is_subject_token(cid):
            return self._reply_prefix + _CALLER_ID_MARK + cid.encode()
        return b""

    # ------------------------------------------------------------------ preparation

    def prepare(
        self, args: PublishArgs, make: Callable[[], AckFuture], final: float | None = None
    ) -> AckFuture:
        """Check, encode and (unless AckPolicy.NONE) enter a message in the ledger; its
        future carries its flight. ``final``: the deadline of the whole call (loop time)
        of a message without a timeout of its own that waited in the ledger's queue; by
        default the call starts now. Unless re-sends are on (or it is AckPolicy.NONE, never
        sent again anyway), the message is also handed to the fast path here when it
        takes it: its flight then carries no bytes (``flight[DATA]`` and
        ``flight[REPLY]`` are empty).

        The one choice of the way: the common message (a bytes value, perhaps a key
        and headers, and no correlation id, expected offset or timeout of its own, while
        nothing traces) is encoded here, its headers checked and encoded once per
        distinct set; anything else goes to :meth:`_prepare_checked`.
        """
        subject, value, key, headers, ack_policy, cid_arg, offset, timeout, _ = args
        if self.state != OPEN:
            self.check_open()
        if (
            cid_arg is not None
            or offset is not None
            or timeout is not None
            or type(value) is not bytes
            or type(ack_policy) is not AckPolicy
            or ack_policy is _NO_ACK
            or subject not in self._valid_subjects
            or self.trace is not None
        ):
            return self._prepare_checked(args, make, final)
        fields: bytes | None = None
        if key is not None or headers is not None:
            if (
                not value
                or (key is not None and type(key) is not bytes)
                or (headers is not None and type(headers) is not dict)
                or self._crc
            ):
                return self._prepare_checked(args, make, final)
            fields = b""
            if headers:
                items = tuple(headers.items())
                try:
                    fields = self._header_fields.get(items)
                except TypeError:  # an unhashable value: no bytes, refused when checked
                    return self._prepare_checked(args, make, final)
                if fields is None:
                    fields = self._remember_headers(items, headers)
        count = str(next(self._cid_counter))
        cid = self._cid_prefix + count
        cid_bytes = cid.encode()
        if fields is None:
            data = self._encode_plain(value, cid_bytes, ack_policy)
        else:
            data = self._encode_keyed(value, cid_bytes, key, fields, ack_policy)
        if len(data) > self._max_payload:
            raise too_large_error(subject, cid, len(data), self._max_payload)
        reply = self._reply_prefix + count.encode() if self._reply_prefix else b""
        now = self.time()
        if final is None:
            deadline = now + self.ack_timeout
            final = now + self.retry_deadline if self.retry else deadline
            ordered = True
        else:
            deadline, ordered = self._queued_deadline(now, final)
        if not self.retry and not self._outbox and self._write(subject, reply, data):
            data = reply = b""  # sent (see _prepare_checked)
        future = make()
        future.flight = (cid, subject, data, deadline, reply, final, 0)
        if now >= self._sample_at:
            self._sample_latency(future, now)
        self._ledger_add(future, ordered)
        return future

    def _queued_deadline(self, now: float, final: float) -> tuple[float, bool]:
        """The deadline of the attempt sent ``now`` for a call that waited in the
        queue and ends at ``final``, and whether it is in step with the deadlines
        entered before it (see :meth:`InflightLedger.add`)."""
        if self.retry:
            # Each attempt waits ack_timeout at most, within the call's deadline.
            return min(final, now + self.ack_timeout), False
        # The call's deadline: not earlier than that of any message sent before it, as
        # the queue sends first come, first served and every call gets ack_timeout.
        return final, True

    def _remember_headers(
        self, items: tuple[tuple[str, bytes], ...], headers: Mapping[str, bytes]
    ) -> bytes:
        check_headers(headers)
        if len(self._header_fields) >= _HEADERS_CACHE_LIMIT:
            self._header_fields.clear()
        fields = self._header_fields[items] = header_fields(headers)
        return fields

    def _prepare_checked(
        self, args: PublishArgs, make: Callable[[], AckFuture], final: float | None = None
    ) -> AckFuture:
        """:meth:`prepare` for any message: every argument checked (``final``: as
        there).

        While tracing, the message's PRODUCER span starts here (unless the args say so:
        the caller started it), its context goes into the headers, and the span ends
        with the ack's future (offset or error).
        """
        subject, value, key, headers, ack_policy, correlation_id, offset, timeout, traced = args
        if self.state != OPEN:
            self.check_open()
        if subject not in self._valid_subjects:
            self._check_subject(subject)
        if (
            type(value) is not bytes
            or key is not None
            or headers is not None
            or offset is not None
            or timeout is not None
            or type(ack_policy) is not AckPolicy
        ):
            value = check_message(value, key, headers, ack_policy, offset, timeout)
        if correlation_id is None:
            cid = self.new_correlation_id()
        else:
            cid = check_correlation_id(correlation_id)
            if cid in self.ledger:
                raise InvalidArgumentError(
                    f"correlation id {cid!r} is already in flight; ids must be unique"
                )
        reply = self._reply_subject(cid) if self._reply_prefix else b""
        span: Span | None = None
        if self.trace is not None and not traced:
            span, headers = self.trace.start(subject, cid, headers)
        try:
            data = self._encode(value, cid.encode(), key, headers, ack_policy, offset)
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
        now = self.time()
        if now >= self._sample_at:
            self._sample_latency(future, now)
        ordered = timeout is None
        if final is not None:
            deadline, ordered = self._queued_deadline(now, final)
        elif timeout is None:
            if self.retry:
                final = now + self.retry_deadline
                deadline = now + self.ack_timeout
            else:
                final = deadline = now + self.ack_timeout
        else:
            final = now + timeout
            deadline = min(final, now + self.ack_timeout) if self.retry else final
        if not self.retry and not self._outbox and self._write(subject, reply, data):
            # Sent. Keeping the bytes until the ack (a round trip, thousands of messages
            # later) would only keep cold memory busy.
            data = reply = b""
        future.flight = (cid, subject, data, deadline, reply, final, 0)
        self._ledger_add(future, ordered)
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
            latency.observe(self.time(), sent)

    # ------------------------------------------------------------------ checks

    def is_open(self) -> bool:
        """True while the publisher publishes (started, not closing)."""
        return self.state == OPEN

    def check_open(self) -> None:
        """Raise PublisherClosedError unless the publisher is open."""
        if self.state != OPEN:
            raise self.closed_error()

    def closed_error(self) -> PublisherClosedError:
        """The error for a publish on a publisher not started, or closed."""
        if self.state == NEW:
            return PublisherClosedError(
                "the publisher is not started: use `async with Publisher(nc) as pub` "
                "or `await pub.start()`"
            )
        return PublisherClosedError("the publisher is closed; create a new one to publish")

    def _check_subject(self, subject: str) -> None:
        check_subject(subject)
        if len(self._valid_subjects) >= _SUBJECT_CACHE_LIMIT:
            self._valid_subjects.clear()
        self._valid_subjects.add(subject)
