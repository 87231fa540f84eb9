"""The blocking Publisher: the async one on the shared loop, fed through a handoff.

``publish_async`` puts the message in a :class:`~._handoff.Handoff` and returns a
:class:`concurrent.futures.Future` (a :class:`~._future.LazyFuture`, cheap while nobody
waits on it); on the loop, the handoff's drain gives each message
to the async publisher's ``publish`` (not awaited: it sends at once and returns the
ack's future) and the ack future's done-callback settles the caller's future. ``publish`` takes the same way with a lighter one-shot
:class:`~._waiter.Waiter` in place of the future, since only its caller waits on it.
Many threads may share one publisher.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic

import nats

from .._errors import InvalidArgumentError, PublisherClosedError, UnsentTimeoutError
from .._inflight import RelayFuture, relay_factory
from .._messages import Ack, AckPolicy, K, V
from .._pipeline import Pipeline
from .._publisher import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_INFLIGHT,
    PublisherStats,
    PublishRecord,
)
from .._publisher import Publisher as AsyncPublisher
from .._transport import PublishTransport
from ._bridge import run
from ._future import LazyFuture
from ._handoff import Handoff
from ._portal import (
    check_blocking_allowed,
    on_close,
    on_loop_end,
    portal_closed_error,
    portal_loop,
    shared_portal,
    submit,
    wait,
)
from ._waiter import Waiter

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .._partitioning import PartitionerLike
    from .._transport import FastPath
    from ._client import Client

__all__ = ["Publisher"]

AckFuture = concurrent.futures.Future[Ack | None]
# Where an item's outcome goes: the future publish_async returned, or the waiter of a
# blocking publish.
Outcome = AckFuture | Waiter[Ack | None]

# A message that waited in the handoff longer than this has the rest of its time passed
# on as its timeout; quicker ones keep the async publisher's fast path (no timeout).
_WAITED_NOTICEABLY = 0.05
# At interpreter exit without close(): how long messages in flight get for their acks.
_EXIT_GRACE = 1.0

# What a queued publish carries: (future, when queued, kind, subject or stream, value,
# key, headers, ack policy, correlation id, expected offset, timeout, (partition,
# partitioner) or None). A tuple: the cheapest thing to build in the caller's thread.
_Item = tuple[
    Outcome,
    float,
    int,
    str,
    Any,
    Any,
    Mapping[str, bytes] | None,
    AckPolicy,
    str | None,
    int | None,
    float | None,
    tuple[int | None, "PartitionerLike | None"] | None,
]
_SUBJECT, _STREAM, _FLUSH = 0, 1, 2  # kinds of item


class Publisher(Generic[V, K]):
    """Publishes Liftbridge messages over NATS from plain threads and blocks for acks.

    The blocking face of :class:`liftbridge_nats.Publisher`, with the same methods and
    keyword arguments. It opens its own NATS connection on the SDK's background loop:
    ``servers`` (a URL or a list) and ``connect_options`` go to ``nats.connect``. The
    ``servers`` may also be a transport (:class:`liftbridge_nats.testing.MemoryTransport`),
    as the async publisher's ``nc`` may: then nothing connects to NATS. The
    other keyword arguments are the async publisher's; ``client`` is a blocking
    :class:`~liftbridge_nats.sync.Client`, needed for ``publish_to_stream``.

    ``max_queued`` bounds the messages published through this object and not settled
    yet (default: ``max_inflight``): beyond it callers block until acks free room, or
    until the publish's deadline passes (:class:`~liftbridge_nats.UnsentTimeoutError`,
    the message never sent).

    Use it as ``with Publisher("nats://...") as pub:``, or call :meth:`close`. One
    publisher may be shared by many threads. A process that exits without closing it
    gives the messages in flight a second for their acks.
    """

    def __init__(
        self,
        servers: str | Sequence[str] | PublishTransport = "nats://127.0.0.1:4222",
        *,
        client: Client | None = None,
        ack_timeout: float = 5.0,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        crc: bool = False,
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
        max_queued: int | None = None,
        **connect_options: Any,
    ) -> None:
        check_blocking_allowed("liftbridge_nats.sync.Publisher()", "liftbridge_nats.Publisher")
        if max_queued is not None and (not isinstance(max_queued, int) or max_queued < 1):
            raise InvalidArgumentError(f"max_queued must be an int >= 1, got {max_queued!r}")
        self._portal = shared_portal()
        self._loop = portal_loop(self._portal)
        self._closed = False
        self._budget = float(retry_deadline or 3 * ack_timeout) if retry else float(ack_timeout)
        room = max_queued if max_queued is not None else max_inflight

        async def open_() -> tuple[Any, AsyncPublisher[V, K], Handoff[_Item], Pipeline]:
            if isinstance(servers, PublishTransport):
                nc: Any = servers
            else:
                urls = servers if isinstance(servers, str) else list(servers)
                nc = await nats.connect(urls, **connect_options)
            try:
                pub: AsyncPublisher[V, K] = AsyncPublisher(
                    nc,
                    ack_timeout=ack_timeout,
                    max_inflight=max_inflight,
                    crc=crc,
                    client=None if client is None else client.aio,
                    retry=retry,
                    retry_deadline=retry_deadline,
                    no_responders=no_responders,
                    max_buffered_bytes=max_buffered_bytes,
                    resume_paused=resume_paused,
                    fast_path=fast_path,
                    tracing=tracing,
                    metrics=metrics,
                    value_serializer=value_serializer,
                    key_serializer=key_serializer,
                )
                await pub.start()
            except BaseException:
                if not isinstance(servers, PublishTransport):
                    await nc.close()
                raise
            handoff = Handoff(self._loop, room, self._hand, _fail, self._closed_error)
            pipeline = pub._pipeline  # the hot path, shared with the async face
            self._relay = relay_factory(
                self._loop, pipeline.ledger.discard, handoff.settled, pipeline.failed
            )
            return nc, pub, handoff, pipeline

        self._nc, self._aio, self._handoff, self._pipeline = wait(
            submit(open_, portal=self._portal)
        )
        self._unregister = on_close(self._close_at_exit, self._portal)
        self._unhook = on_loop_end(self._abandon, self._portal)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Publisher[V, K]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def aio(self) -> AsyncPublisher[V, K]:
        """The async :class:`liftbridge_nats.Publisher` underneath; use it only on the
        SDK's loop (in a rebalance listener, say)."""
        return self._aio

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._closed

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the counters (see :attr:`liftbridge_nats.Publisher.stats`)."""
        return run(self._portal, self._read_stats)

    async def _read_stats(self) -> PublisherStats:
        return self._aio.stats

    @property
    def pending(self) -> int:
        """Messages handed over and not settled yet (queued here or awaiting an ack)."""
        return self._handoff.queued + self._aio.pending

    @property
    def fast_path(self) -> FastPath:
        """Whether the async publisher uses its fast path to nats-py (see there)."""
        return self._aio.fast_path

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, wait up to ``timeout`` for acks, then close the NATS
        connection (see :meth:`liftbridge_nats.Publisher.close`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unregister()
        self._unhook()
        run(self._portal, self._aclose, timeout)

    async def _aclose(self, timeout: float | None) -> None:
        try:
            self._handoff.close()
            await self._aio.close(timeout)
        finally:
            if not isinstance(self._nc, PublishTransport):
                await self._nc.close()

    async def _close_at_exit(self) -> None:
        self._closed = True
        await self._aclose(_EXIT_GRACE)

    def _abandon(self) -> None:
        """The loop ended without closing this publisher (on the loop's thread, the loop
        stopped): fail every message still waiting, rather than leave its thread
        blocked on an ack that nothing will read any more."""
        self._closed = True
        self._handoff.abandon()
        error = portal_closed_error()
        for future in self._pipeline.ledger.outstanding():
            if isinstance(future, RelayFuture):
                future.abandon(error)

    def _closed_error(self) -> PublisherClosedError:
        return PublisherClosedError("this publisher is closed (close() or exit); create a new one")

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
    ) -> Ack | None:
        """Publish one message and block until its ack (None for ``AckPolicy.NONE``);
        see :meth:`liftbridge_nats.Publisher.publish` for the errors."""
        check_blocking_allowed(
            "liftbridge_nats.sync.Publisher.publish()", "liftbridge_nats.Publisher.publish"
        )
        waiter: Waiter[Ack | None] = Waiter()
        self._put(
            (
                waiter,
                time.monotonic(),
                _SUBJECT,
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                None,
            )
        )
        return waiter.wait()

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
    ) -> concurrent.futures.Future[Ack | None]:
        """Publish one message; return the future of its ack at once.

        Blocks only while ``max_queued`` messages are outstanding (then until room
        frees or the deadline passes). The future gives what :meth:`publish` would
        return or raise.
        """
        future: AckFuture = LazyFuture()
        self._put(
            (
                future,
                time.monotonic(),
                _SUBJECT,
                subject,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                None,
            )
        )
        return future

    def publish_to_stream_async(
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
    ) -> concurrent.futures.Future[Ack | None]:
        """Publish to a partition of ``stream``; return the future of its ack (see
        :meth:`liftbridge_nats.Publisher.publish_to_stream_async`)."""
        future: AckFuture = LazyFuture()
        self._put(
            (
                future,
                time.monotonic(),
                _STREAM,
                stream,
                value,
                key,
                headers,
                ack_policy,
                correlation_id,
                expected_offset,
                timeout,
                (partition, partitioner),
            )
        )
        return future

    def publish_to_stream(
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
        """Publish to a partition of ``stream`` and block until its ack (paused
        partitions resumed: see :meth:`liftbridge_nats.Publisher.publish_to_stream`)."""
        self._check_open()
        return run(
            self._portal,
            self._aio.publish_to_stream,
            stream,
            value,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            correlation_id=correlation_id,
            expected_offset=expected_offset,
            timeout=timeout,
            partition=partition,
            partitioner=partitioner,
        )

    def publish_batch(
        self,
        subject: str,
        items: Iterable[V | PublishRecord[V, K]],
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Publish many messages pipelined and return their acks in order (see
        :meth:`liftbridge_nats.Publisher.publish_batch`)."""
        self._check_open()
        return run(
            self._portal,
            self._aio.publish_batch,
            subject,
            list(items),  # read here, in the caller's thread
            ack_policy=ack_policy,
            timeout=timeout,
            return_exceptions=return_exceptions,
        )

    def flush(self, timeout: float | None = None) -> None:
        """Block until every message published so far (from any thread) is settled;
        :class:`~liftbridge_nats.AckTimeoutError` after ``timeout`` seconds."""
        check_blocking_allowed("liftbridge_nats.sync.Publisher.flush()", "Publisher.flush")
        # A marker through the handoff: the messages queued before it go first.
        future: AckFuture = concurrent.futures.Future()  # waited on at once: no LazyFuture
        marker = (future, time.monotonic(), _FLUSH, "", None, None)
        self._put((*marker, None, AckPolicy.LEADER, None, None, timeout, None))
        wait(future)

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _put(self, item: _Item) -> None:
        """Queue ``item``; an item that finds no room in time fails unsent."""
        if self._closed:
            raise self._closed_error()
        timeout = item[10]
        if timeout is None:
            budget = self._budget  # checked by the async publisher at construction
        elif isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgumentError(f"timeout must be > 0 seconds, got {timeout!r}")
        else:
            budget = timeout
        if not self._handoff.put(item, budget):
            if self._handoff.closed:
                raise self._closed_error()
            item[0].set_exception(_unsent(item[3], item[8], budget))

    def _hand(self, item: _Item) -> None:
        """Give one queued item to the async publisher (on the loop, no await)."""
        (
            future,
            queued_at,
            kind,
            target,
            value,
            key,
            headers,
            policy,
            cid,
            offset,
            timeout,
            extra,
        ) = item
        # (A future the caller cancelled meanwhile, at Ctrl-C, is sent all the same, as
        # a cancelled async publish may still be: a check here would cost every message
        # a lock.)
        if kind == _FLUSH:
            flushing = asyncio.ensure_future(self._aio.flush(timeout))
            flushing.add_done_callback(functools.partial(self._settle, future))
            return
        waited = time.monotonic() - queued_at
        if waited > _WAITED_NOTICEABLY or timeout is not None:
            # The deadline runs from the caller's call, not from here.
            timeout = (timeout or self._budget) - waited
            if timeout <= 0:
                _fail(item, _unsent(target, cid, waited))
                self._handoff.settled()
                return
        if kind == _SUBJECT:
            # The async publish() body, with an ack future that settles the caller's
            # straight from the ack handler (see RelayFuture): no done-callback, so no
            # extra turn of the loop per message.
            args = (target, value, key, headers, policy, cid, offset, timeout, False)
            pipeline = self._pipeline
            try:
                if pipeline.serializing:
                    args = pipeline.serialized(args)
                if pipeline.submit_now(args, functools.partial(self._relay, future)) is not None:
                    return
                ack: Any = asyncio.ensure_future(pipeline.call_waiting(args))
            except Exception as exc:
                _fail(item, exc)
                self._handoff.settled()
                return
        else:
            assert extra is not None
            ack = asyncio.ensure_future(
                _to_stream(
                    self._aio,
                    target,
                    value,
                    key=key,
                    headers=headers,
                    ack_policy=policy,
                    correlation_id=cid,
                    expected_offset=offset,
                    timeout=timeout,
                    partition=extra[0],
                    partitioner=extra[1],
                )
            )
        ack.add_done_callback(functools.partial(self._settle, future))

    def _settle(self, future: Outcome, done: asyncio.Future[Any]) -> None:
        """Copy an asyncio future's outcome to the caller's future, and free its room
        (a done-callback, on the loop)."""
        self._handoff.settled()
        try:
            try:
                result = done.result()
            except asyncio.CancelledError:
                future.set_exception(
                    PublisherClosedError("the publish was cancelled before its ack")
                )
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
        except concurrent.futures.InvalidStateError:  # the caller cancelled it (Ctrl-C)
            pass


async def _to_stream(aio: AsyncPublisher[Any, Any], stream: str, value: Any, **options: Any) -> Any:
    """publish_to_stream_async's ack, awaited (routing may await the control plane)."""
    return await (await aio.publish_to_stream_async(stream, value, **options))


def _unsent(subject: str, correlation_id: str | None, waited: float) -> UnsentTimeoutError:
    return UnsentTimeoutError(
        f"the message for {subject!r} waited {waited:.3g}s for room (max_queued messages "
        "were outstanding) and its deadline passed: it was never sent, so publishing it "
        "again is safe. Give it a longer timeout, raise max_queued, or publish fewer "
        "messages at once.",
        subject=subject,
        correlation_id=correlation_id,
    )


def _fail(item: _Item, error: BaseException) -> None:
    future = item[0]
    if not future.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled meanwhile
            future.set_exception(error)
