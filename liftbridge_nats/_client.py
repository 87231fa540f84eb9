"""The gRPC client: stream administration, metadata, reading, cursors, groups.

``Client`` is the public face; where calls go and how they are retried lives in
:mod:`._router`, reading in :mod:`._subscription`, cursors in :mod:`._cursors`, consumer
groups in :mod:`._consumer` and the activity stream in :mod:`._activity`. Publishing over
gRPC is here for completeness: the NATS-native :class:`~liftbridge_nats.Publisher`
is the fast path.
"""

# Per-call ``timeout`` arguments are part of the public API (seconds, retries included).

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _cursors
from ._activity import ActivityStream
from ._checks import (
    DEFAULT_MAX_PARTITIONS,
    INT32_MAX,
    Duration,
    check_callable,
    check_int,
    check_name,
    check_partition,
    check_partitions,
    check_seconds,
    check_stream_name,
    check_stream_subject,
)
from ._consumer import Consumer, ConsumerRebalanceListener
from ._errors import InvalidArgumentError, LiftbridgeError, NoSuchStreamError
from ._grpc import TLSConfig, parse_brokers
from ._grpc_publish import AsyncPublisher, publish_error
from ._ids import CorrelationIds
from ._log import get_logger
from ._messages import Ack, AckPolicy, K, StartPosition, StopPosition, V
from ._metadata import Metadata, PartitionInfo, StreamInfo, partition_from_proto
from ._metrics import metrics_for
from ._partitioning import PartitionerLike
from ._proto import api_pb2
from ._requests import create_stream_request, message_fields, publish_request
from ._router import Router
from ._routes import StreamRoutes
from ._stream_reader import MAX_BYTES, MAX_MESSAGES, MIN_WINDOW
from ._subscription import Subscription, TimeSpec, subscription_options
from .wire import ack_from_proto

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

    from opentelemetry.metrics import MeterProvider

    from ._read_transport import ReadTransport
    from ._router import Stub
    from .serializers import Deserializer

__all__ = ["DEFAULT_MAX_PARTITIONS", "REPLICATION_MAX", "Client", "TLSConfig"]

REPLICATION_MAX = -1
"""``replication_factor`` that asks for one replica on every broker."""

_log = get_logger("client")


class Client:
    """An asyncio client of a Liftbridge cluster over its gRPC API.

    ``brokers`` is a list of ``"host:port"`` addresses or one comma-separated string;
    the client discovers the rest of the cluster from them. ``tls`` is a
    :class:`TLSConfig` (or True for TLS with the system's CA roots). ``timeout`` bounds
    each call, retries included. ``resubscribe_wait`` bounds how long a subscription
    looks for a new partition leader after losing the old one. ``max_partitions`` is
    the most partitions :meth:`create_stream` asks for in one stream
    (:data:`DEFAULT_MAX_PARTITIONS`, 256, unless given): the server sets up every
    partition on each replica at once, and a very large count keeps it busy long after
    the call has timed out. Each subscription (and each partition a consumer reads)
    reads ahead of its consumer about ``read_ahead_messages`` messages (at the sizes
    seen so far) and at most ``read_ahead_bytes`` bytes of them as sent (at least
    16 KiB), so memory grows with the partitions read, by that much each. The one
    exception is a message larger than ``read_ahead_bytes``, let through whole: until
    it is taken, that partition's read-ahead may reach its size instead (64 MiB at
    most: a subscription ends with an error on a larger message).

    ``metrics``: subscriptions and consumers count the messages and value bytes they
    read, per stream and partition (and group), for OpenTelemetry's
    ``messaging.client.consumed.messages`` and ``liftbridge.client.consumed.bytes``
    (the ``otel`` extra): True reports through the global meter provider, a
    ``MeterProvider`` through that one, False not at all.

    Use it as ``async with Client([...]) as client:``; leaving the block closes every
    channel and subscription.
    """

    def __init__(
        self,
        brokers: str | Iterable[str],
        *,
        tls: TLSConfig | bool | None = None,
        timeout: float = 10.0,
        resubscribe_wait: float = 30.0,
        metadata_max_age: float = 30.0,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        read_ahead_messages: int = MAX_MESSAGES,
        read_ahead_bytes: int = MAX_BYTES,
        metrics: bool | MeterProvider = True,
    ) -> None:
        self._metrics = metrics_for(metrics)
        check_seconds(timeout, "timeout")
        check_seconds(resubscribe_wait, "resubscribe_wait")
        check_seconds(metadata_max_age, "metadata_max_age", zero=True)
        self._max_partitions = check_int(max_partitions, "max_partitions", low=1, high=INT32_MAX)
        check_int(read_ahead_messages, "read_ahead_messages", low=1)
        check_int(read_ahead_bytes, "read_ahead_bytes", low=MIN_WINDOW)
        tls_config = TLSConfig() if tls is True else (tls or None)
        self._router = Router(
            parse_brokers(brokers),
            tls=tls_config,
            timeout=timeout,
            metadata_max_age=metadata_max_age,
            read_ahead_messages=read_ahead_messages,
            read_ahead_bytes=read_ahead_bytes,
        )
        self._resubscribe_wait = resubscribe_wait
        self._async_publisher: AsyncPublisher | None = None
        # Correlation ids of the messages published without one (see CorrelationIds).
        self._ids = CorrelationIds()
        self._publish_request = functools.partial(publish_request, new_id=self._ids.new)
        self._consumers: weakref.WeakSet[Consumer[Any, Any]] = weakref.WeakSet()
        # The Publisher's stream routes, reading this client's metadata cache.
        self._routes = StreamRoutes(self, remember=False)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Reach a broker and load the cluster metadata (``async with`` does this)."""
        try:
            await self._router.refresh()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close consumers (they checkpoint and leave), then the channels (idempotent).

        Subscriptions still open end their iteration.
        """
        for consumer in list(self._consumers):
            await consumer.close()  # checkpoints and leaves while channels are open
        publisher, self._async_publisher = self._async_publisher, None
        if publisher is not None:
            await publisher.close()
        await self._router.close()

    @property
    def brokers(self) -> tuple[str, ...]:
        """Addresses of the brokers known from the last metadata fetch."""
        return tuple(b.address for b in self._router.cache.current.brokers) or self._router.seeds

    # ------------------------------------------------------------------ streams

    async def create_stream(
        self,
        subject: str,
        name: str,
        *,
        group: str | None = None,
        replication_factor: int = 1,
        partitions: int = 1,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        retention_max_age: Duration | None = None,
        cleaner_interval: Duration | None = None,
        segment_max_bytes: int | None = None,
        segment_max_age: Duration | None = None,
        compact_enabled: bool | None = None,
        compact_max_goroutines: int | None = None,
        auto_pause_time: Duration | None = None,
        auto_pause_disable_if_subscribers: bool | None = None,
        min_isr: int | None = None,
        optimistic_concurrency_control: bool | None = None,
        encryption: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        """Create a stream recording NATS ``subject``.

        Options left at None take the server's defaults. Durations are
        :class:`~datetime.timedelta` or seconds. ``replication_factor``
        :data:`REPLICATION_MAX` (-1) puts a replica on every broker. ``group`` makes
        the stream's partitions a NATS queue group: streams sharing a group share the
        subject's messages instead of each getting all of them.

        Names are checked before anything is sent, against what the server can store
        (Liftbridge accepts names it cannot store and then crashes on them): a stream
        name is 1 to 255 bytes of UTF-8, not ``.`` or ``..``, without ``/``, NUL,
        whitespace, control characters, ``*`` or ``>``, and without empty parts between
        dots; a group has no whitespace or control characters and at most 255 bytes; a
        subject has at most 3,584 bytes, and one ending in ``>`` allows one partition
        only. ``partitions`` may not exceed the client's ``max_partitions``.
        A refused argument raises :class:`InvalidArgumentError` naming the rule.

        Raises :class:`StreamExistsError` when the name is taken.
        """
        req = create_stream_request(
            subject,
            name,
            max_partitions=self._max_partitions,
            group=group,
            replication_factor=replication_factor,
            partitions=partitions,
            retention_max_bytes=retention_max_bytes,
            retention_max_messages=retention_max_messages,
            retention_max_age=retention_max_age,
            cleaner_interval=cleaner_interval,
            segment_max_bytes=segment_max_bytes,
            segment_max_age=segment_max_age,
            compact_enabled=compact_enabled,
            compact_max_goroutines=compact_max_goroutines,
            auto_pause_time=auto_pause_time,
            auto_pause_disable_if_subscribers=auto_pause_disable_if_subscribers,
            min_isr=min_isr,
            optimistic_concurrency_control=optimistic_concurrency_control,
            encryption=encryption,
        )

        async def call(stub: Stub, left: float) -> None:
            await stub.CreateStream(req, timeout=left)

        await self._router.call_any(f"create stream {name!r}", call, timeout=timeout)
        await self._settle(name, exists=True)

    async def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Delete a stream and its data. Raises :class:`NoSuchStreamError` if unknown.

        The name is checked as in :meth:`create_stream`: the server deletes the
        directory named after the stream, so a name such as ``..`` must never reach it.
        """
        req = api_pb2.DeleteStreamRequest(name=check_stream_name(name))

        async def call(stub: Stub, left: float) -> None:
            await stub.DeleteStream(req, timeout=left)

        await self._router.call_any(f"delete stream {name!r}", call, timeout=timeout)
        await self._settle(name, exists=False)

    async def pause_stream(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        resume_all: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Pause some partitions (all when None): they stop recording until resumed.

        A paused partition drops NATS publishes silently. It resumes on a gRPC publish,
        a subscription with ``resume=True``, or :meth:`resume_stream`; with
        ``resume_all`` resuming one partition resumes every paused one.
        """
        req = api_pb2.PauseStreamRequest(
            name=check_name(name, "stream name"),
            partitions=check_partitions(partitions),
            resumeAll=resume_all,
        )

        async def call(stub: Stub, left: float) -> None:
            await stub.PauseStream(req, timeout=left)

        await self._router.call_any(f"pause stream {name!r}", call, timeout=timeout)

    async def resume_stream(
        self, name: str, partitions: Sequence[int] | None = None, *, timeout: float | None = None
    ) -> None:
        """Resume paused partitions (all when None); running ones are left alone.

        The API has no resume call: the server resumes a partition when a subscriber
        asks for it, so this opens and closes a ``resume=True`` subscription on each.
        (Liftbridge v1.9.0 keeps reporting ``paused=True`` in metadata after a resume;
        ``PartitionInfo.pause_changed`` shows when it last changed.)
        """
        info = await self.stream_info(check_name(name, "stream name"), refresh=True)
        targets = list(info.partitions) if partitions is None else check_partitions(partitions)
        for pid in targets:
            if pid not in info.partitions:
                raise NoSuchStreamError(f"stream {name!r} has no partition {pid}", code="NOT_FOUND")
            sub = self.subscribe(name, partition=pid, resume=True)
            try:
                await sub.start()
            finally:
                await sub.aclose()
        _log.info("resumed stream %r partitions %s", name, ", ".join(map(str, targets)) or "none")
        await self._router.fetch_metadata([name], timeout=timeout)

    async def set_stream_readonly(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        readonly: bool = True,
        *,
        timeout: float | None = None,
    ) -> None:
        """Make partitions (all when None) readonly, or writable again with ``readonly=False``.

        Publishes to a readonly partition fail (:class:`ReadonlyPartitionError` over
        gRPC); subscriptions end after the last message.
        """
        req = api_pb2.SetStreamReadonlyRequest(
            name=check_name(name, "stream name"),
            partitions=check_partitions(partitions),
            readonly=readonly,
        )

        async def call(stub: Stub, left: float) -> None:
            await stub.SetStreamReadonly(req, timeout=left)

        await self._router.call_any(f"set stream {name!r} readonly", call, timeout=timeout)

    async def _settle(self, name: str, *, exists: bool) -> None:
        """Read our own write: wait (briefly) until every broker's metadata shows it.

        Each broker answers from its own copy of the Raft log, which can trail the
        leader by some milliseconds; without this, a publish or metadata read right
        after create_stream may reach a broker that does not know the stream yet.
        """
        await self._router.await_stream_state(name, exists=exists, within=2.0)
        with contextlib.suppress(LiftbridgeError):
            await self._router.fetch_metadata([name])  # update the cache

    # ------------------------------------------------------------------ metadata

    async def fetch_metadata(
        self,
        streams: Iterable[str] | None = None,
        groups: Iterable[str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Metadata:
        """Fetch cluster metadata: brokers, the given streams (all when None), groups.

        Streams and groups the cluster does not know are left out of the result.
        """
        if isinstance(streams, str) or isinstance(groups, str):
            raise InvalidArgumentError("streams and groups are lists of names, not one string")
        return await self._router.fetch_metadata(streams, groups, timeout=timeout)

    async def fetch_partition_metadata(
        self, stream: str, partition: int = 0, *, timeout: float | None = None
    ) -> PartitionInfo:
        """Fresh metadata of one partition, from its leader (exact high watermark)."""
        req = api_pb2.FetchPartitionMetadataRequest(
            stream=check_name(stream, "stream name"), partition=check_partition(partition)
        )

        async def call(stub: Stub, left: float) -> PartitionInfo:
            resp = await stub.FetchPartitionMetadata(req, timeout=left)
            return partition_from_proto(resp.metadata)

        info = await self._router.call_leader(
            f"fetch metadata of {stream!r}/{partition}", stream, partition, call, timeout=timeout
        )
        self._router.cache.replace_partition(stream, info)
        return info

    async def stream_info(self, stream: str, *, refresh: bool = False) -> StreamInfo:
        """A stream's metadata from the cache (fetched when missing, stale or ``refresh``)."""
        cache = self._router.cache
        info = None if refresh or cache.stale else cache.current.streams.get(stream)
        if info is None:
            info = (await self._router.fetch_metadata([stream])).streams.get(stream)
        if info is None:
            raise NoSuchStreamError(
                f"no stream {stream!r} in the cluster; create it first", code="NOT_FOUND"
            )
        return info

    async def partition_count(self, stream: str) -> int:
        """How many partitions ``stream`` has (cached)."""
        return (await self.stream_info(stream)).partition_count

    # ------------------------------------------------------------------ reading

    def subscribe(
        self,
        stream: str,
        *,
        partition: int = 0,
        start_position: StartPosition | None = None,
        start_offset: int | None = None,
        start_time: TimeSpec | None = None,
        stop_position: StopPosition | None = None,
        stop_offset: int | None = None,
        stop_time: TimeSpec | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
        value_deserializer: Deserializer[V] | None = None,
        key_deserializer: Deserializer[K] | None = None,
    ) -> Subscription[V, K]:
        """Read one partition as an async iterator of :class:`Message`.

        Start: NEW_ONLY (default), OFFSET (``start_offset``), EARLIEST, LATEST, or
        TIMESTAMP (``start_time``: a datetime, a timedelta meaning "that long ago", or
        seconds since the epoch); giving ``start_offset``/``start_time`` alone picks the
        position. Stop: ON_CANCEL (default, follow new messages), OFFSET (inclusive
        ``stop_offset``), LATEST (the newest message when subscribing), TIMESTAMP
        (``stop_time``); the iteration ends cleanly there. ``read_isr_replica`` reads
        from a random in-sync replica instead of the leader; ``resume`` resumes a paused
        partition first. Arguments are checked now (:class:`InvalidArgumentError`);
        the server is contacted on ``start()``, ``async with`` or the first message.

        ``value_deserializer`` / ``key_deserializer`` (any callable ``bytes -> object``,
        see :mod:`liftbridge_nats.serializers`) turn the stored bytes into the
        message's ``value`` / ``key`` (a key of None stays None). A message they
        refuse is raised as :class:`~liftbridge_nats.DeserializationError`
        (stream, partition, offset and the undecoded ``raw_message``); the next
        message follows on the next iteration.
        """
        check_callable(value_deserializer, "value_deserializer")
        check_callable(key_deserializer, "key_deserializer")
        options = subscription_options(
            stream,
            partition=partition,
            start_position=start_position,
            start_offset=start_offset,
            start_time=start_time,
            stop_position=stop_position,
            stop_offset=stop_offset,
            stop_time=stop_time,
            read_isr_replica=read_isr_replica,
            resume=resume,
        )
        return Subscription(
            self._router,
            options,
            transport=self._reads,
            resubscribe_wait=self._resubscribe_wait,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
            metrics=self._metrics,
        )

    @property
    def _reads(self) -> ReadTransport:
        """Where subscriptions and consumers read from: the HTTP/2 pool's calls."""
        return self._router.pool.read_transport

    def activity(
        self,
        *,
        start_position: StartPosition = StartPosition.EARLIEST,
        start_offset: int | None = None,
        start_time: TimeSpec | None = None,
        stop_position: StopPosition | None = None,
        stop_offset: int | None = None,
    ) -> ActivityStream:
        """Read the cluster's activity stream as typed :class:`ActivityEvent` records.

        The brokers must run with ``activity.stream.enabled: true``.
        """
        if start_offset is not None or start_time is not None:
            start_position_arg: StartPosition | None = None
        else:
            start_position_arg = start_position
        return ActivityStream(
            self.subscribe(
                "__activity",
                start_position=start_position_arg,
                start_offset=start_offset,
                start_time=start_time,
                stop_position=stop_position,
                stop_offset=stop_offset,
            )
        )

    # ------------------------------------------------------------------ cursors

    async def set_cursor(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Store ``offset`` as the position of cursor ``cursor_id`` on a stream partition."""
        await _cursors.set_cursor(
            self._router, cursor_id, stream, partition, offset, timeout=timeout
        )

    async def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int:
        """The stored offset of a cursor, -1 when it was never set."""
        return await _cursors.fetch_cursor(
            self._router, cursor_id, stream, partition, timeout=timeout
        )

    # ------------------------------------------------------------------ groups

    def consumer(
        self,
        group_id: str,
        streams: str | Sequence[str],
        *,
        consumer_id: str | None = None,
        auto_checkpoint_interval: float | None = 5.0,
        start_position: StartPosition | None = StartPosition.EARLIEST,
        assignment_interval: float | None = None,
        listener: ConsumerRebalanceListener | None = None,
        handover_wait: float = 0.5,
        value_deserializer: Deserializer[V] | None = None,
        key_deserializer: Deserializer[K] | None = None,
    ) -> Consumer[V, K]:
        """A member of consumer group ``group_id`` reading ``streams``.

        ``async with client.consumer("g", ["orders"]) as consumer: async for msg in
        consumer: ...`` (or ``getmany``). Partitions are assigned by the group
        coordinator. Positions are committed to cursors every
        ``auto_checkpoint_interval`` seconds, when a partition is handed to another
        member and on close; with None, commits are manual: only
        ``await consumer.commit()`` stores positions. A partition without a stored
        position starts at ``start_position`` (EARLIEST, LATEST or NEW_ONLY; None
        makes it an error). ``assignment_interval`` overrides the heartbeat interval
        the server suggests (40% of its consumer timeout). ``listener`` is told of
        partitions assigned and revoked. ``handover_wait`` is how long a member taking
        a partition over waits for the previous owner's last commit before it reads.
        ``value_deserializer`` / ``key_deserializer`` work as in :meth:`subscribe`; a
        message they refuse is raised (by ``async for``, ``getmany`` or ``getone``) as
        :class:`~liftbridge_nats.DeserializationError` and counts as delivered:
        the partition's position moves past it and a commit stores it.
        """
        check_callable(value_deserializer, "value_deserializer")
        check_callable(key_deserializer, "key_deserializer")
        consumer: Consumer[V, K] = Consumer(
            self._router,
            group_id,
            [streams] if isinstance(streams, str) else list(streams),
            transport=self._reads,
            consumer_id=consumer_id,
            auto_checkpoint_interval=auto_checkpoint_interval,
            start_position=start_position,
            assignment_interval=assignment_interval,
            resubscribe_wait=self._resubscribe_wait,
            listener=listener,
            handover_wait=handover_wait,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
            metrics=self._metrics,
        )
        self._consumers.add(consumer)
        return consumer

    # ------------------------------------------------------------------ publishing
    # The names follow one rule on both faces (here and the Publisher): ``publish`` takes
    # a NATS subject, ``*_to_stream`` a stream (with ``partition`` or ``partitioner``),
    # and ``*_async`` returns the ack's future instead of the ack.

    async def publish(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publish to a NATS subject through a broker (gRPC ``PublishToSubject``) and
        wait for the ack (None with ``AckPolicy.NONE``).

        The ack is the first stream's when several streams record the subject. The
        server takes no expected offset on this call: use :meth:`publish_to_stream` for
        optimistic concurrency. For throughput use the NATS-native
        :class:`~liftbridge_nats.Publisher`, whose ``publish`` takes the same arguments.
        """
        fields = message_fields(value, key, headers, ack_policy, correlation_id, self._ids.new)
        req = api_pb2.PublishToSubjectRequest(subject=check_stream_subject(subject), **fields)

        async def call(stub: Stub, left: float) -> Ack | None:
            resp = await stub.PublishToSubject(req, timeout=left)
            return ack_from_proto(resp.ack) if resp.HasField("ack") else None

        try:
            return await self._router.call_any(
                f"publish to subject {subject!r}", call, timeout=timeout
            )
        except LiftbridgeError as exc:
            raise publish_error(exc) from None

    async def publish_to_stream(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
        partition: int | None = None,
        partitioner: PartitionerLike | None = None,
    ) -> Ack | None:
        """Publish to a partition of ``stream`` (gRPC ``Publish``) and wait for the ack
        (None with ``AckPolicy.NONE``).

        ``partition`` picks the partition; otherwise ``partitioner`` does (the same
        partitioners as the Publisher's, given the partition count from the cached
        metadata); with neither the message goes to partition 0. A publish also resumes
        a paused partition. Raises :class:`ReadonlyPartitionError`,
        :class:`IncorrectOffsetError`, :class:`NoSuchStreamError` and the like when the
        server rejects it. For throughput use the NATS-native Publisher.
        """
        partition = await self._partition_for(stream, key, value, partition, partitioner)
        req = self._publish_request(
            stream, value, key, partition, headers, ack_policy, correlation_id, expected_offset
        )

        async def call(stub: Stub, left: float) -> Ack | None:
            resp = await stub.Publish(req, timeout=left)
            return ack_from_proto(resp.ack) if resp.HasField("ack") else None

        try:
            return await self._router.call_any(f"publish to {stream!r}", call, timeout=timeout)
        except LiftbridgeError as exc:
            raise publish_error(exc) from None

    async def publish_to_stream_async(
        self,
        stream: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        correlation_id: str | None = None,
        expected_offset: int | None = None,
        timeout: float | None = None,
        partition: int | None = None,
        partitioner: PartitionerLike | None = None,
    ) -> asyncio.Future[Ack | None]:
        """:meth:`publish_to_stream` over one long-lived gRPC ``PublishAsync`` stream:
        returns the future of the ack once the message is written (or its deadline
        passed).

        The future ends with the message's :class:`Ack` or with a typed error, never
        with anything else: :class:`AckTimeoutError` when no ack came within
        ``timeout`` seconds of this call (default: the client's ``timeout``; the
        message may or may not be stored, unless the error says it was never written,
        as happens to messages queued behind writes that a broker no longer reads),
        :class:`AckLostError` when the stream ended first (it may or may not be
        stored), or the refusal the broker sent (:class:`IncorrectOffsetError`,
        :class:`ReadonlyPartitionError`...). It resolves to None once written for
        ``AckPolicy.NONE``. The call raises :class:`NotConnectedError` when the stream
        broke before the message was written (nothing was sent; publish again).
        """
        if timeout is not None:
            check_seconds(timeout, "timeout")
        partition = await self._partition_for(stream, key, value, partition, partitioner)
        req = self._publish_request(
            stream, value, key, partition, headers, ack_policy, correlation_id, expected_offset
        )
        if self._async_publisher is None:
            self._async_publisher = AsyncPublisher(self._router)
        return await self._async_publisher.send(
            req, self._router.timeout if timeout is None else timeout
        )

    async def _partition_for(
        self,
        stream: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        partitioner: PartitionerLike | None,
    ) -> int:
        """The partition a message goes to: ``partition`` (checked with the rest of the
        request), else the partitioner's choice, else 0, chosen by the same stream routes
        as the Publisher's (from the metadata cache: no routes of its own to keep)."""
        return await self._routes.partition(stream, key, value, partition, partitioner)
