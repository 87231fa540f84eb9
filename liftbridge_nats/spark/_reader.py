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

from liftbridge_nats._log import get_logger

from . import _io
from ._lookup import lookups
from ._options import ReadOptions
from ._partition_reader import iter_range
from ._planning import (
    OffsetRange,
    check_partitions,
    lookups_needed,
    plan_ranges,
    resolve_bounds,
)
from ._schema import arrow_read_schema

__all__ = ["LiftbridgeReader", "plan_bounds", "read_range"]

_log = get_logger("spark")

# Rows per Arrow batch handed to Spark: large enough to amortise the per-batch cost,
# small enough to keep a task's memory flat.
CHUNK_ROWS = 4096


def read_range(opts: ReadOptions, rng: OffsetRange, arrow_schema: Any) -> Iterator[Any]:
    """Arrow batches of every message of ``rng`` (one task's work)."""
    for chunk in iter_range(opts, rng, CHUNK_ROWS):
        yield chunk.to_batch(arrow_schema)


async def _plan(opts: ReadOptions) -> dict[str, dict[int, tuple[int, int]]]:
    async with lookups(opts) as lb:
        names = await lb.streams(opts.selection)
        if not names:
            _log.warning("no stream matches %s: the read is empty", opts.selection.describe())
        hws = await lb.high_watermarks(names)
        check_partitions(opts.starting, hws, "startingOffsets")
        check_partitions(opts.ending, hws, "endingOffsets")
        found = await lb.offsets(lookups_needed(hws, opts.starting, opts.ending), hws)
    return resolve_bounds(hws, opts.starting, opts.ending, found)


def plan_bounds(opts: ReadOptions) -> dict[str, dict[int, tuple[int, int]]]:
    """``(from, until)`` per stream and partition, from the options and the cluster now."""
    return _io.run(_plan(opts))


class LiftbridgeReader(DataSourceReader):
    """Batch reader: the plan is made (and the options checked) when it is created."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._arrow_schema = arrow_read_schema(schema)
        # Planned here, on the driver, so that a bad stream name or partition fails
        # the query before any task is scheduled.
        self._ranges = plan_ranges(plan_bounds(opts), opts.max_offsets_per_split)

    def partitions(self) -> Sequence[InputPartition]:
        """One range per stream partition, more when a partition exceeds the split size."""
        return list(self._ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of the range (runs in a Spark task)."""
        if not isinstance(partition, OffsetRange):
            # Spark plans one empty partition when partitions() returns none.
            return iter(())
        return read_range(self._opts, partition, self._arrow_schema)
