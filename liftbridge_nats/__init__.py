"""liftbridge-nats: an asyncio Python SDK for Liftbridge.

Design in one breath: the data path is NATS-native (``Publisher`` puts messages onto
NATS subjects in the Liftbridge envelope and matches the acks it reads on its own inbox)
and rests on a sans-IO codec (``envelope``, ``wire``) that knows no sockets; the control
plane and the read path (``Client``) go over Liftbridge's gRPC API. Protobuf stays
inside; the public surface is frozen dataclasses, enums and one error family rooted at
``LiftbridgeError``, every name of it importable from here. The modules that implement
it are private (``_publisher``, ``_client``, ``_errors``...); the public modules are
this one, the codec (``envelope``, ``wire``), ``serializers``, ``tracing``, and the
optional layers: the Spark data source (``liftbridge_nats.spark``), the test harness
(``liftbridge_nats.testing``) and the command line (``liftbridge_nats.cli``).

Publishing follows one naming rule on both faces: ``publish`` takes a NATS subject,
``publish_to_stream`` a stream (with ``partition`` or ``partitioner``), and the
``_async`` variants return the ack's future instead of the ack.

Every error carries three flags, read instead of the class tree: ``maybe_stored`` (the
call may have taken effect), ``retriable`` (the same call can succeed later) and
``invalid_metadata`` (refresh cached metadata first); it is a :class:`LocalError` (the
SDK raised it) or a :class:`RemoteError` (a server sent it). :func:`for_grpc_status` and
:func:`for_ack_error` give the class for a server's code.
"""

import importlib
import inspect
from types import FunctionType
from typing import TYPE_CHECKING, Any, get_type_hints

# Before anything of the package imports grpc (see the module).
from . import _fork_safety  # noqa: F401
from ._ack_listener import AckListener
from ._acks import AckStats
from ._checks import DEFAULT_MAX_PARTITIONS
from ._errors import (
    ACK_ERRORS,
    GRPC_STATUS_ERRORS,
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
    UnsentTimeoutError,
    for_ack_error,
    for_grpc_status,
)
from ._messages import Ack, AckError, AckPolicy, Message, StartPosition, StopPosition
from ._metadata import BrokerInfo, EventTimestamps, GroupInfo, Metadata, PartitionInfo, StreamInfo
from ._partitioning import (
    KeyPartitioner,
    Partitioner,
    PartitionerLike,
    PartitionFunction,
    RandomPartitioner,
    RoundRobinPartitioner,
    partition_subject,
)
from ._publisher import Publisher, PublisherStats, PublishRecord
from ._transport import FastPath
from .envelope import Envelope, MsgType

# The gRPC side (the Client and what hangs off it) is imported on first use: a process
# that only publishes never loads grpc, which saves about 12 MiB and its import time.
_GRPC_SIDE = {
    "TLSConfig": "._grpc",
    "ActivityEvent": "._activity",
    "ActivityOp": "._activity",
    "ActivityStream": "._activity",
    "REPLICATION_MAX": "._client",
    "Client": "._client",
    "group_cursor_id": "._cursors",
    "Consumer": "._consumer",
    "ConsumerRebalanceListener": "._consumer",
    "StreamPartition": "._consumer",
    "PartitionLag": "._lag",
    "consumer_lag": "._lag",
    "group_lag": "._lag",
    "partition_lag": "._lag",
    "Subscription": "._subscription",
    "TimeSpec": "._subscription",
}

if TYPE_CHECKING:
    from ._activity import ActivityEvent, ActivityOp, ActivityStream
    from ._client import REPLICATION_MAX, Client
    from ._consumer import Consumer, ConsumerRebalanceListener, StreamPartition
    from ._cursors import group_cursor_id
    from ._grpc import TLSConfig
    from ._lag import PartitionLag, consumer_lag, group_lag, partition_lag
    from ._subscription import Subscription, TimeSpec


# Where each claimed class or function is implemented (the API reference reads its
# source there).
_IMPLEMENTED_IN: dict[str, str] = {}


def _claim(name: str, value: object) -> None:
    """Show a class or function of a private module as ``liftbridge_nats.X`` (in reprs,
    tracebacks and pickles), as httpx does."""
    if isinstance(value, type | FunctionType) and value.__module__.startswith(__name__ + "._"):
        _IMPLEMENTED_IN[name] = value.__module__
        if isinstance(value, type):
            _resolve_annotations(value)
        value.__module__ = __name__


def _resolve_annotations(cls: type) -> None:
    """Evaluate a class's own string annotations where it is implemented.

    ``typing.get_type_hints`` looks a class's annotations up in the module its
    ``__module__`` names; once that is this package, names the implementing module
    imported for them (``ClassVar``, ``Mapping``...) would be missing. Functions keep
    their own globals and need nothing.
    """
    own = inspect.get_annotations(cls)
    if not own:
        return
    try:
        hints = get_type_hints(cls, include_extras=True)
    except NameError:  # a name imported for type checkers only: left as it was
        return
    cls.__annotations__ = {key: hints[key] for key in own}


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all

    def __getattr__(name: str) -> Any:
        module = _GRPC_SIDE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        _claim(name, value)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_GRPC_SIDE))


__version__ = "0.1.0"

__all__ = [
    "ACK_ERRORS",
    "DEFAULT_MAX_PARTITIONS",
    "GRPC_STATUS_ERRORS",
    "REPLICATION_MAX",
    "Ack",
    "AckError",
    "AckListener",
    "AckLostError",
    "AckPolicy",
    "AckStats",
    "AckTimeoutError",
    "ActivityEvent",
    "ActivityOp",
    "ActivityStream",
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
    "FastPath",
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
    "PartitionFunction",
    "PartitionInfo",
    "PartitionLag",
    "PartitionPausedError",
    "Partitioner",
    "PartitionerLike",
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
    "TimeSpec",
    "UnsentTimeoutError",
    "__version__",
    "consumer_lag",
    "for_ack_error",
    "for_grpc_status",
    "group_cursor_id",
    "group_lag",
    "partition_lag",
    "partition_subject",
]

# The lazy names are claimed on first use.
for _name in __all__:
    if _name not in _GRPC_SIDE and _name != "__version__":
        _claim(_name, globals()[_name])
del _name
