"""liftbridge-nats: an asyncio Python SDK for Liftbridge.

Design in one breath: the data path is NATS-native (``Publisher`` puts messages onto
NATS subjects in the Liftbridge envelope and matches the acks it reads on its own inbox)
and rests on a sans-IO codec (``envelope``, ``wire``) that knows no sockets; the control
plane and the read path (``Client``) go over Liftbridge's gRPC API. Protobuf stays
inside; the public surface is frozen dataclasses, enums and one error family rooted at
``LiftbridgeError``. The Spark data source (``liftbridge_nats.spark``) and the test
harness (``liftbridge_nats.testing``) are optional layers over this surface.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .acks import AckStats
from .envelope import Envelope, MsgType
from .errors import (
    AckLostError,
    AckTimeoutError,
    BadRequestError,
    BrokerUnavailableError,
    ClientClosedError,
    ConsumerGroupError,
    CursorsDisabledError,
    DeserializationError,
    EncryptionError,
    EnvelopeError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    LocalError,
    MaxBytesExceededError,
    MaxPayloadExceededError,
    MessageTooLargeError,
    NoLeaderError,
    NoRespondersError,
    NoStoredPositionError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotAssignedError,
    NotConnectedError,
    NotLeaderError,
    PartitionPausedError,
    PublisherClosedError,
    PublishError,
    PublishRejectedError,
    ReadonlyPartitionError,
    RemoteError,
    RetriedIncorrectOffsetError,
    RpcError,
    RpcTimeoutError,
    SerializationError,
    ServerError,
    ServerStartError,
    StreamExistsError,
)
from .messages import Ack, AckError, AckPolicy, Message, StartPosition, StopPosition
from .metadata import BrokerInfo, EventTimestamps, GroupInfo, Metadata, PartitionInfo, StreamInfo
from .partitioning import (
    KeyPartitioner,
    Partitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    partition_subject,
)
from .publisher import Publisher, PublisherStats, PublishRecord

# The gRPC side (the Client and what hangs off it) is imported on first use: a process
# that only publishes never loads grpc, which saves about 12 MiB and its import time.
_GRPC_SIDE = {
    "TLSConfig": "._grpc",
    "ActivityEvent": ".activity",
    "ActivityOp": ".activity",
    "REPLICATION_MAX": ".client",
    "Client": ".client",
    "Consumer": ".groups",
    "ConsumerRebalanceListener": ".groups",
    "StreamPartition": ".groups",
    "PartitionLag": ".lag",
    "Subscription": ".subscription",
}

if TYPE_CHECKING:
    from ._grpc import TLSConfig
    from .activity import ActivityEvent, ActivityOp
    from .client import REPLICATION_MAX, Client
    from .groups import Consumer, ConsumerRebalanceListener, StreamPartition
    from .lag import PartitionLag
    from .subscription import Subscription


def __getattr__(name: str) -> Any:
    module = _GRPC_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_GRPC_SIDE))


__version__ = "0.1.0"

__all__ = [
    "REPLICATION_MAX",
    "Ack",
    "AckError",
    "AckLostError",
    "AckPolicy",
    "AckStats",
    "AckTimeoutError",
    "ActivityEvent",
    "ActivityOp",
    "BadRequestError",
    "BrokerInfo",
    "BrokerUnavailableError",
    "Client",
    "ClientClosedError",
    "Consumer",
    "ConsumerGroupError",
    "ConsumerRebalanceListener",
    "CursorsDisabledError",
    "DeserializationError",
    "EncryptionError",
    "Envelope",
    "EnvelopeError",
    "EventTimestamps",
    "GroupInfo",
    "IncorrectOffsetError",
    "InvalidArgumentError",
    "KeyPartitioner",
    "LiftbridgeError",
    "LocalError",
    "MaxBytesExceededError",
    "MaxPayloadExceededError",
    "Message",
    "MessageTooLargeError",
    "Metadata",
    "MsgType",
    "NoLeaderError",
    "NoRespondersError",
    "NoStoredPositionError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotAssignedError",
    "NotConnectedError",
    "NotLeaderError",
    "PartitionInfo",
    "PartitionLag",
    "PartitionPausedError",
    "Partitioner",
    "PublishError",
    "PublishRecord",
    "PublishRejectedError",
    "Publisher",
    "PublisherClosedError",
    "PublisherStats",
    "RandomPartitioner",
    "ReadonlyPartitionError",
    "RemoteError",
    "RetriedIncorrectOffsetError",
    "RoundRobinPartitioner",
    "RpcError",
    "RpcTimeoutError",
    "SerializationError",
    "ServerError",
    "ServerStartError",
    "StartPosition",
    "StopPosition",
    "StreamExistsError",
    "StreamInfo",
    "StreamPartition",
    "Subscription",
    "TLSConfig",
    "__version__",
    "partition_subject",
]
