"""The blocking Client: the async gRPC client on the shared loop, method by method."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._checks import DEFAULT_MAX_PARTITIONS
from .._client import Client as AsyncClient
from .._grpc import TLSConfig
from .._messages import Ack, AckPolicy, K, StartPosition, StopPosition, V
from .._stream_reader import MAX_BYTES, MAX_MESSAGES
from ._bridge import on_loop, run
from ._consumer import Consumer
from ._portal import check_blocking_allowed, on_close, shared_portal, submit, wait
from ._subscription import BlockingIterator, Subscription

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from .._activity import ActivityEvent
    from .._checks import Duration
    from .._consumer import ConsumerRebalanceListener
    from .._metadata import Metadata, PartitionInfo, StreamInfo
    from .._partitioning import PartitionerLike
    from .._subscription import TimeSpec
    from ..serializers import Deserializer

__all__ = ["Client"]


class Client:
    """A blocking client of a Liftbridge cluster over its gRPC API.

    The blocking face of :class:`liftbridge_nats.Client`: the same arguments, methods
    and keyword arguments, each call blocking until done. It connects when created;
    ``with Client([...]) as client:`` closes it at the end of the block (or call
    :meth:`close`). One client may be shared by many threads.
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
        check_blocking_allowed("liftbridge_nats.sync.Client()", "liftbridge_nats.Client")
        self._portal = shared_portal()
        seeds = brokers if isinstance(brokers, str) else list(brokers)

        async def open_() -> AsyncClient:
            # Made on the loop: its channels and locks belong there.
            client = AsyncClient(
                seeds,
                tls=tls,
                timeout=timeout,
                resubscribe_wait=resubscribe_wait,
                metadata_max_age=metadata_max_age,
                max_partitions=max_partitions,
                read_ahead_messages=read_ahead_messages,
                read_ahead_bytes=read_ahead_bytes,
                metrics=metrics,
            )
            await client.connect()
            return client

        self._aio = wait(submit(open_, portal=self._portal))
        self._closed = False
        self._unregister = on_close(self._close_at_exit, self._portal)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def aio(self) -> AsyncClient:
        """The async :class:`liftbridge_nats.Client` underneath; use it only on the
        SDK's loop."""
        return self._aio

    def connect(self) -> None:
        """Reload the cluster metadata (the constructor connects already)."""
        run(self._portal, self._aio.connect)

    def close(self) -> None:
        """Close consumers, subscriptions and channels (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._unregister()
        run(self._portal, self._aio.close)

    async def _close_at_exit(self) -> None:
        self._closed = True
        await self._aio.close()

    @property
    def brokers(self) -> tuple[str, ...]:
        """Addresses of the brokers known from the last metadata fetch."""
        return self._aio.brokers

    # ------------------------------------------------------------------ streams

    def create_stream(
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
        """Create a stream recording NATS ``subject`` (see
        :meth:`liftbridge_nats.Client.create_stream`)."""
        run(
            self._portal,
            self._aio.create_stream,
            subject,
            name,
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
            timeout=timeout,
        )

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Delete a stream and its data (see :meth:`liftbridge_nats.Client.delete_stream`)."""
        run(self._portal, self._aio.delete_stream, name, timeout=timeout)

    def pause_stream(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        resume_all: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Pause some partitions, all when None (see
        :meth:`liftbridge_nats.Client.pause_stream`)."""
        run(self._portal, self._aio.pause_stream, name, partitions, resume_all, timeout=timeout)

    def resume_stream(
        self, name: str, partitions: Sequence[int] | None = None, *, timeout: float | None = None
    ) -> None:
        """Resume paused partitions, all when None (see
        :meth:`liftbridge_nats.Client.resume_stream`)."""
        run(self._portal, self._aio.resume_stream, name, partitions, timeout=timeout)

    def set_stream_readonly(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        readonly: bool = True,
        *,
        timeout: float | None = None,
    ) -> None:
        """Make partitions readonly, or writable again (see
        :meth:`liftbridge_nats.Client.set_stream_readonly`)."""
        run(
            self._portal,
            self._aio.set_stream_readonly,
            name,
            partitions,
            readonly,
            timeout=timeout,
        )

    # ------------------------------------------------------------------ metadata

    def fetch_metadata(
        self,
        streams: Iterable[str] | None = None,
        groups: Iterable[str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Metadata:
        """Fetch cluster metadata (see :meth:`liftbridge_nats.Client.fetch_metadata`)."""
        return run(self._portal, self._aio.fetch_metadata, streams, groups, timeout=timeout)

    def fetch_partition_metadata(
        self, stream: str, partition: int = 0, *, timeout: float | None = None
    ) -> PartitionInfo:
        """Fresh metadata of one partition, from its leader."""
        return run(
            self._portal, self._aio.fetch_partition_metadata, stream, partition, timeout=timeout
        )

    def stream_info(self, stream: str, *, refresh: bool = False) -> StreamInfo:
        """A stream's metadata from the cache (fetched when missing, stale or ``refresh``)."""
        return run(self._portal, self._aio.stream_info, stream, refresh=refresh)

    def partition_count(self, stream: str) -> int:
        """How many partitions ``stream`` has (cached)."""
        return run(self._portal, self._aio.partition_count, stream)

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
        """Read one partition as an iterator of :class:`~liftbridge_nats.Message`; a
        context manager too (see :meth:`liftbridge_nats.Client.subscribe`)."""
        sub = on_loop(
            self._portal,
            self._aio.subscribe,
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
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
        )
        return Subscription(sub, self._portal)

    def activity(
        self,
        *,
        start_position: StartPosition = StartPosition.EARLIEST,
        start_offset: int | None = None,
        start_time: TimeSpec | None = None,
        stop_position: StopPosition | None = None,
        stop_offset: int | None = None,
    ) -> BlockingIterator[ActivityEvent]:
        """Read the cluster's activity stream (see :meth:`liftbridge_nats.Client.activity`)."""
        events = on_loop(
            self._portal,
            self._aio.activity,
            start_position=start_position,
            start_offset=start_offset,
            start_time=start_time,
            stop_position=stop_position,
            stop_offset=stop_offset,
        )
        return BlockingIterator(events, self._portal, events.start, events.aclose)

    # ------------------------------------------------------------------ cursors

    def set_cursor(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Store ``offset`` as the position of cursor ``cursor_id`` on a partition."""
        run(
            self._portal,
            self._aio.set_cursor,
            cursor_id,
            stream,
            partition,
            offset,
            timeout=timeout,
        )

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int:
        """The stored offset of a cursor, -1 when it was never set."""
        return run(
            self._portal, self._aio.fetch_cursor, cursor_id, stream, partition, timeout=timeout
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
        """A member of consumer group ``group_id`` reading ``streams`` (see
        :meth:`liftbridge_nats.Client.consumer`). A ``listener``'s methods run on the
        SDK's loop thread: keep them short, and use the async consumer
        (``consumer.aio``) there, not the blocking one."""
        consumer = on_loop(
            self._portal,
            self._aio.consumer,
            group_id,
            streams,
            consumer_id=consumer_id,
            auto_checkpoint_interval=auto_checkpoint_interval,
            start_position=start_position,
            assignment_interval=assignment_interval,
            listener=listener,
            handover_wait=handover_wait,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
        )
        return Consumer(consumer, self._portal)

    # ------------------------------------------------------------------ publishing

    def publish(
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
        """Publish to a NATS subject over gRPC and wait for the ack (see
        :meth:`liftbridge_nats.Client.publish`); for throughput use the Publisher."""
        return run(
            self._portal,
            self._aio.publish,
            subject,
            value,
            key=key,
            headers=headers,
            ack_policy=ack_policy,
            correlation_id=correlation_id,
            timeout=timeout,
        )

    def publish_to_stream(
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
        """Publish to a partition of ``stream`` over gRPC and wait for the ack (see
        :meth:`liftbridge_nats.Client.publish_to_stream`)."""
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

    def publish_to_stream_async(
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
    ) -> concurrent.futures.Future[Ack | None]:
        """:meth:`publish_to_stream` returning the ack's future at once (see
        :meth:`liftbridge_nats.Client.publish_to_stream_async`)."""
        aio = self._aio

        async def go() -> Ack | None:
            return await (
                await aio.publish_to_stream_async(
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
            )

        return submit(go, portal=self._portal)
