"""Built-in serializers and the typed errors around them (no servers)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import msgspec
import pytest

from liftbridge_nats import (
    DeserializationError,
    InvalidArgumentError,
    LiftbridgeError,
    Message,
    SerializationError,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.serializers import (
    Deserializer,
    Format,
    JsonDeserializer,
    JsonSerializer,
    MsgspecDeserializer,
    MsgspecSerializer,
    ProtobufDeserializer,
    ProtobufSerializer,
    Serializer,
    StringDeserializer,
    StringSerializer,
    deserialize_message,
    serialize,
)


class Order(msgspec.Struct):
    id: int
    item: str
    qty: float = 1.0


@dataclasses.dataclass
class Point:
    x: int
    y: int


def stored(value: bytes, key: bytes | None = None, offset: int = 7) -> Message:
    return Message("orders", 2, offset, value, key, 123, "orders.2", "", {"h": b"1"})


# ------------------------------------------------------------------ round trips


def test_json_round_trip() -> None:
    ser, de = JsonSerializer(), JsonDeserializer()
    obj = {"id": 1, "name": "café", "tags": ["a", None], "ok": True}
    data = ser(obj)
    assert data == '{"id":1,"name":"café","tags":["a",null],"ok":true}'.encode()
    assert de(data) == obj
    assert JsonSerializer(sort_keys=True)({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert JsonSerializer(default=str)({"p": Point(1, 2)}) == b'{"p":"Point(x=1, y=2)"}'


def test_string_round_trip() -> None:
    assert StringSerializer()("é") == "é".encode()
    assert StringDeserializer("latin-1")(b"\xe9") == "é"
    with pytest.raises(LookupError):
        StringSerializer("no-such-codec")


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_msgspec_structs_and_dataclasses(fmt: Format) -> None:
    order = Order(1, "apple", 2.5)
    data = MsgspecSerializer(fmt)(order)
    assert MsgspecDeserializer(Order, fmt)(data) == order
    assert MsgspecDeserializer(format=fmt)(data) == {"id": 1, "item": "apple", "qty": 2.5}
    assert MsgspecDeserializer(Point, fmt)(MsgspecSerializer(fmt)(Point(3, 4))) == Point(3, 4)
    many = MsgspecDeserializer(list[Order], fmt)(MsgspecSerializer(fmt)([order, order]))
    assert many == [order, order]
    if fmt == "json":
        assert data == b'{"id":1,"item":"apple","qty":2.5}'
    else:
        assert data == msgspec.msgpack.encode(order)


def test_msgspec_validates_on_the_way_in() -> None:
    de = MsgspecDeserializer(Order)
    with pytest.raises(msgspec.ValidationError):
        de(b'{"id":"one","item":"x"}')
    assert MsgspecDeserializer(Order, strict=False)(b'{"id":"1","item":"x"}') == Order(1, "x")
    with pytest.raises(InvalidArgumentError, match="'json' or 'msgpack'"):
        MsgspecSerializer("yaml")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        MsgspecDeserializer(Order, "cbor")  # type: ignore[call-overload]


def test_protobuf_round_trip() -> None:
    msg = api_pb2.Ack(stream="orders", offset=41, correlationId="c-1")
    data = ProtobufSerializer()(msg)
    back = ProtobufDeserializer(api_pb2.Ack)(data)
    assert isinstance(back, api_pb2.Ack) and back == msg
    strict = ProtobufSerializer(api_pb2.Ack)
    assert strict(msg) == data
    with pytest.raises(TypeError, match="expected a Ack, got Message"):
        strict(api_pb2.Message(value=b"x"))
    with pytest.raises(TypeError, match="protobuf message class"):
        ProtobufDeserializer(dict)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="protobuf message class"):
        ProtobufSerializer(Order)  # type: ignore[arg-type]


# ------------------------------------------------------------------ serialization errors


@pytest.mark.parametrize(
    ("serializer", "value"),
    [
        (JsonSerializer(), {"when": object()}),
        (JsonSerializer(), math.nan),
        (MsgspecSerializer(), object()),
        (MsgspecSerializer("msgpack"), {1j: 2}),
        (ProtobufSerializer(), {"not": "a protobuf message"}),
        (StringSerializer(), 42),
    ],
)
def test_a_value_that_cannot_be_serialized_raises_a_typed_error(
    serializer: Serializer, value: object
) -> None:
    with pytest.raises(SerializationError) as info:
        serialize(serializer, value, subject="orders")
    err = info.value
    assert isinstance(err, LiftbridgeError) and isinstance(err, InvalidArgumentError)
    assert err.what == "value" and err.subject == "orders"
    assert err.__cause__ is not None
    assert "Nothing was sent" in str(err) and type(value).__qualname__ in str(err)


def test_serialize_checks_what_the_serializer_returns() -> None:
    # Serializers typed to return bytes may return other bytes-like objects at run time
    # (accepted, copied to bytes) or anything at all (refused).
    assert serialize(lambda v: bytearray(b"ab"), 1) == b"ab"  # type: ignore[arg-type, return-value]
    assert serialize(lambda v: memoryview(b"cd"), 1) == b"cd"  # type: ignore[arg-type, return-value]
    with pytest.raises(SerializationError, match="returned a str, not bytes") as info:
        serialize(lambda v: "text", 1, what="key")  # type: ignore[arg-type, return-value]
    assert info.value.what == "key" and info.value.subject is None


def test_serialization_errors_never_show_the_value() -> None:
    secret = {"password": "hunter2", "blob": object()}
    with pytest.raises(SerializationError) as info:
        serialize(JsonSerializer(), secret)
    assert "hunter2" not in str(info.value)


# ------------------------------------------------------------------ deserialization


def test_deserialize_message_keeps_the_rest_of_the_message() -> None:
    raw = stored(b'{"id":1,"item":"pear"}', key=b"k-1")
    msg = deserialize_message(
        raw, value_deserializer=MsgspecDeserializer(Order), key_deserializer=StringDeserializer()
    )
    assert msg.value == Order(1, "pear") and msg.key == "k-1"
    assert (msg.stream, msg.partition, msg.offset, msg.timestamp) == ("orders", 2, 7, 123)
    assert (msg.subject, msg.headers) == ("orders.2", {"h": b"1"})
    # No key: the key deserializer is not called; no deserializer: bytes stay bytes.
    nokey = deserialize_message(stored(b"[1]"), key_deserializer=StringDeserializer())
    assert nokey.key is None and nokey.value == b"[1]"


@pytest.mark.parametrize(
    ("deserializer", "data"),
    [
        (JsonDeserializer(), b"{not json"),
        (JsonDeserializer(), b"\xff\xfe\xfa"),
        (MsgspecDeserializer(Order), b'{"id":"x"}'),
        (MsgspecDeserializer(Order, "msgpack"), b"\xc1"),
        (ProtobufDeserializer(api_pb2.Ack), b"\xff\xff\xff"),
        (StringDeserializer(), b"\xff"),
    ],
)
def test_bytes_that_cannot_be_deserialized_name_the_message(
    deserializer: Deserializer[object], data: bytes
) -> None:
    raw = stored(data, offset=1234)
    with pytest.raises(DeserializationError) as info:
        deserialize_message(raw, value_deserializer=deserializer)
    err = info.value
    assert isinstance(err, LiftbridgeError)
    assert (err.stream, err.partition, err.offset, err.what) == ("orders", 2, 1234, "value")
    assert err.raw_message is raw and err.__cause__ is not None
    assert "offset 1234" in str(err) and "'orders'" in str(err) and "partition 2" in str(err)


def test_a_bad_key_is_reported_as_the_key() -> None:
    with pytest.raises(DeserializationError) as info:
        deserialize_message(stored(b"v", key=b"\xff"), key_deserializer=StringDeserializer())
    assert info.value.what == "key"


def test_reading_goes_on_after_a_bad_message() -> None:
    """The pattern a subscription follows: one bad message raises, the next ones decode."""
    batch = [stored(b"1", offset=0), stored(b"oops", offset=1), stored(b"3", offset=2)]
    decoded, failed = [], []
    for raw in batch:
        try:
            decoded.append(deserialize_message(raw, value_deserializer=JsonDeserializer()))
        except DeserializationError as exc:
            failed.append(exc.offset)
    assert [m.value for m in decoded] == [1, 3] and failed == [1]


def test_msgspec_missing_gives_an_install_hint() -> None:
    code = (
        "import sys\n"
        "sys.modules['msgspec'] = None\n"
        "from liftbridge_nats.serializers import MsgspecSerializer, JsonSerializer\n"
        "JsonSerializer()\n"
        "try:\n"
        "    MsgspecSerializer()\n"
        "except ImportError as exc:\n"
        "    assert 'liftbridge-nats[msgspec]' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
