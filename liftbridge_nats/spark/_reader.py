"""Batch reads: plan a snapshot of offset ranges on the driver, read them in tasks.

Planning asks every partition leader for its high watermark once; the ranges end
there, so a batch read returns exactly what was committed when it was planned, no
matter what is published while it runs. Each task reads its range with a Subscribe
bounded by ``StopPosition.OFFSET`` and hands Spark Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from liftbridge_nats.messages import Message

from . import _io
from ._options import ReadOptions
from ._planning import OffsetRange, plan_ranges, resolve_bounds
from ._schema import arrow_read_schema

__all__ = ["LiftbridgeReader", "messages_to_batch", "read_range", "snapshot_bounds"]

# Rows per Arrow batch handed to Spark: large enough to amortise the per-batch cost,
# small enough to keep a task's memory flat.
CHUNK_ROWS = 4096

# Headers the server itself stores on every message (the NATS subject and reply
# subject); they are already columns, or meaningless to readers.
_SERVER_HEADERS = frozenset({"subject", "reply"})


def messages_to_batch(msgs: Sequence[Message], arrow_schema: Any) -> Any:
    """One Arrow ``RecordBatch`` in the source's schema from messages of one partition."""
    import pyarrow as pa

    types = [f.type for f in arrow_schema]
    columns = [
        [m.stream for m in msgs],
        [m.partition for m in msgs],
        [m.offset for m in msgs],
        [m.key for m in msgs],
        [m.value for m in msgs],
        # Liftbridge stamps nanoseconds; Spark timestamps are microseconds.
        [m.timestamp // 1000 for m in msgs],
        [m.subject for m in msgs],
        [[(k, v) for k, v in m.headers.items() if k not in _SERVER_HEADERS] for m in msgs],
    ]
    arrays = [pa.array(col, type=t) for col, t in zip(columns, types, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def read_range(opts: ReadOptions, rng: OffsetRange, arrow_schema: Any) -> Iterator[Any]:
    """Arrow batches of every message of ``rng`` (one task's work)."""
    for msgs in _io.iter_range(
        opts.brokers, opts.timeout, rng, CHUNK_ROWS, resume=opts.resume_paused
    ):
        yield messages_to_batch(msgs, arrow_schema)


def snapshot_bounds(opts: ReadOptions) -> dict[int, tuple[int, int]]:
    """``(from, until)`` per partition from the options and the current high watermarks."""
    hws = _io.run(
        _io.fetch_high_watermarks(
            opts.brokers, opts.stream, opts.timeout, resume_paused=opts.resume_paused
        )
    )
    override = None
    if opts.starting_timestamp_ms is not None:
        override = _io.run(_io.resolve_timestamp(opts, hws, opts.starting_timestamp_ms))
    return resolve_bounds(hws, opts.starting, opts.ending, starting_override=override)


class LiftbridgeReader(DataSourceReader):
    """Batch reader: the plan is made (and the options checked) when it is created."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._arrow_schema = arrow_read_schema(schema)
        # Planned here, on the driver, so that a bad stream name or partition fails
        # the query before any task is scheduled.
        self._ranges = plan_ranges(opts.stream, snapshot_bounds(opts), opts.max_offsets_per_split)

    def partitions(self) -> Sequence[InputPartition]:
        """One range per stream partition, more when a partition exceeds the split size."""
        return list(self._ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of the range (runs in a Spark task)."""
        if not isinstance(partition, OffsetRange):
            # Spark plans one empty partition when partitions() returns none.
            return iter(())
        return read_range(self._opts, partition, self._arrow_schema)
