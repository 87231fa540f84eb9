"""liftbridge-nats: an asyncio Python SDK for Liftbridge.

Design in one breath: the data path is NATS-native (messages go onto NATS subjects
wrapped in the Liftbridge envelope, acks come back on a NATS inbox) and is built on a
sans-IO codec (``envelope``, ``wire``) that knows no sockets; the control plane and
the read path go over Liftbridge's gRPC API. Protobuf stays inside; the public surface
is frozen dataclasses, enums and one error family rooted at ``LiftbridgeError``.
"""

from .envelope import Envelope, MsgType
from .errors import (
    AckTimeoutError,
    BrokerUnavailableError,
    ConsumerGroupError,
    EncryptionError,
    EnvelopeError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    MessageTooLargeError,
    NoLeaderError,
    NoSuchStreamError,
    NotConnectedError,
    PublisherClosedError,
    PublishError,
    PublishRejectedError,
    ReadonlyPartitionError,
    RpcError,
    ServerStartError,
    StreamExistsError,
)
from .messages import Ack, AckError, AckPolicy, Message, StartPosition, StopPosition

__version__ = "0.1.0"

__all__ = [
    "Ack",
    "AckError",
    "AckPolicy",
    "AckTimeoutError",
    "BrokerUnavailableError",
    "ConsumerGroupError",
    "EncryptionError",
    "Envelope",
    "EnvelopeError",
    "IncorrectOffsetError",
    "InvalidArgumentError",
    "LiftbridgeError",
    "Message",
    "MessageTooLargeError",
    "MsgType",
    "NoLeaderError",
    "NoSuchStreamError",
    "NotConnectedError",
    "PublishError",
    "PublishRejectedError",
    "PublisherClosedError",
    "ReadonlyPartitionError",
    "RpcError",
    "ServerStartError",
    "StartPosition",
    "StopPosition",
    "StreamExistsError",
    "__version__",
]
