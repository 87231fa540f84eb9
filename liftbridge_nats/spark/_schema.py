"""The fixed read schema of the ``liftbridge`` source and the checks on a sink's input.

Rows read from a stream always have the same eight columns; rows written need a
``value`` column and may carry ``key``, ``headers`` and ``partition``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from liftbridge_nats import InvalidArgumentError

__all__ = [
    "READ_SCHEMA",
    "WriteColumns",
    "arrow_read_schema",
    "check_read_schema",
    "check_write_schema",
    "read_schema",
]

READ_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("subject", StringType()),
        StructField("headers", MapType(StringType(), BinaryType())),
    ]
)
"""stream, partition, offset, key, value, timestamp, subject, headers."""


def read_schema(include_headers: bool) -> StructType:
    """The read schema; without the ``headers`` column when ``includeHeaders`` is false."""
    if include_headers:
        return READ_SCHEMA
    return StructType([f for f in READ_SCHEMA.fields if f.name != "headers"])


def arrow_read_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects for batches of ``schema`` (the reader's output).

    Spark compares a returned RecordBatch's schema with exactly this, so the reader
    builds its batches from it instead of from a hand-written Arrow schema.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_read_schema(schema: StructType, expected: StructType) -> None:
    """Refuse a user-given schema that is not the source's own (columns are fixed)."""
    if [f.name for f in schema.fields] != expected.fieldNames() or any(
        got.dataType != want.dataType
        for got, want in zip(schema.fields, expected.fields, strict=True)
    ):
        raise InvalidArgumentError(
            "the liftbridge source has a fixed schema "
            f"({expected.simpleString()}); drop the .schema(...) call or select "
            "columns after load()."
        )


class WriteColumns:
    """Positions of the sink's columns in the input batches (None when absent)."""

    __slots__ = ("headers", "key", "partition", "value", "value_is_string")

    def __init__(self, schema: StructType) -> None:
        names = schema.fieldNames()
        self.value: int = names.index("value")
        self.value_is_string: bool = isinstance(schema["value"].dataType, StringType)
        self.key: int | None = names.index("key") if "key" in names else None
        self.headers: int | None = names.index("headers") if "headers" in names else None
        self.partition: int | None = names.index("partition") if "partition" in names else None


def _is_bytes_like(t: DataType) -> bool:
    return isinstance(t, BinaryType | StringType)


def check_write_schema(schema: StructType) -> WriteColumns:
    """Check a sink's input schema and say where its columns are.

    ``value`` (binary or string) is required; ``key`` (binary or string), ``headers``
    (map of string to binary or string) and ``partition`` (an integer) are optional.
    Any other column is ignored.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise InvalidArgumentError(
            "the liftbridge sink needs a 'value' column (binary or string); input columns "
            f"are {sorted(fields)}. Rename or build one, e.g. to_json(struct(*)) AS value."
        )
    if not _is_bytes_like(fields["value"]):
        raise InvalidArgumentError(
            f"column 'value' must be binary or string, not {fields['value'].simpleString()}; "
            "cast it first."
        )
    if "key" in fields and not _is_bytes_like(fields["key"]):
        raise InvalidArgumentError(
            f"column 'key' must be binary or string, not {fields['key'].simpleString()}; "
            "cast it first."
        )
    if "headers" in fields:
        h = fields["headers"]
        if not (
            isinstance(h, MapType)
            and isinstance(h.keyType, StringType)
            and _is_bytes_like(h.valueType)
        ):
            raise InvalidArgumentError(
                "column 'headers' must be map<string,binary> or map<string,string>, not "
                f"{h.simpleString()}."
            )
    if "partition" in fields and not isinstance(
        fields["partition"], IntegerType | LongType | ShortType
    ):
        raise InvalidArgumentError(
            f"column 'partition' must be an integer, not {fields['partition'].simpleString()}."
        )
    return WriteColumns(schema)
