"""Turning objects into message values and keys, and back (as aiokafka does).

A serializer is any callable ``obj -> bytes``; a deserializer any callable
``bytes -> obj``. The publisher takes ``value_serializer`` / ``key_serializer``;
subscriptions and consumers take ``value_deserializer`` / ``key_deserializer``::

    from liftbridge_nats.serializers import MsgspecDeserializer, MsgspecSerializer

    Publisher(nc, value_serializer=MsgspecSerializer())            # structs, dataclasses
    client.subscribe("orders", value_deserializer=MsgspecDeserializer(Order))

Built in: :class:`JsonSerializer` / :class:`JsonDeserializer` (standard library),
:class:`StringSerializer` / :class:`StringDeserializer`, :class:`MsgspecSerializer` /
:class:`MsgspecDeserializer` (JSON or MessagePack, typed and validated; needs the
``msgspec`` extra) and :class:`ProtobufSerializer` / :class:`ProtobufDeserializer`
(protobuf message classes).

Errors are typed: a value the serializer cannot handle raises
:class:`~liftbridge_nats.SerializationError` before anything is sent, and
bytes the deserializer cannot decode raise
:class:`~liftbridge_nats.DeserializationError` naming the stream, partition and
offset, with the undecoded message attached; the reader stays usable. A key of None is
never passed to a key (de)serializer: it stays "no key".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from ._errors import DeserializationError, InvalidArgumentError, SerializationError
from ._messages import Message

if TYPE_CHECKING:
    from google.protobuf.message import Message as ProtoMessage

__all__ = [
    "Deserializer",
    "JsonDeserializer",
    "JsonSerializer",
    "MsgspecDeserializer",
    "MsgspecSerializer",
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "Serializer",
    "StringDeserializer",
    "StringSerializer",
    "deserialize_message",
    "serialize",
]

T = TypeVar("T")
P = TypeVar("P", bound="ProtoMessage")

Serializer = Callable[[Any], bytes]
"""Turns a value (or key) into the bytes to store."""
Deserializer = Callable[[bytes], T]
"""Turns stored bytes back into a value (or key)."""

Format = Literal["json", "msgpack"]


def _describe(obj: object) -> str:
    """A short description of an object for an error message: its type, never its
    contents (values may hold secrets or be huge)."""
    return type(obj).__qualname__


# ------------------------------------------------------------------ applying them


def serialize(
    serializer: Serializer, obj: object, *, what: str = "value", subject: str | None = None
) -> bytes:
    """``serializer(obj)``, checked: :class:`SerializationError` when it raises or
    returns anything but bytes (``bytearray`` and ``memoryview`` are copied to bytes)."""
    try:
        data = serializer(obj)
    except SerializationError:
        raise
    except Exception as exc:
        where = f" for {subject!r}" if subject else ""
        raise SerializationError(
            f"the {what} serializer could not serialize a {_describe(obj)}{where}: {exc}. "
            f"Nothing was sent; pass a {what} the serializer supports.",
            what=what,
            subject=subject,
        ) from exc
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise SerializationError(
        f"the {what} serializer returned a {_describe(data)}, not bytes. Nothing was sent; "
        "a serializer must return bytes.",
        what=what,
        subject=subject,
    )


def deserialize_message(
    message: Message,
    *,
    value_deserializer: Deserializer[Any] | None = None,
    key_deserializer: Deserializer[Any] | None = None,
) -> Message[Any, Any]:
    """``message`` with its value and key deserialized (those without a deserializer,
    and a key of None, are kept as they are).

    Raises :class:`DeserializationError` naming the message and carrying it undecoded
    (``raw_message``); nothing else about the reader changes, so reading can go on.
    """
    value, key = decoded_fields(message, value_deserializer, key_deserializer)
    return Message(
        message.stream,
        message.partition,
        message.offset,
        value,
        key,
        message.timestamp,
        message.subject,
        message.reply_subject,
        message.headers,
    )


def decoded_fields(
    message: Message,
    value_deserializer: Deserializer[Any] | None,
    key_deserializer: Deserializer[Any] | None,
) -> tuple[Any, Any]:
    """The value and key of ``message`` deserialized (each as is without its
    deserializer, a key of None as None); :class:`DeserializationError` otherwise.

    What :func:`deserialize_message` and the SDK's readers share; they build the
    message from these.
    """
    value: Any = message.value
    key: Any = message.key
    if value_deserializer is not None:
        value = _deserialize(value_deserializer, value, "value", message)
    if key_deserializer is not None and key is not None:
        key = _deserialize(key_deserializer, key, "key", message)
    return value, key


def _deserialize(deserializer: Deserializer[Any], data: bytes, what: str, message: Message) -> Any:
    try:
        return deserializer(data)
    except Exception as exc:
        raise DeserializationError(
            f"the {what} of the message at offset {message.offset} of stream "
            f"{message.stream!r}, partition {message.partition} ({len(data)} bytes) could "
            f"not be deserialized: {exc}. The message is in the error's raw_message; "
            "reading can continue with the next one.",
            stream=message.stream,
            partition=message.partition,
            offset=message.offset,
            what=what,
            raw_message=message,
        ) from exc


# ------------------------------------------------------------------ strings and JSON


class StringSerializer:
    """``str`` -> bytes in ``encoding`` (UTF-8 by default); handy for keys."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        "".encode(encoding)  # an unknown encoding fails here, not at the first message
        self.encoding = encoding

    def __call__(self, obj: str) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"expected a str, got {_describe(obj)}")
        return obj.encode(self.encoding)

    def __repr__(self) -> str:
        return f"StringSerializer({self.encoding!r})"


class StringDeserializer:
    """bytes -> ``str`` in ``encoding`` (UTF-8 by default), strictly."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        b"".decode(encoding)
        self.encoding = encoding

    def __call__(self, data: bytes) -> str:
        return data.decode(self.encoding)

    def __repr__(self) -> str:
        return f"StringDeserializer({self.encoding!r})"


class JsonSerializer:
    """Objects -> compact UTF-8 JSON with the standard library.

    ``default`` converts objects JSON does not know (as in :func:`json.dumps`);
    ``sort_keys`` gives equal dicts equal bytes. NaN and infinities are refused: they
    are not JSON and other languages' parsers reject them.
    """

    __slots__ = ("_encoder",)

    def __init__(
        self, *, default: Callable[[Any], Any] | None = None, sort_keys: bool = False
    ) -> None:
        self._encoder = json.JSONEncoder(
            default=default,
            sort_keys=sort_keys,
            ensure_ascii=False,
            allow_nan=False,
            separators=(",", ":"),
        )

    def __call__(self, obj: Any) -> bytes:
        return self._encoder.encode(obj).encode()

    def __repr__(self) -> str:
        return "JsonSerializer()"


class JsonDeserializer:
    """UTF-8 JSON -> Python objects with the standard library (``object_hook`` as in
    :func:`json.loads`)."""

    __slots__ = ("_decoder",)

    def __init__(self, *, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self._decoder = json.JSONDecoder(object_hook=object_hook)

    def __call__(self, data: bytes) -> Any:
        return self._decoder.decode(data.decode())

    def __repr__(self) -> str:
        return "JsonDeserializer()"


# ------------------------------------------------------------------ msgspec


def _msgspec() -> Any:
    try:
        import msgspec
    except ImportError:
        raise ImportError(
            "msgspec is not installed: pip install 'liftbridge-nats[msgspec]'"
        ) from None
    return msgspec


def _checked_format(format: object) -> Format:
    if format not in ("json", "msgpack"):
        raise InvalidArgumentError(f"format must be 'json' or 'msgpack', got {format!r}")
    return format


class MsgspecSerializer:
    """Objects -> JSON or MessagePack with msgspec: ``msgspec.Struct`` types,
    dataclasses, attrs classes, and the usual builtins (fast; the ``msgspec`` extra).

    ``enc_hook`` converts other types (see msgspec's documentation).
    """

    __slots__ = ("_encode", "format")

    def __init__(
        self, format: Format = "json", *, enc_hook: Callable[[Any], Any] | None = None
    ) -> None:
        msgspec = _msgspec()
        self.format = _checked_format(format)
        module = msgspec.json if format == "json" else msgspec.msgpack
        self._encode: Callable[[Any], bytes] = module.Encoder(enc_hook=enc_hook).encode

    def __call__(self, obj: Any) -> bytes:
        return self._encode(obj)

    def __repr__(self) -> str:
        return f"MsgspecSerializer({self.format!r})"


class MsgspecDeserializer(Generic[T]):
    """JSON or MessagePack -> objects of ``type`` with msgspec, validated on the way
    (a ``msgspec.Struct``, a dataclass, ``list[Order]``...; by default any JSON-like
    value). ``strict=False`` lets strings stand for numbers and the like."""

    __slots__ = ("_decode", "format", "type")

    @overload
    def __init__(
        self: MsgspecDeserializer[Any],
        type: None = None,
        format: Format = "json",
        *,
        strict: bool = True,
        dec_hook: Callable[[Any, Any], Any] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        type: type[T],
        format: Format = "json",
        *,
        strict: bool = True,
        dec_hook: Callable[[Any, Any], Any] | None = None,
    ) -> None: ...

    def __init__(
        self,
        type: Any = None,
        format: Format = "json",
        *,
        strict: bool = True,
        dec_hook: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        msgspec = _msgspec()
        self.format = _checked_format(format)
        self.type = Any if type is None else type
        module = msgspec.json if format == "json" else msgspec.msgpack
        self._decode: Callable[[bytes], T] = module.Decoder(
            self.type, strict=strict, dec_hook=dec_hook
        ).decode

    def __call__(self, data: bytes) -> T:
        return self._decode(data)

    def __repr__(self) -> str:
        return f"MsgspecDeserializer({self.type!r}, {self.format!r})"


# ------------------------------------------------------------------ protobuf


class ProtobufSerializer:
    """Protobuf messages -> their wire bytes.

    ``message_class`` (optional) restricts it to one class, so that a message of the
    wrong type fails here rather than in the reader.
    """

    __slots__ = ("message_class",)

    def __init__(self, message_class: type[ProtoMessage] | None = None) -> None:
        from google.protobuf.message import Message as ProtoMessage

        if message_class is not None and not (
            isinstance(message_class, type) and issubclass(message_class, ProtoMessage)
        ):
            raise TypeError(
                f"message_class must be a protobuf message class, got {message_class!r}"
            )
        self.message_class: type[ProtoMessage] = message_class or ProtoMessage

    def __call__(self, obj: ProtoMessage) -> bytes:
        if not isinstance(obj, self.message_class):
            raise TypeError(f"expected a {self.message_class.__name__}, got {_describe(obj)}")
        data: bytes = obj.SerializeToString()
        return data

    def __repr__(self) -> str:
        return f"ProtobufSerializer({self.message_class.__name__})"


class ProtobufDeserializer(Generic[P]):
    """Wire bytes -> messages of ``message_class`` (a generated protobuf class)."""

    __slots__ = ("message_class",)

    def __init__(self, message_class: type[P]) -> None:
        from google.protobuf.message import Message as ProtoMessage

        if not (isinstance(message_class, type) and issubclass(message_class, ProtoMessage)):
            raise TypeError(
                f"message_class must be a protobuf message class, got {message_class!r}"
            )
        self.message_class = message_class

    def __call__(self, data: bytes) -> P:
        message = self.message_class()
        message.ParseFromString(data)
        return message

    def __repr__(self) -> str:
        return f"ProtobufDeserializer({self.message_class.__name__})"
