"""A read chunk's columns and the Arrow batch built from them: pure, no Spark session."""

from __future__ import annotations

import datetime as dt
from itertools import pairwise
from typing import Any, cast

import pyarrow as pa
import pytest

from liftbridge_nats import Message
from liftbridge_nats.spark._columns import Columns
from liftbridge_nats.spark._schema import arrow_read_schema, read_schema

NS = 1_700_000_000_123_456_789


def _proto(**fields: Any) -> Any:
    """A Message as Subscribe streams it (serialized and parsed again)."""
    from liftbridge_nats._proto import api_pb2

    return api_pb2.Message.FromString(api_pb2.Message(**fields).SerializeToString())


def _columns() -> Columns:
    cols = Columns("orders", 2)
    cols.add_protos(
        [
            # The server's own headers only: an empty map.
            _proto(offset=10, value=b"a", timestamp=NS, subject="orders.2",
                   headers={"subject": b"orders.2"}),
            # A user header beside the server's: only the user's is kept.
            _proto(offset=11, value=b"b", key=b"k", timestamp=NS + 1000, subject="orders.2",
                   headers={"reply": b"", "h": b"1"}),
            # No header at all, an empty value.
            _proto(offset=12, key=b"k2", timestamp=NS + 2000, subject="orders.2"),
        ]
    )  # fmt: skip
    return cols


def test_batch_in_the_read_schema() -> None:
    schema = arrow_read_schema(read_schema(True))
    cols = _columns()
    assert len(cols) == 3
    batch = cols.to_batch(schema)
    assert batch.schema.equals(schema)
    rows = batch.to_pylist()
    assert [r["stream"] for r in rows] == ["orders"] * 3
    assert [r["partition"] for r in rows] == [2, 2, 2]
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert [r["key"] for r in rows] == [None, b"k", b"k2"]
    assert [r["value"] for r in rows] == [b"a", b"b", b""]
    assert [r["subject"] for r in rows] == ["orders.2"] * 3
    assert [r["headers"] for r in rows] == [[], [("h", b"1")], []]
    # Nanoseconds become Spark's microseconds (truncated).
    first = dt.datetime.fromtimestamp(NS // 1000 / 1e6, dt.UTC)
    assert rows[0]["timestamp"] == first
    assert batch.column(batch.schema.get_field_index("timestamp")).cast(pa.int64()).to_pylist() == [
        NS // 1000,
        NS // 1000 + 1,
        NS // 1000 + 2,
    ]


def test_batch_without_headers() -> None:
    schema = arrow_read_schema(read_schema(False))
    batch = _columns().to_batch(schema)
    assert batch.schema.equals(schema)
    assert "headers" not in batch.schema.names
    assert batch.num_rows == 3


def test_empty_chunk() -> None:
    schema = arrow_read_schema(read_schema(True))
    cols = Columns("orders", 0)
    assert not cols
    assert cols.to_batch(schema).num_rows == 0


def test_unknown_column_is_refused() -> None:
    schema = pa.schema([pa.field("nope", pa.int64())])
    with pytest.raises(ValueError, match="no column 'nope'"):
        _columns().to_batch(schema)


def _protos() -> list[Any]:
    return [
        _proto(**fields)
        for fields in cast(
            tuple[dict[str, Any], ...],
            (
                {"offset": 10, "value": b"a", "subject": "orders.2", "timestamp": NS},
                {"offset": 11, "headers": {"subject": b"orders.2", "reply": b""}, "key": b"k"},
                {"offset": 12, "headers": {"reply": b"r"}, "value": b"v", "replySubject": "r"},
                {"offset": 13, "headers": {"subject": b"s", "h": b"1"}},
                {"offset": 14, "headers": {"a": b"", "b": b"\xff", "reply": b""}, "key": b""},
                {"offset": 15, "headers": {"h": b"2"}, "timestamp": NS + 5000},
            ),
        )
    ]


def test_protos_fill_the_columns_as_their_messages_do() -> None:
    from liftbridge_nats.wire import message_from_proto

    schema = arrow_read_schema(read_schema(True))
    from_protos = Columns("orders", 2)
    from_protos.add_protos(_protos())
    assert len(from_protos) == 6
    # Each field as the Message built from the same protobuf has it; of the headers,
    # only those the server did not add itself.
    messages: list[Message] = [message_from_proto(pb) for pb in _protos()]
    assert from_protos.offsets == [m.offset for m in messages]
    assert from_protos.keys == [m.key for m in messages]
    assert from_protos.values == [m.value for m in messages]
    assert from_protos.timestamps == [m.timestamp for m in messages]
    assert from_protos.subjects == [m.subject for m in messages]
    user_headers = [
        {k: v for k, v in m.headers.items() if k not in ("subject", "reply")} for m in messages
    ]
    ends = from_protos.header_ends
    assert [
        dict(zip(from_protos.header_keys[a:b], from_protos.header_values[a:b], strict=True))
        for a, b in pairwise(ends)
    ] == user_headers
    # Offsets known to run on without a gap (10 to 15) are not read one by one.
    in_runs = Columns("orders", 2)
    in_runs.add_protos(_protos()[:4], 10)
    in_runs.add_protos(_protos()[4:], 14)
    assert in_runs.to_batch(schema).equals(from_protos.to_batch(schema))
    rows = from_protos.to_batch(schema).to_pylist()
    # (A protobuf map keeps no order.)
    assert [sorted(r["headers"]) for r in rows] == [
        [],
        [],
        [],
        [("h", b"1")],
        [("a", b""), ("b", b"\xff")],
        [("h", b"2")],
    ]
    assert [r["key"] for r in rows] == [None, b"k", None, None, None, None]
