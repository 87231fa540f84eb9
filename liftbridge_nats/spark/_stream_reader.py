"""Streaming reads: per-partition offsets in Spark's checkpoint, one range per batch.

An offset, as Spark checkpoints it, is ``{"<stream>": {"<partition>": next_offset}}``.
A micro-batch reads exactly ``[start, end)`` of each partition, where ``end`` comes
from the leaders' high watermarks when Spark asks for the latest offset; a restarted
query replays or continues from the checkpointed offsets, so nothing is lost and
nothing is read twice (given a sink that is itself idempotent per batch).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import _io
from ._options import ReadOptions
from ._planning import (
    OffsetRange,
    cap_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
)
from ._reader import read_range, snapshot_bounds
from ._schema import arrow_read_schema

__all__ = ["LiftbridgeStreamReader"]


class LiftbridgeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with ``maxOffsetsPerTrigger`` and ``Trigger.AvailableNow``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._arrow_schema = arrow_read_schema(schema)
        # The end offsets Trigger.AvailableNow must not go beyond (None otherwise).
        self._target: dict[int, int] | None = None

    # ------------------------------------------------------------------ driver side

    def _available(self) -> dict[int, int]:
        o = self._opts
        hws = _io.run(
            _io.fetch_high_watermarks(o.brokers, o.stream, o.timeout, resume_paused=o.resume_paused)
        )
        return {p: hw + 1 for p, hw in hws.items()}

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` (default latest) or a timestamp."""
        bounds = snapshot_bounds(self._opts)
        return offsets_to_json(self._opts.stream, {p: b[0] for p, b in bounds.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as a row limit, else everything available."""
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next micro-batch (``start`` itself when nothing is new)."""
        begin = offsets_from_json(self._opts.stream, start)
        available = self._target if self._target is not None else self._available()
        # A partition missing from the checkpoint (none can be added to a Liftbridge
        # stream today, but be safe) starts at its beginning.
        begin = {p: begin.get(p, 0) for p in available}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_to_json(self._opts.stream, cap_offsets(begin, available, max_rows))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The newest offsets stored, for the query's progress report."""
        return offsets_to_json(self._opts.stream, self._available())

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target at what is committed now (Trigger.AvailableNow)."""
        self._target = self._available()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The offset ranges between two checkpointed offsets."""
        begin = offsets_from_json(self._opts.stream, start)
        until = offsets_from_json(self._opts.stream, end)
        bounds = {p: (begin.get(p, 0), u) for p, u in until.items()}
        bounds = {p: (min(b, u), u) for p, (b, u) in bounds.items()}
        return plan_ranges(self._opts.stream, bounds, self._opts.max_offsets_per_split)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in Liftbridge."""

    def stop(self) -> None:
        """Nothing to free: every call opens and closes its own connections."""

    # ------------------------------------------------------------------ executor side

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of one range (runs in a Spark task)."""
        assert isinstance(partition, OffsetRange)
        return read_range(self._opts, partition, self._arrow_schema)
