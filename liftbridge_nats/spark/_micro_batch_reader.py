"""Streaming reads: per-partition offsets in Spark's checkpoint, one range per batch.

An offset, as Spark checkpoints it, is ``{"<stream>": {"<partition>": next_offset}}``
over every stream the query reads. A micro-batch reads exactly ``[start, end)`` of
each partition, where ``end`` comes from the leaders' high watermarks when Spark asks
for the latest offset; a restarted query replays or continues from the checkpointed
offsets, so nothing is lost and nothing is read twice (given a sink that is itself
idempotent per batch, such as Spark's file sink).

Between micro-batches the set of streams may change: a stream that starts matching
``streamPattern`` (or is added to ``streams``) is read from its oldest offset, as
Kafka's source does with new partitions, after one micro-batch that only records
where it starts. A stream deleted while the query reads it, or a partition that now
ends before where the query got to (deleted and created again), is data loss.
"""

from __future__ import annotations

import contextlib
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

from liftbridge_nats import InvalidArgumentError
from liftbridge_nats._log import get_logger
from liftbridge_nats.sync._portal import PortalClosedError

from . import _connections, _io
from ._dataloss import data_loss
from ._lookup import Lookups, lookups
from ._options import ReadOptions
from ._planning import (
    OffsetRange,
    Offsets,
    cap_offsets,
    check_partitions,
    flatten,
    lookups_needed,
    nest,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve_starts,
)
from ._positions import EARLIEST, PositionSpec
from ._reader import read_range
from ._schema import arrow_read_schema

__all__ = ["LiftbridgeStreamReader"]

_log = get_logger("spark")
_FROM_OLDEST = PositionSpec(default=EARLIEST)


async def _available(lb: Lookups, opts: ReadOptions) -> Offsets:
    """Per existing stream the query reads: each partition's high watermark + 1."""
    names = await lb.streams(opts.selection, must_exist=False)
    hws = await lb.high_watermarks(names)
    return {s: {p: hw + 1 for p, hw in parts.items()} for s, parts in hws.items()}


async def _initial(opts: ReadOptions) -> Offsets:
    async with lookups(opts) as lb:
        names = await lb.streams(opts.selection)
        hws = await lb.high_watermarks(names)
        check_partitions(opts.starting, hws, "startingOffsets")
        found = await lb.offsets(lookups_needed(hws, opts.starting), hws)
    return resolve_starts(hws, opts.starting, found)


class LiftbridgeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with ``maxOffsetsPerTrigger`` and ``Trigger.AvailableNow``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._opts = opts
        self._arrow_schema = arrow_read_schema(schema)
        # What Trigger.AvailableNow must not go beyond (None otherwise).
        self._target: Offsets | None = None

    # ------------------------------------------------------------------ driver side

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` (default latest) or a time."""
        return offsets_to_json(_io.run(_initial(self._opts)))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as a row limit, else everything available."""
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _checked_start(self, start: Offsets) -> Offsets:
        """The checkpointed offsets of the streams this query still reads."""
        selection = self._opts.selection
        kept = {s: parts for s, parts in start.items() if selection.matches(s)}
        if start and not kept:
            raise InvalidArgumentError(
                f"the checkpoint holds offsets of stream(s) {sorted(start)}, but the query "
                f"reads {selection.describe()}; use a new checkpointLocation for other streams."
            )
        for stream in sorted(set(start) - set(kept)):
            _log.info("stream %r is no longer read by this query: dropped", stream)
        return kept

    async def _next_end(self, start: Offsets, max_rows: int | None) -> Offsets:
        fail = self._opts.fail_on_data_loss
        async with lookups(self._opts) as lb:
            available = (
                self._target if self._target is not None else await _available(lb, self._opts)
            )
            for stream in sorted(set(start) - set(available)):
                data_loss(
                    fail,
                    f"stream {stream!r} was deleted while the query read it; what it held "
                    f"from offsets {start[stream]} on was not read",
                )
            begin = flatten({s: parts for s, parts in start.items() if s in available})
            avail = flatten(available)
            for key in sorted(set(begin) & set(avail)):
                if avail[key] < begin[key]:
                    data_loss(
                        fail,
                        f"stream {key[0]!r} partition {key[1]} now ends at offset "
                        f"{avail[key] - 1}, before offset {begin[key]} that the query had "
                        "reached (the stream was deleted and created again, or lost messages "
                        "in a leader fail-over)",
                    )
                    begin[key] = avail[key]
            new = {k: hw for k, hw in avail.items() if k not in begin}
            oldest: dict[tuple[str, int], int] = {}
            if new:
                hws = nest({k: until - 1 for k, until in new.items()})
                found = await lb.offsets(lookups_needed(hws, _FROM_OLDEST), hws)
                oldest = flatten(resolve_starts(hws, _FROM_OLDEST, found))
                _log.info("new partitions %s: read from their oldest offsets", sorted(new))
        end = cap_offsets(begin, {k: v for k, v in avail.items() if k in begin}, max_rows)
        # A new partition enters at its oldest offset with nothing to read yet: the next
        # micro-batch starts there, the same on a replay as on the first run.
        end.update(oldest)
        return nest(end)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End offsets of the next micro-batch (``start`` itself when nothing is new)."""
        begin = self._checked_start(offsets_from_json(start))
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_to_json(_io.run(self._next_end(begin, max_rows)))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The newest offsets stored, for the query's progress report."""

        async def newest() -> Offsets:
            async with lookups(self._opts) as lb:
                return await _available(lb, self._opts)

        return offsets_to_json(_io.run(newest()))

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target at what is committed now (Trigger.AvailableNow)."""

        async def now() -> Offsets:
            async with lookups(self._opts) as lb:
                return await _available(lb, self._opts)

        self._target = _io.run(now())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The offset ranges between two checkpointed offsets.

        A partition absent from ``start`` (new to the query) has nothing to read in this
        micro-batch; one whose end is before its start (data loss, skipped) neither.
        """
        begin = flatten(offsets_from_json(start))
        until = flatten(offsets_from_json(end))
        bounds: dict[str, dict[int, tuple[int, int]]] = {}
        for (stream, partition), u in until.items():
            b = begin.get((stream, partition), u)
            bounds.setdefault(stream, {})[partition] = (min(b, u), u)
        return plan_ranges(bounds, self._opts.max_offsets_per_split)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in Liftbridge."""

    def stop(self) -> None:
        """Close the client the driver-side calls shared (the query has stopped)."""
        opts = self._opts
        with contextlib.suppress(PortalClosedError):
            _io.run(_connections.close_client(opts.brokers, opts.timeout, opts.tls))

    # ------------------------------------------------------------------ executor side

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of one range (runs in a Spark task)."""
        assert isinstance(partition, OffsetRange)
        return read_range(self._opts, partition, self._arrow_schema)
