"""Cluster metadata as frozen records, and the cache the client keeps of it.

FetchMetadata can be answered by any broker; each answers from its own copy of the
Raft state, so a fresh answer may still lag a change made a moment ago. The client
treats its cache as a hint: a call that reaches the wrong broker refreshes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from ._messages import ns_to_datetime
from ._proto import api_pb2

__all__ = [
    "BrokerInfo",
    "EventTimestamps",
    "GroupInfo",
    "Metadata",
    "MetadataCache",
    "PartitionInfo",
    "StreamInfo",
]

_EMPTY: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A Liftbridge broker of the cluster."""

    id: str
    host: str
    port: int
    partition_count: int = 0
    leader_count: int = 0

    @property
    def address(self) -> str:
        """``host:port`` of the broker's gRPC API."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class EventTimestamps:
    """First and latest time (ns since the epoch, 0 = never) an event happened."""

    first: int = 0
    latest: int = 0

    @property
    def first_time(self) -> datetime | None:
        """``first`` as an aware datetime, None if the event never happened."""
        return ns_to_datetime(self.first) if self.first else None

    @property
    def latest_time(self) -> datetime | None:
        """``latest`` as an aware datetime, None if the event never happened."""
        return ns_to_datetime(self.latest) if self.latest else None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a stream: where it lives and how far its log goes.

    ``leader`` is a broker id ("" while no leader is elected); ``high_watermark`` is the
    last committed offset and ``newest_offset`` the last offset written (-1 when empty).
    """

    id: int
    leader: str
    replicas: tuple[str, ...] = ()
    isr: tuple[str, ...] = ()
    high_watermark: int = -1
    newest_offset: int = -1
    paused: bool = False
    readonly: bool = False
    messages_received: EventTimestamps = EventTimestamps()
    pause_changed: EventTimestamps = EventTimestamps()
    readonly_changed: EventTimestamps = EventTimestamps()


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream: its NATS subject and its partitions by id."""

    name: str
    subject: str
    creation_timestamp: int
    partitions: Mapping[int, PartitionInfo]

    @property
    def creation_time(self) -> datetime:
        """When the stream was created."""
        return ns_to_datetime(self.creation_timestamp)

    @property
    def partition_count(self) -> int:
        """How many partitions the stream has."""
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group: the broker coordinating it and its current epoch."""

    id: str
    coordinator: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Metadata:
    """A snapshot of the cluster: brokers, streams (by name), consumer groups (by id)."""

    brokers: tuple[BrokerInfo, ...]
    streams: Mapping[str, StreamInfo] = field(default_factory=lambda: MappingProxyType({}))
    groups: Mapping[str, GroupInfo] = field(default_factory=lambda: MappingProxyType({}))

    def broker(self, broker_id: str) -> BrokerInfo | None:
        """The broker with this id, if known."""
        for broker in self.brokers:
            if broker.id == broker_id:
                return broker
        return None

    def partition(self, stream: str, partition: int) -> PartitionInfo | None:
        """The partition's record, if the stream and partition are known."""
        info = self.streams.get(stream)
        return None if info is None else info.partitions.get(partition)


def _timestamps(pb: api_pb2.PartitionEventTimestamps) -> EventTimestamps:
    return EventTimestamps(pb.firstTimestamp, pb.latestTimestamp)


def partition_from_proto(pb: api_pb2.PartitionMetadata) -> PartitionInfo:
    """Convert a protobuf ``PartitionMetadata``."""
    return PartitionInfo(
        id=pb.id,
        leader=pb.leader,
        replicas=tuple(pb.replicas),
        isr=tuple(pb.isr),
        high_watermark=pb.highWatermark,
        newest_offset=pb.newestOffset,
        paused=pb.paused,
        readonly=pb.readonly,
        messages_received=_timestamps(pb.messagesReceivedTimestamps),
        pause_changed=_timestamps(pb.pauseTimestamps),
        readonly_changed=_timestamps(pb.readonlyTimestamps),
    )


def _stream_from_proto(pb: api_pb2.StreamMetadata) -> StreamInfo:
    parts = {pid: partition_from_proto(p) for pid, p in sorted(pb.partitions.items())}
    return StreamInfo(pb.name, pb.subject, pb.creationTimestamp, MappingProxyType(parts))


class MetadataCache:
    """The latest metadata the client saw, merged across partial fetches.

    A fetch for some streams replaces only those streams (and drops the ones the server
    says are unknown); a fetch for every stream replaces them all.
    """

    def __init__(self, max_age: float = 30.0) -> None:
        self.max_age = max_age
        self._metadata = Metadata(brokers=())
        self._updated = 0.0

    @property
    def current(self) -> Metadata:
        """The cached snapshot (empty before the first fetch)."""
        return self._metadata

    @property
    def stale(self) -> bool:
        """True when the cache is older than ``max_age`` seconds (or never filled)."""
        return time.monotonic() - self._updated > self.max_age

    def update(
        self,
        resp: api_pb2.FetchMetadataResponse,
        streams: Iterable[str] | None,
        groups: Iterable[str] | None,
    ) -> Metadata:
        """Merge a FetchMetadata response; returns the snapshot of what was asked."""
        brokers = tuple(
            BrokerInfo(b.id, b.host, b.port, b.partitionCount, b.leaderCount) for b in resp.brokers
        )
        fresh = {
            s.name: _stream_from_proto(s)
            for s in resp.streamMetadata
            if s.error == api_pb2.StreamMetadata.OK
        }
        fresh_groups = {
            g.groupId: GroupInfo(g.groupId, g.coordinator, g.epoch)
            for g in resp.groupMetadata
            if g.error == api_pb2.ConsumerGroupMetadata.OK
        }
        old = self._metadata
        if streams is None:
            merged = dict(fresh)
        else:
            merged = dict(old.streams)
            for name in streams:
                merged.pop(name, None)
            merged.update(fresh)
        merged_groups = dict(old.groups)
        for gid in groups or ():
            merged_groups.pop(gid, None)
        merged_groups.update(fresh_groups)
        self._metadata = Metadata(
            brokers=brokers or old.brokers,
            streams=MappingProxyType(merged),
            groups=MappingProxyType(merged_groups),
        )
        if streams is None:
            self._updated = time.monotonic()
        return Metadata(
            brokers=self._metadata.brokers,
            streams=MappingProxyType(fresh),
            groups=MappingProxyType(fresh_groups),
        )

    def replace_partition(self, stream: str, info: PartitionInfo) -> None:
        """Store a partition record fetched from its leader."""
        current = self._metadata.streams.get(stream)
        if current is None:
            return
        parts = dict(current.partitions)
        parts[info.id] = info
        streams = dict(self._metadata.streams)
        streams[stream] = StreamInfo(
            current.name, current.subject, current.creation_timestamp, MappingProxyType(parts)
        )
        self._metadata = Metadata(
            self._metadata.brokers, MappingProxyType(streams), self._metadata.groups
        )
