"""A chunk of one partition's messages held as columns, and its Arrow record batch.

A read task gathers thousands of messages per chunk. Their fields (ints, bytes,
strings) are copied column by column straight from the parsed protobufs
(:meth:`Columns.add_protos`): no ``Message`` and no headers dict is built per row, and
the chunk holds no objects that Python's cyclic garbage collector would scan again and
again while it fills.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from liftbridge_nats._proto import api_pb2

__all__ = ["Columns"]

# Headers the server itself stores on every message (the NATS subject and reply
# subject); they are already columns, or meaningless to readers.
_SERVER_HEADERS = frozenset({"subject", "reply"})


class Columns:
    """The fields of consecutive messages of one stream partition, in order."""

    __slots__ = (
        "header_ends",
        "header_keys",
        "header_values",
        "keys",
        "offsets",
        "partition",
        "stream",
        "subjects",
        "timestamps",
        "values",
    )

    def __init__(self, stream: str, partition: int) -> None:
        self.stream = stream
        self.partition = partition
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.timestamps: list[int] = []
        self.subjects: list[str] = []
        # The headers as a flat map column: message i has the pairs
        # [header_ends[i], header_ends[i + 1]) of header_keys / header_values.
        self.header_ends: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[bytes] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_protos(self, pbs: Sequence[api_pb2.Message], first: int | None = None) -> None:
        """Append the fields of messages as Subscribe streams them (see
        :meth:`Subscription.take_protos`): those a :class:`Message` would have,
        without one being built (nor its headers dict), and only the users' headers.

        ``first``: the caller knows that the offsets run on from ``first`` without a
        gap, so they are not read one by one.
        """
        if first is None:
            self.offsets.extend([pb.offset for pb in pbs])
        else:
            self.offsets.extend(range(first, first + len(pbs)))
        keys = self.keys.append
        values = self.values.append
        timestamps = self.timestamps.append
        subjects = self.subjects.append
        header_ends = self.header_ends.append
        header_keys = self.header_keys
        for pb in pbs:
            keys(pb.key or None)  # as a Message reads it: an empty key is no key
            values(pb.value)
            timestamps(pb.timestamp)
            subjects(pb.subject)
            headers = pb.headers
            n = len(headers)
            # Two lookups tell whether only the server's own headers are there: far
            # cheaper than walking the protobuf map.
            if n and n != ("subject" in headers) + ("reply" in headers):
                for k in headers:
                    if k not in _SERVER_HEADERS:
                        header_keys.append(k)
                        self.header_values.append(headers[k])
            header_ends(len(header_keys))

    def to_batch(self, arrow_schema: Any) -> Any:
        """One Arrow ``RecordBatch`` in ``arrow_schema`` (the source's read schema)."""
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [self._column(f.name, f.type) for f in arrow_schema], schema=arrow_schema
        )

    def _column(self, name: str, arrow_type: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        n = len(self.offsets)
        if name == "stream":
            return pa.repeat(pa.scalar(self.stream, arrow_type), n)
        if name == "partition":
            return pa.array(np.full(n, self.partition, dtype=np.int32), arrow_type)
        if name == "offset":
            return pa.array(self.offsets, arrow_type)
        if name == "key":
            return pa.array(self.keys, arrow_type)
        if name == "value":
            return pa.array(self.values, arrow_type)
        if name == "timestamp":
            # Liftbridge stamps nanoseconds; Spark timestamps are microseconds.
            return pa.array(np.array(self.timestamps, dtype=np.int64) // 1000, arrow_type)
        if name == "subject":
            return pa.array(self.subjects, arrow_type)
        if name == "headers":
            # Built from flat keys, values and offsets: Arrow's conversion of a list
            # of lists of pairs costs about ten times as much per row.
            return pa.MapArray.from_arrays(
                pa.array(self.header_ends, pa.int32()),
                pa.array(self.header_keys, arrow_type.key_type),
                pa.array(self.header_values, arrow_type.item_type),
                type=arrow_type,
            )
        raise ValueError(f"no column {name!r} in the liftbridge read schema")
